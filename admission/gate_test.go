package admission

import (
	"testing"
	"time"
)

// fakeCore is the core as the gate sees it: the messages it holds.
type fakeCore map[int64]bool

func (c fakeCore) Messages() int       { return len(c) }
func (c fakeCore) Has(inum int64) bool { return c[inum] }

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestGateMessageLimit(t *testing.T) {
	g := NewGate(Limits{Messages: 2, Recipients: 100})
	c := fakeCore{}
	for inum := int64(1); inum <= 2; inum++ {
		if !g.Room(t0, c, nil) {
			t.Fatalf("no room for message %d under a limit of 2", inum)
		}
		c[inum] = true
		g.Admit(inum, 1)
	}
	if g.Room(t0, c, nil) || !g.Full(c) {
		t.Fatal("room for a third message under a limit of 2")
	}
	delete(c, 1)
	g.Left(1)
	if !g.Room(t0, c, nil) || g.Full(c) {
		t.Fatal("no room once a message left")
	}
}

// TestGateRecipientLimit: a message is admitted whole while the count is
// below the limit, so it may overshoot by its own size; final outcomes
// lower the count.
func TestGateRecipientLimit(t *testing.T) {
	g := NewGate(Limits{Messages: 100, Recipients: 5})
	c := fakeCore{}
	if !g.Room(t0, c, nil) {
		t.Fatal("no room in an empty core")
	}
	c[1] = true
	g.Admit(1, 4)
	if !g.Room(t0, c, nil) {
		t.Fatal("no room at 4 recipients of 5")
	}
	c[2] = true
	g.Admit(2, 3) // 7: over the limit by the message's own size
	if g.Room(t0, c, nil) || g.Recipients() != 7 {
		t.Fatalf("room at %d recipients of 5", g.Recipients())
	}
	g.Settled(2)
	g.Settled(2)
	if g.Room(t0, c, nil) {
		t.Fatal("room at 5 recipients of 5")
	}
	g.Settled(2)
	if !g.Room(t0, c, nil) || g.Recipients() != 4 {
		t.Fatalf("no room at %d recipients after three final outcomes", g.Recipients())
	}
	g.Settled(3) // never admitted: no count to lower
	if g.Recipients() != 4 {
		t.Fatalf("an unknown message's outcome changed the count to %d", g.Recipients())
	}
}

// TestGateReconciles: a message that leaves the core without a Left (a
// resync storm, a vanished file) is released by reconciling, at most once
// per ReconcileEvery while the limit holds.
func TestGateReconciles(t *testing.T) {
	g := NewGate(Limits{Messages: 100, Recipients: 2})
	c := fakeCore{1: true, 2: true}
	g.Admit(1, 1)
	g.Admit(2, 1)
	if g.Room(t0.Add(ReconcileEvery), c, nil) {
		t.Fatal("room at the limit")
	}
	delete(c, 1) // gone without a word
	var released []int64
	rel := func(inum int64) { released = append(released, inum) }
	if g.Room(t0.Add(ReconcileEvery+time.Millisecond), c, rel) {
		t.Fatal("reconciled again within ReconcileEvery")
	}
	if w := g.Wake(); !w.Equal(t0.Add(2 * ReconcileEvery)) {
		t.Fatalf("wake at %v, want the next reconciliation", w.Sub(t0))
	}
	if !g.Room(t0.Add(2*ReconcileEvery), c, rel) {
		t.Fatal("no room after reconciling a message the core no longer holds")
	}
	if len(released) != 1 || released[0] != 1 || g.Recipients() != 1 || g.Messages() != 1 {
		t.Fatalf("released %v, count %d over %d messages", released, g.Recipients(), g.Messages())
	}
	if !g.Wake().IsZero() {
		t.Fatal("a wake while below the limit")
	}
}

func TestGateNoLimits(t *testing.T) {
	g := NewGate(Limits{})
	c := fakeCore{}
	for inum := int64(1); inum <= 1000; inum++ {
		if !g.Room(t0, c, nil) {
			t.Fatalf("no room for message %d without limits", inum)
		}
		c[inum] = true
		g.Admit(inum, 100)
	}
}

package thread

import (
	"math/rand"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAgenda measures the agenda's hot operation: a thread's wake
// time moved (a deferral, a back-off, a retry), the heap holding n
// threads. Costs must stay logarithmic in n.
func BenchmarkAgenda(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{100, 10_000, 1_000_000} {
		b.Run("threads="+strconv.Itoa(n), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			h := NewHeap(ByWake)
			ts := make([]*Thread, n)
			for i := range ts {
				ts[i] = New(Key{Host: strconv.Itoa(i)}, Window{})
				h.SetWake(ts[i], t0.Add(time.Duration(rng.Int63n(int64(time.Hour)))))
			}
			b.ResetTimer()
			for i := range b.N {
				t := ts[i%n]
				h.SetWake(t, t0.Add(time.Duration(rng.Int63n(int64(time.Hour)))))
			}
		})
	}
}

// TestAgendaOrder checks the heap against a sort after random moves and
// removals: popping the minimum repeatedly yields non-decreasing times, and
// every thread knows its place.
func TestAgendaOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewSource(2))
	h := NewHeap(ByWake)
	ts := make([]*Thread, 500)
	for i := range ts {
		ts[i] = New(Key{Host: strconv.Itoa(i)}, Window{})
	}
	for range 5000 {
		th := ts[rng.Intn(len(ts))]
		if rng.Intn(4) == 0 {
			h.SetWake(th, time.Time{})
		} else {
			h.SetWake(th, t0.Add(time.Duration(rng.Intn(1000))*time.Second))
		}
	}
	if err := h.Check(); err != nil {
		t.Fatal(err)
	}
	for _, th := range ts {
		if h.Has(th) == th.Wake().IsZero() {
			t.Fatalf("thread %s: in the agenda %v, wake %v", th.Host, h.Has(th), th.Wake())
		}
	}
	var last time.Time
	for h.Len() > 0 {
		th := h.Min()
		if th.Wake().Before(last) {
			t.Fatalf("popped %v after %v", th.Wake(), last)
		}
		last = th.Wake()
		h.SetWake(th, time.Time{})
		if h.Has(th) || !th.Wake().IsZero() {
			t.Fatal("a removed thread is still on the agenda")
		}
	}
}

// TestHeapsOfBothOrders: a thread is on the agenda and in its ring's
// wanting heap at once, each heap keeping its own place; pushing it twice
// into heaps of one order is a broken invariant.
func TestHeapsOfBothOrders(t *testing.T) {
	agenda, ring := NewHeap(ByWake), NewHeap(ByBest)
	th := New(Key{Host: "a"}, Window{})
	agenda.SetWake(th, time.Unix(100, 0))
	ring.Push(th)
	if !agenda.Has(th) || !ring.Has(th) {
		t.Fatal("a thread in two heaps of different orders lost one")
	}
	ring.Remove(th)
	if !agenda.Has(th) || ring.Has(th) {
		t.Fatal("removing it from one heap touched the other")
	}
	other := NewHeap(ByWake)
	defer func() {
		if recover() == nil {
			t.Fatal("a thread went into two agendas")
		}
	}()
	other.Push(th)
}

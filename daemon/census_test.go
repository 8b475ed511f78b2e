package daemon

import (
	"context"
	"strings"
	"testing"
	"time"
)

// censusRun runs the census the loop would start now, serving its calls
// on the loop as Run does, until it ends.
func censusRun(d *Daemon) {
	if d.operator.calls == nil {
		d.operator.calls = make(chan func())
	}
	d.censusCheck(d.now())
	for d.census.running {
		f := <-d.operator.calls
		f()
	}
}

// TestCensusWalksOnlyBeyondCore: with the core at its limit and every
// file of the spool in it, the census does not walk the spool; with files
// beyond the core it walks, reading only the files the daemon has not
// read — not those in core, not those read and waiting for room, which it
// counts from memory — and counts every message on disk only.
func TestCensusWalksOnlyBeyondCore(t *testing.T) {
	t.Run("all in core", func(t *testing.T) {
		d := intakeDaemon(t, "", 5, 1000, 5, 1, false)
		t.Cleanup(d.close)
		d.startScan(d.now())
		for i := 0; i < 10 && !d.intakeIdle(); i++ {
			step(d)
			discard(d.core)
		}
		if d.core.Messages() != 5 || !d.intakeIdle() {
			t.Fatalf("core holds %d messages, intake idle %v: want all 5 in core", d.core.Messages(), d.intakeIdle())
		}
		d.censusCheck(d.now())
		if d.census.running || d.census.walks != 0 {
			t.Fatal("the census walks the spool though every file is in core")
		}
		if got := d.spoolLines(d.now()); got[len(got)-1] != "Spool: Msgs 5 Rcpnts 5; in core Msgs 5 Rcpnts 5" {
			t.Errorf("mailq's last line %q", got[len(got)-1])
		}
	})
	t.Run("beyond", func(t *testing.T) {
		// 40 one-recipient messages, 5 recipients in core, a FIFO of 8
		// names: the core fills, files read beyond it wait for room in
		// ready, the FIFO fills and the pass pauses before the rest.
		d := intakeDaemon(t, "", 100, 5, 40, 1, false)
		t.Cleanup(d.close)
		d.in.max = 8
		d.startScan(d.now())
		for range 4 {
			step(d)
			discard(d.core)
		}
		read := len(d.in.ready)
		if d.core.Messages() != 5 || read == 0 || d.in.pending() != 8 || d.in.scan == nil {
			t.Fatalf("core %d, read and waiting %d, FIFO %d, pass running %v: want 5, some, 8, true",
				d.core.Messages(), read, d.in.pending(), d.in.scan != nil)
		}
		censusRun(d)
		c := d.census.last
		if d.census.walks != 1 || c.at.IsZero() {
			t.Fatalf("walks %d, counted at %v: want one walk", d.census.walks, c.at)
		}
		if c.messages != 35 || c.recipients != 35 {
			t.Errorf("on disk only: %d messages, %d recipients; want 35 and 35", c.messages, c.recipients)
		}
		if c.peeked != 35-read {
			t.Errorf("the walk read %d files; want the %d not yet read (not the 5 in core nor the %d read)", c.peeked, 35-read, read)
		}
		if got := d.spoolLines(d.now()); !strings.HasPrefix(got[len(got)-1],
			"Spool: Msgs 40 Rcpnts 40; in core Msgs 5 Rcpnts 5; on disk only Msgs 35 Rcpnts 35") {
			t.Errorf("mailq's last line %q", got[len(got)-1])
		}
	})
}

// TestCensusWaitsOutTheStart: a scheduler that starts on a backlog larger
// than its limits does not walk the spool in its first censusEvery: the
// intake reads those files as room frees, and a walk beside it read them
// a second time. The clock stands still, so the drain is all within the
// start.
func TestCensusWaitsOutTheStart(t *testing.T) {
	agents := bins.AgentsFor(t)
	d := intakeDaemon(t, agents["sink"], 100, 5, 40, 1, true)
	d.in.max = 8
	t0 := d.now()
	d.now = func() time.Time { return t0 }
	full := false
	d.in.onStep = func() {
		if d.in.gate.Full(d.core) && d.in.beyond() {
			full = true
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !full {
		t.Fatal("the core never filled with files beyond it: the test shows nothing")
	}
	if d.census.walks != 0 {
		t.Errorf("the census walked the spool %d times during the start", d.census.walks)
	}
	if want := t0.Add(censusEvery); !d.census.next.Equal(want) {
		t.Errorf("the first walk is due at %v; want %v (censusEvery after the start)", d.census.next, want)
	}
}

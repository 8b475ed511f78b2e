package admission

import (
	"testing"
	"time"
)

// TestJudgeLocks: the rule by which a lock held by a live process is
// stale.
func TestJudgeLocks(t *testing.T) {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	limits := func(channel, host string) (time.Duration, time.Duration) { return 10 * time.Minute, 7 * 24 * time.Hour }
	ours := func(pid int) bool { return pid == 7 }
	lock := func(pid int) Lock { return Lock{PID: pid, Channel: "smtp", Host: "h"} }
	started := func(pid int, at time.Time) Lock {
		return Lock{PID: pid, Channel: "smtp", Host: "h", Started: at, FileOpen: NotOpen}
	}
	holding := func(pid int, at time.Time, o FileOpen) Lock {
		return Lock{PID: pid, Channel: "smtp", Host: "h", Started: at, FileOpen: o}
	}
	for _, c := range []struct {
		name      string
		now       time.Time
		changed   time.Time
		arrival   time.Time
		locks     []Lock
		stale     bool
		staleAt   time.Time
		ours      bool
		waitOnPID int
	}{
		{"not ours, from before the start", start.Add(time.Second), start.Add(-time.Second), start.Add(-time.Hour), []Lock{lock(5)}, true, time.Time{}, false, 0},
		{"ours, from before the start", start.Add(time.Second), start.Add(-time.Second), start, []Lock{lock(7)}, false, time.Time{}, true, 7},
		{"not ours, young", start.Add(5 * time.Minute), start.Add(time.Minute), start, []Lock{lock(5)}, false, start.Add(11 * time.Minute), false, 5},
		{"not ours, past jobtimeout", start.Add(11 * time.Minute), start.Add(time.Minute), start, []Lock{lock(5)}, true, time.Time{}, false, 0},
		{"ours, past jobtimeout", start.Add(time.Hour), start.Add(time.Minute), start, []Lock{lock(7)}, false, time.Time{}, true, 7},
		{"one of two ours", start.Add(time.Hour), start.Add(time.Minute), start, []Lock{lock(5), lock(7)}, false, time.Time{}, true, 7},
		{"not ours, message past expiry", start.Add(2 * time.Minute), start.Add(time.Minute), start.Add(-8 * 24 * time.Hour), []Lock{lock(5)}, true, time.Time{}, false, 0},
		// An earlier scheduler's agent, left running by a SIGKILL, may
		// still be delivering: it waits for jobtimeout as any live lock.
		{"not ours, from before the start, its process older", start.Add(time.Second), start.Add(-time.Second), start.Add(-time.Hour),
			[]Lock{started(5, start.Add(-time.Minute))}, false, start.Add(10*time.Minute - time.Second), false, 5},
		{"not ours, from before the start, its process older, past jobtimeout", start.Add(10 * time.Minute), start.Add(-time.Second), start.Add(-time.Hour),
			[]Lock{started(5, start.Add(-time.Minute))}, true, time.Time{}, false, 0},
		// A process started after the lock did not write it.
		{"not ours, its process younger than the lock", start.Add(2 * time.Minute), start.Add(time.Minute), start,
			[]Lock{started(5, start.Add(time.Minute+2*time.Second))}, true, time.Time{}, false, 0},
		{"not ours, from before the start, its process younger", start.Add(2 * time.Second), start.Add(-time.Second), start.Add(-time.Hour),
			[]Lock{started(5, start.Add(time.Second+time.Millisecond))}, true, time.Time{}, false, 0},
		{"not ours, its process a second younger than the lock: in doubt", start.Add(2 * time.Minute), start.Add(time.Minute), start,
			[]Lock{started(5, start.Add(time.Minute+time.Second))}, false, start.Add(11 * time.Minute), false, 5},
		// A process that has the file open may have written the lock,
		// whatever /proc's start says (a clock stepped forward since): it
		// waits for jobtimeout as any live lock; so does one whose
		// descriptors could not be read.
		{"not ours, its process younger but holding the file", start.Add(2 * time.Minute), start.Add(time.Minute), start,
			[]Lock{holding(5, start.Add(time.Hour), HasOpen)}, false, start.Add(11 * time.Minute), false, 5},
		{"not ours, its process younger, may hold the file", start.Add(2 * time.Minute), start.Add(time.Minute), start,
			[]Lock{holding(5, start.Add(time.Hour), MayHaveOpen)}, false, start.Add(11 * time.Minute), false, 5},
		{"not ours, from before the start, start unknown, holding the file", start.Add(2 * time.Second), start.Add(-time.Second), start.Add(-time.Hour),
			[]Lock{holding(5, time.Time{}, HasOpen)}, false, start.Add(10*time.Minute - time.Second), false, 5},
		{"not ours, holding the file, past jobtimeout", start.Add(11 * time.Minute), start.Add(time.Minute), start,
			[]Lock{holding(5, start.Add(time.Hour), HasOpen)}, true, time.Time{}, false, 0},
	} {
		v := JudgeLocks(c.now, start, Locks{Locks: c.locks, Changed: c.changed, Arrival: c.arrival}, ours, limits)
		if v.Stale != c.stale || v.Ours != c.ours || !v.StaleAt.Equal(c.staleAt) || (!c.stale && v.PID != c.waitOnPID) {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
}

func TestReadRetryDelayDoublesToItsBound(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute, 5 * time.Minute}
	for i, w := range want {
		if got := ReadRetryDelay(i + 1); got != w {
			t.Errorf("failure %d: delay %v, want %v", i+1, got, w)
		}
	}
	for _, n := range []int{19, 20, 64, 1000} {
		if got := ReadRetryDelay(n); got != ReadRetryMax {
			t.Errorf("failure %d: delay %v, want %v", n, got, ReadRetryMax)
		}
	}
}

func TestLockRetryAt(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	if got := LockRetryAt(now, Verdict{PID: 7, Ours: true}); !got.Equal(now.Add(LiveLockDelay)) {
		t.Errorf("our agent's lock: read again at %v, want after the live-lock delay", got.Sub(now))
	}
	if got := LockRetryAt(now, Verdict{PID: 5, StaleAt: now.Add(10 * time.Second)}); !got.Equal(now.Add(11 * time.Second)) {
		t.Errorf("a lock stale in 10 s: read again at %v, want 11s", got.Sub(now))
	}
	if got := LockRetryAt(now, Verdict{PID: 5, StaleAt: now.Add(time.Hour)}); !got.Equal(now.Add(LiveLockDelay)) {
		t.Errorf("a lock stale in an hour: read again at %v, want the live-lock delay", got.Sub(now))
	}
}

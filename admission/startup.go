package admission

import "time"

// The startup read. A scheduler that starts on a large queue first has to
// read it: until a message is in core nothing schedules it, not even its
// expiry or the destination's other recipients. Reading costs CPU (some
// 25 µs a file), and so does delivery (some 55 µs a recipient across the
// scheduler and its agents): at full delivery speed the scan gets half the
// machine and a queue of 100 000 files takes three times as long to read.
// So while the queue found at start is read, the read has priority:
// delivery starts at once, with the first batch, but every ring runs at
// most startup_maxring agents (default 2; 0 turns this off). The startup
// read ends, and delivery opens to the configured limits for good, at the
// first of:
//
//   - the first pass over the queue is in core;
//   - the core is full (the Gate's limits): the rest of the queue is then
//     read only as delivery frees room, so holding delivery back would slow
//     the read too — on a queue larger than the limits, the startup read is
//     the first core-full of it;
//   - StartupMax after the first pass began, for a slow disk.
//
// The cap is the core's ring cap (core.Core.SetRingCap), not a rewritten
// configuration: a reload during the startup read keeps it, and lifting
// it changes nothing else.

// StartupMax bounds the startup read: past it delivery opens whatever the
// read's progress.
const StartupMax = 30 * time.Second

// Startup decides the startup read. The zero value is off.
type Startup struct {
	maxRing int
	on      bool
	end     time.Time // StartupMax after the first pass began; zero before
}

// NewStartup returns the startup read of a scheduler that starts with
// startup_maxring maxRing (0 or less: no startup read).
func NewStartup(maxRing int) Startup {
	return Startup{maxRing: maxRing, on: maxRing > 0}
}

// On reports whether the startup read goes on.
func (s *Startup) On() bool { return s.on }

// RingCap is how many agents each ring may run now: startup_maxring while
// the startup read goes on, else 0 (no cap but the clauses' maxring).
func (s *Startup) RingCap() int {
	if s.on {
		return s.maxRing
	}
	return 0
}

// Begin tells that the first pass over the queue begins at now; later
// calls change nothing.
func (s *Startup) Begin(now time.Time) {
	if s.end.IsZero() {
		s.end = now.Add(StartupMax)
	}
}

// Check ends the startup read when one of its ends is reached, and says
// why ("queue read", "core full", "time limit"); "" while it goes on or
// once it is over. read tells that the first pass is in core, full that
// the gate is full.
func (s *Startup) Check(now time.Time, read, full bool) string {
	if !s.on {
		return ""
	}
	why := ""
	switch {
	case read:
		why = "queue read"
	case full:
		why = "core full"
	case !s.end.IsZero() && !now.Before(s.end):
		why = "time limit"
	default:
		return ""
	}
	s.on = false
	return why
}

// Wake is when Check must be asked again at the latest: the time limit
// while the startup read goes on; zero otherwise.
func (s *Startup) Wake() time.Time {
	if !s.on {
		return time.Time{}
	}
	return s.end
}

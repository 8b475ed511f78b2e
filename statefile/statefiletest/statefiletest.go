// Package statefiletest holds the learned destination states that the
// state file's tests and the daemon's share: the format's round trip and
// the daemon's save and restore must agree on the same destinations.
package statefiletest

import (
	"fmt"
	"time"

	"zsched/core"
	"zsched/thread"
)

// T0 is the fixtures' time: Sample's updated times are at or just before it.
var T0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Sample returns destinations that use every field of the file, sorted: a
// window with fractional feedback and a confirmed ceiling, a dead one with
// its dead-until time, and one in mid slow start.
func Sample() []core.Destination {
	return []core.Destination{
		{Channel: "smtp", Host: "a.example", Window: thread.WindowState{Concurrency: 7, Success: 1.0 / 3, Failure: 0.1, FailCohorts: 0.2,
			Ceiling: 6, Strikes: 2, CeilingAt: T0.Add(-2 * time.Minute)},
			Updated: T0.Add(-time.Minute)},
		{Channel: "smtp", Host: "dead.example", Window: thread.WindowState{Concurrency: 0},
			DeadUntil: T0.Add(17*time.Minute + 123*time.Millisecond), Updated: T0},
		{Channel: "smtp", Host: "slow.example", Window: thread.WindowState{Concurrency: 2, Success: 0.5, Starting: true},
			Updated: T0},
	}
}

// Many returns n destinations in core (Updated is now), sorted.
func Many(n int, now time.Time) []core.Destination {
	ds := make([]core.Destination, n)
	for i := range ds {
		ds[i] = core.Destination{Channel: "smtp", Host: fmt.Sprintf("h%06d.example", i),
			Window: thread.WindowState{Concurrency: 5, Success: 0.25}, Updated: now}
	}
	return ds
}

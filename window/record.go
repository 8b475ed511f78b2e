package window

import (
	"time"

	"zsched/thread"
)

// Record is what every book keeps about one destination: its window and,
// while it is dead, until when. Its methods are the whole of the window's
// rules beyond thread.Window's arithmetic — when a dead destination comes
// back, what a session may start against — as the core carries them out
// today (core/feedback.go: feedback, reviveDue), so that a book answers as
// the core's own window would. The Redis scripts (package cluster) are a
// line-by-line copy; a test drives both with the same sequences.
type Record struct {
	Window    thread.Window
	DeadUntil time.Time
}

// NewRecord returns a destination's first record.
func NewRecord(p Params) Record { return Record{Window: p.New()} }

// revive brings a dead destination back once its time has come (the
// core's reviveDue: a zero DeadUntil means at once), to busy sessions or
// the initial window. It reports whether it did.
func (r *Record) revive(busy int, now time.Time) bool {
	if !r.Window.Dead() || now.Before(r.DeadUntil) {
		return false
	}
	r.Window.Revive(busy)
	r.DeadUntil = time.Time{}
	return true
}

// Admit decides whether one more session may start at now while busy run
// (every node's): the window is a limit on sessions, as the core's
// busy < window is on agents. A dead destination whose time has come is
// revived first (revived).
func (r *Record) Admit(busy int, now time.Time) (ok bool, why Reason, revived bool) {
	revived = r.revive(busy, now)
	switch {
	case r.Window.Dead():
		return false, Dead, revived
	case busy < r.Window.Limit():
		return true, 0, revived
	}
	return false, Full, revived
}

// Judge applies one delivery's feedback at now with busy sessions running
// (every node's, the judged one's included) and nodes live nodes sharing
// the window (thread.Window.Nodes): thread.Window.Failed or
// Succeeded, as core/feedback.go applies them. A failure that declares the
// destination dead sets DeadUntil to deadUntil; a success revives a dead
// destination at once and clears it. It returns the window before.
func (r *Record) Judge(failed bool, deadUntil time.Time, busy, nodes int, now time.Time) (from int, died bool) {
	from = r.Window.Limit()
	r.Window.Nodes = nodes
	if failed {
		if r.Window.Failed(now) {
			r.DeadUntil = deadUntil
			return from, true
		}
		return from, false
	}
	r.Window.Succeeded(busy, now)
	if from == 0 {
		r.DeadUntil = time.Time{}
	}
	return from, false
}

// State returns the record as a State at now, with the session counts
// the caller knows.
func (r *Record) State(now time.Time, leases, mine, nodes int) State {
	c, ok := r.Window.LearnedCeiling(now)
	st := State{Window: r.Window.State(), Ceiling: c, Confirmed: ok, Leases: leases, Mine: mine, Nodes: nodes}
	if r.Window.Dead() {
		st.DeadUntil = r.DeadUntil
	}
	return st
}

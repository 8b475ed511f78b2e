package window

import (
	"time"

	"zsched/thread"
)

// Local is a node's own windows, nothing shared: the book of a scheduler
// without [cluster], and what thread.Window does in the core today. It
// answers every request at once. Its busy count is its own sessions, so
// with one lease per attached agent it is the thread's Busy and every
// window it computes is the one the core computes now.
type Local struct {
	dests  map[Dest]*own
	leases map[Lease]Dest
	seq    Lease
}

type own struct {
	rec     Record
	busy    int
	waiting bool // an Acquire was denied since the last Free
}

// NewLocal returns an empty local book.
func NewLocal() *Local {
	return &Local{dests: make(map[Dest]*own), leases: make(map[Lease]Dest)}
}

func (l *Local) dest(d Dest, p Params) *own {
	o, ok := l.dests[d]
	if !ok {
		o = &own{rec: NewRecord(p)}
		l.dests[d] = o
	}
	p.Apply(&o.rec.Window)
	return o
}

// Do answers reqs at once.
func (l *Local) Do(now time.Time, reqs []Request) []Event {
	var evs []Event
	for _, r := range reqs {
		switch r.Op {
		case Acquire:
			o := l.dest(r.Dest, r.Params)
			ok, why, revived := o.rec.Admit(o.busy, now)
			if !ok {
				o.waiting = true
				// Full: only a release of this node's frees a
				// session, and it brings Free; no time to wait for.
				var retry time.Time
				if why == Dead {
					retry = o.rec.DeadUntil
				}
				evs = append(evs, Event{Kind: Denied, Dest: r.Dest, Reason: why, Retry: retry, Revived: revived,
					State: o.rec.State(now, o.busy, o.busy, 1)})
				continue
			}
			l.seq++
			o.busy++
			l.leases[l.seq] = r.Dest
			evs = append(evs, Event{Kind: Granted, Dest: r.Dest, Lease: l.seq, Revived: revived,
				State: o.rec.State(now, o.busy, o.busy, 1)})
		case Release:
			d, ok := l.leases[r.Lease]
			if !ok {
				continue
			}
			delete(l.leases, r.Lease)
			o := l.dests[d]
			o.busy--
			evs = o.free(d, now, evs, false)
		case Report:
			o := l.dest(r.Dest, r.Params)
			from, died := o.rec.Judge(r.Failed, r.DeadUntil, o.busy, 0, now) // alone, as the core's own window
			evs = append(evs, Event{Kind: Changed, Dest: r.Dest, From: from, Failed: r.Failed, Died: died,
				Revived: from == 0 && !o.rec.Window.Dead(), State: o.rec.State(now, o.busy, o.busy, 1)})
			evs = o.free(r.Dest, now, evs, died)
		}
	}
	return evs
}

// free tells a denied asker that its answer may have changed: a session
// is free, or the destination just died (died).
func (o *own) free(d Dest, now time.Time, evs []Event, died bool) []Event {
	if !o.waiting || !died && (o.rec.Window.Dead() || o.busy >= o.rec.Window.Limit()) {
		return evs
	}
	o.waiting = false
	return append(evs, Event{Kind: Free, Dest: d, State: o.rec.State(now, o.busy, o.busy, 1)})
}

// Record returns what the book holds about d, for the core's views and
// the state file.
func (l *Local) Record(d Dest) (Record, bool) {
	o, ok := l.dests[d]
	if !ok {
		return Record{}, false
	}
	return o.rec, true
}

// Restore sets what a restart remembered about d (thread.Window.Restore's
// rules, clamped to p), before any session on it.
func (l *Local) Restore(d Dest, p Params, s thread.WindowState, deadUntil time.Time) {
	o := l.dest(d, p)
	o.rec.Window.Restore(s)
	o.rec.DeadUntil = deadUntil
}

package core

import (
	"fmt"
	"time"

	"zsched/ring"
	"zsched/thread"
	"zsched/vertex"
	"zsched/window"
)

// Check verifies the core's invariants at now and returns the first broken
// one. Every pending recipient must be watched by something: a ready or
// waiting heap of its thread, an agent that holds its vertex, or the list of
// vertices no clause routes. Every thread with a future time of interest is
// on the timer heap, every thread that wants an agent is in its ring's
// heap, and the agent counts add up. Tests call it after every event.
func (s *Core) Check(now time.Time) error {
	held := make(map[*vertex.Vertex]int)
	perChannel := make(map[string]int)
	// sessions counts each thread's agents and borrowed jobs: its Busy.
	sessions := make(map[*thread.Thread]int)
	// leases are the book's leases the core holds: each agent's, each
	// borrowed job's and the granted ones no agent took yet, each once.
	leases := make(map[window.Lease]bool)
	holds := func(l window.Lease, who string) error {
		if l == 0 {
			return nil
		}
		if leases[l] {
			return fmt.Errorf("lease %v held twice (%s)", l, who)
		}
		leases[l] = true
		return nil
	}
	borrowed := 0 // jobs holding a session of another thread than their agent's
	for _, st := range s.seats {
		for _, l := range st.spare {
			if err := holds(l, "spare of "+st.dest.Channel+"/"+st.dest.Host); err != nil {
				return err
			}
		}
	}
	for id, a := range s.agents {
		perChannel[a.channel]++
		if a.thread != nil {
			sessions[a.thread]++
		}
		if err := holds(a.lease, fmt.Sprintf("agent %d", id)); err != nil {
			return err
		}
		jobs := 0
		for _, e := range a.fifo {
			if e.borrowed != nil {
				if e.kind != entryJob || a.killed || e.borrowed == a.thread {
					return fmt.Errorf("agent %d (killed %v) holds a session of %s/%s it may not", id, a.killed, e.borrowed.Channel, e.borrowed.Host)
				}
				sessions[e.borrowed]++
				borrowed++
				// With a book, a borrowed session is the cluster's only
				// with its lease (borrowLease); without one, it has none.
				if (e.lease != 0) != (s.book != nil) {
					return fmt.Errorf("agent %d: borrowed job on %s/%s holds lease %v (book %v)", id, e.borrowed.Channel, e.borrowed.Host, e.lease, s.book != nil)
				}
			} else if e.lease != 0 {
				return fmt.Errorf("agent %d: lease %v on a job that borrows no session", id, e.lease)
			}
			if err := holds(e.lease, fmt.Sprintf("agent %d's borrowed job", id)); err != nil {
				return err
			}
			if e.kind == entryJob {
				jobs++
				if e.thread != s.threadOf(e.v) {
					return fmt.Errorf("agent %d: job of msg %d keeps a thread that is not its vertex's", id, e.msg.Inum)
				}
				in := s.msgs[e.msg.Inum] == e.msg
				if in == e.msg.Gone {
					return fmt.Errorf("agent %d: msg %d in core %v but gone %v", id, e.msg.Inum, in, e.msg.Gone)
				}
				if in {
					held[e.v] = id
				}
			}
		}
		if jobs != a.jobs {
			return fmt.Errorf("agent %d counts %d jobs, holds %d", id, a.jobs, jobs)
		}
	}
	for k, rt := range s.routes {
		if rt.thread == nil {
			continue
		}
		if t := s.threads[thread.Key{Clause: rt.clause, Channel: k[0], Host: k[1]}]; t != rt.thread {
			return fmt.Errorf("route %s/%s keeps a thread that is not its thread in core", k[0], k[1])
		}
	}
	if borrowed != s.borrowed {
		return fmt.Errorf("%d borrowed jobs, the count says %d", borrowed, s.borrowed)
	}
	if len(s.agents) != s.total {
		return fmt.Errorf("%d agents, total says %d", len(s.agents), s.total)
	}
	for ch, n := range perChannel {
		if s.perChannel[ch] != n {
			return fmt.Errorf("channel %s: %d agents, counter says %d", ch, n, s.perChannel[ch])
		}
	}
	unmatched := make(map[*vertex.Vertex]bool)
	for _, v := range s.unmatched {
		unmatched[v] = true
	}
	for inum, m := range s.msgs {
		if m.Gone {
			return fmt.Errorf("msg %d: in core but marked gone", inum)
		}
		n := 0
		for _, v := range m.Vertices {
			n += len(v.Rcpts)
			if len(v.Rcpts) == 0 && v.Agent == 0 {
				return fmt.Errorf("msg %d: empty vertex %s/%s left in core", inum, v.Channel, v.Host)
			}
			if unmatched[v] {
				continue
			}
			if id, ok := held[v]; ok {
				if v.Agent != id {
					return fmt.Errorf("msg %d: vertex %s/%s held by agent %d but says %d", inum, v.Channel, v.Host, id, v.Agent)
				}
				continue
			}
			t := s.threadOf(v)
			if t == nil {
				return fmt.Errorf("msg %d: vertex %s/%s has no thread", inum, v.Channel, v.Host)
			}
			switch {
			case v.In(&t.Ready):
			case v.In(&t.Waiting):
				if t.Wake().IsZero() {
					return fmt.Errorf("thread %s/%s has waiting vertices but no timer", t.Channel, t.Host)
				}
			case m.Held && !v.Queued():
				if s.heldMessages[inum] != m {
					return fmt.Errorf("msg %d: held but not in the held set", inum)
				}
			default:
				return fmt.Errorf("msg %d: vertex %s/%s is watched by nothing", inum, v.Channel, v.Host)
			}
		}
		if n != m.Pending {
			return fmt.Errorf("msg %d: %d recipients in vertices, pending says %d", inum, n, m.Pending)
		}
	}
	for t := range sessions {
		if s.threads[t.Key] != t {
			return fmt.Errorf("thread %s/%s has sessions but is not in core", t.Channel, t.Host)
		}
	}
	for k, t := range s.threads {
		if err := t.Check(); err != nil {
			return fmt.Errorf("thread %s/%s: %w", k.Channel, k.Host, err)
		}
		if t.Busy != sessions[t] {
			return fmt.Errorf("thread %s/%s: busy %d, but %d agents and borrowed jobs", k.Channel, k.Host, t.Busy, sessions[t])
		}
		if t.Ready.Len() > 0 && t.BackingOff(now) && t.Wake().IsZero() {
			return fmt.Errorf("thread %s/%s backs off with ready work but no timer", k.Channel, k.Host)
		}
		// At the very instant its retry time comes, an event may be
		// handled before the Tick that revives it: its timer is due.
		if t.Window.Dead() && !t.BackingOff(now) && t.Ready.Len() > 0 && (t.Wake().IsZero() || t.Wake().After(now)) {
			return fmt.Errorf("thread %s/%s: dead past its retry time with ready work", k.Channel, k.Host)
		}
		r := s.rings[s.ringKey(t)]
		if r == nil {
			return fmt.Errorf("thread %s/%s has no ring", k.Channel, k.Host)
		}
		if kept, ok := t.Ring.(*ring.Ring); ok && kept != r {
			return fmt.Errorf("thread %s/%s keeps ring %v, its key names %v", k.Channel, k.Host, kept.Key, r.Key)
		}
		if t.Wants(now) != r.Offers(t) {
			return fmt.Errorf("thread %s/%s wants=%v but offered %v", k.Channel, k.Host, t.Wants(now), r.Offers(t))
		}
		if t.Wants(now) && r.IdleCount() > 0 && !r.HostBound() {
			return fmt.Errorf("thread %s/%s wants an agent while its ring has %d idle", k.Channel, k.Host, r.IdleCount())
		}
	}
	for _, r := range s.rings {
		if err := r.Check(); err != nil {
			return err
		}
		if err := r.CheckJobs(); err != nil {
			return err
		}
	}
	if err := s.checkThrottles(); err != nil {
		return err
	}
	if err := s.agenda.Check(); err != nil {
		return err
	}
	return s.checkTallies()
}

// checkTallies recounts every thread's recipients from the vertices of the
// messages in core and compares them with the tallies (for Check).
func (s *Core) checkTallies() error {
	count := make(map[*thread.Thread]*thread.Tally, len(s.threads))
	for _, t := range s.threads {
		count[t] = &thread.Tally{}
	}
	for _, m := range s.msgs {
		for _, v := range m.Vertices {
			t := s.threadOf(v)
			if t == nil {
				continue
			}
			if v.Dest != &t.Key {
				// Reconfigure moves vertices by re-keying their thread.
				return fmt.Errorf("msg %d: vertex of %s/%s does not share its thread's key", m.Inum, t.Channel, t.Host)
			}
			count[t].Add(m.Arrival, len(v.Rcpts))
		}
	}
	for t, c := range count {
		if err := t.CheckTally(c); err != nil {
			return fmt.Errorf("thread %s/%s: %w", t.Channel, t.Host, err)
		}
	}
	return nil
}

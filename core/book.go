package core

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"zsched/thread"
	"zsched/window"
)

// The windows' book (package window, DESIGN §13). With [cluster] a
// destination's window lives in a store shared by several nodes: a session
// starts only when the book grants it a lease (one per attached agent, and
// one per job an agent borrows there with feed = "message"), a
// judged delivery is reported to it, and its answers come back as events
// (Window), now or later. The thread's Window then mirrors the book's last
// answer, for Wants, the views and the state file. Without a book (UseBook
// never called) the core's own thread.Window decides, as window.Local does
// (window's property test holds them equal).
//
// The contract with the book, per destination: one Acquire outstanding at
// a time (the thread is Asking meanwhile and wants no agent); a Denied
// thread waits for a Free event or its Retry time; a granted lease no
// agent could take is released at once (one asked for a borrowed job is
// offered to its agent first: lend); an agent's lease is released when it
// leaves the thread, a borrowed job's when the job ends or its agent is
// killed or exits (giveBack); while a site failure reported on the
// destination is unanswered, no agent takes a new job there and the thread
// asks for no session (seat.failing).

// seat is the core's side of one destination's conversation with its book.
type seat struct {
	dest   window.Dest
	key    thread.Key // the thread that asked last
	asking bool       // an Acquire is outstanding
	denied bool       // denied: ask again after Free or at retry
	retry  time.Time  // denied: ask again then at the latest (zero = after Free only)
	spare  []window.Lease
	// retries are the thread's retry indexes after each report in flight,
	// oldest first: a report that kills the destination advances t.Retry
	// to its entry when its answer says Died.
	retries []int
	// failing counts the site failures reported and not yet answered.
	// Meanwhile no agent takes a new job on the destination (within):
	// the window the core last saw is the one the refusal just proved too
	// wide, and a job fed against it is refused in turn, a late refusal
	// that unlearns the ceiling the first one taught. A book that answers
	// at once (Local) never leaves it above 0 between events.
	failing int
	state   window.State // the book's last answer
	known   bool         // state holds an answer
	// borrower is the agent whose borrowed job (feed = "message") the
	// outstanding Acquire was asked for, 0 when none: a lease granted
	// later is offered to it first (windowEvent).
	borrower int
}

// UseBook makes b the book of every destination's window. Call it after New,
// before any event; with a book that answers later (window.Outbox), hand
// its answers to Window.
func (s *Core) UseBook(b window.Book) {
	s.book = b
	s.seats = make(map[window.Dest]*seat)
}

// Booked reports whether a book holds the windows.
func (s *Core) Booked() bool { return s.book != nil }

func destOf(t *thread.Thread) window.Dest { return window.Dest{Channel: t.Channel, Host: t.Host} }

func (s *Core) seatOf(t *thread.Thread) *seat {
	d := destOf(t)
	st, ok := s.seats[d]
	if !ok {
		st = &seat{dest: d}
		s.seats[d] = st
	}
	st.key = t.Key
	return st
}

// ask hands reqs to the book and handles what it answers at once.
func (s *Core) ask(now time.Time, reqs ...window.Request) {
	evs := s.book.Do(now, reqs)
	for _, ev := range evs {
		s.windowEvent(ev, now, false)
	}
}

// Window hands the core a book's answers, in the order the book gave them.
func (s *Core) Window(now time.Time, evs []window.Event) {
	s.event("Window")
	for _, ev := range evs {
		s.windowEvent(ev, now, true)
	}
}

// admit reports whether a new session may start on t now. With a book it
// takes a lease granted for t; without one it asks (once at a time) and
// reports whether the answer, if it came at once, granted one.
func (s *Core) admit(t *thread.Thread, now time.Time) bool {
	if s.book == nil {
		return true
	}
	st := s.seatOf(t)
	if st.failing > 0 {
		// Out of the wanting heap until the book answers the failure
		// (seat.failing); a lease granted meanwhile waits as spare.
		if !t.Asking {
			t.Asking = true
			s.ring(t).Update(t, now)
		}
		return false
	}
	if len(st.spare) > 0 {
		return true
	}
	if st.asking || st.denied {
		return false
	}
	st.asking = true
	t.Asking = true
	s.ring(t).Update(t, now)
	s.ask(now, window.Request{Op: window.Acquire, Dest: st.dest, Params: window.ParamsOf(s.clause(t.Clause))})
	return len(st.spare) > 0
}

// unspare releases the leases granted for t that no agent took.
func (s *Core) unspare(t *thread.Thread, now time.Time) {
	if s.book == nil {
		return
	}
	if st, ok := s.seats[destOf(t)]; ok {
		s.releaseSpare(st, now)
	}
}

func (s *Core) releaseSpare(st *seat, now time.Time) {
	for len(st.spare) > 0 {
		l := st.spare[0]
		st.spare = st.spare[1:]
		s.release(st, l, now)
	}
}

// dropSeat forgets the seat of a thread that goes away, unless an answer
// is still due (it will find no thread) or a denial still holds.
func (s *Core) dropSeat(t *thread.Thread) {
	st, ok := s.seats[destOf(t)]
	if ok && !st.asking && !st.denied && len(st.spare) == 0 && len(st.retries) == 0 {
		delete(s.seats, st.dest)
	}
}

// lease gives agent a, attaching to t, a lease granted for t.
func (s *Core) lease(a *agent, t *thread.Thread) {
	if s.book == nil {
		return
	}
	st := s.seatOf(t)
	if len(st.spare) == 0 {
		// Every attach is admitted first: a broken invariant, but one
		// that only costs the cluster an unaccounted session.
		s.log.Error("session without a lease", "channel", t.Channel, "host", t.Host, "agent", a.id)
		return
	}
	a.lease = st.spare[0]
	st.spare = st.spare[1:]
}

// unlease releases the lease of agent a, leaving thread t.
func (s *Core) unlease(a *agent, t *thread.Thread, now time.Time) {
	if s.book == nil || a.lease == 0 {
		return
	}
	l := a.lease
	a.lease = 0
	s.release(s.seatOf(t), l, now)
}

func (s *Core) release(st *seat, l window.Lease, now time.Time) {
	// The book answers a release only with Free events for whoever
	// waits; this node's own count drops for certain.
	if st.known {
		st.state.Leases = max(st.state.Leases-1, 0)
		st.state.Mine = max(st.state.Mine-1, 0)
	}
	s.ask(now, window.Request{Op: window.Release, Dest: st.dest, Lease: l})
}

// borrowLease gives a job that agent a borrows on t (feed = "message",
// feedPeer) a lease granted for t, as an attaching agent takes one: the
// shared window bounds the cluster's sessions, borrowed jobs included. It
// asks the book when no granted lease waits and none is asked for; an
// answer that comes later is offered to a first (lend), and if a cannot
// take it, to the thread's ring as any grant is.
func (s *Core) borrowLease(a *agent, t *thread.Thread, now time.Time) (window.Lease, bool) {
	st := s.seatOf(t)
	if st.failing > 0 || st.denied || (st.asking && len(st.spare) == 0) {
		return 0, false
	}
	if len(st.spare) == 0 && !s.admit(t, now) {
		if st.asking {
			st.borrower = a.id
		}
		return 0, false
	}
	l := st.spare[0]
	st.spare = st.spare[1:]
	return l, true
}

// lend offers a lease granted later for st's thread t to the agent whose
// borrowed job asked for it, if it is still fed peers and has room: fed
// now, it takes the lease in feedPeer. The grant is otherwise t's ring's.
func (s *Core) lend(st *seat, t *thread.Thread, now time.Time) {
	a := s.agents[st.borrower]
	st.borrower = 0
	if a == nil || a.state == ending || a.thread == nil || a.peers == nil || !s.feedsPeers(a) ||
		s.ring(t) != a.ring || a.jobs > s.clause(a.clause).Overfeed {
		return
	}
	s.feed(a, now)
}

// within reports whether t's agents may take new jobs: the cluster runs
// no more sessions than the shared window allows (without a book, the
// thread's own agents against its window).
func (s *Core) within(t *thread.Thread) bool {
	if s.book == nil {
		return t.Busy <= t.Window.Limit()
	}
	st, ok := s.seats[destOf(t)]
	if ok && st.failing > 0 {
		return false
	}
	if !ok || !st.known {
		return t.Busy <= t.Window.Limit()
	}
	return st.state.Leases <= st.state.Limit()
}

// reportBook sends the judgement of one delivery on t to the book; the
// window changes when its answer comes (Changed). deadUntil is how long
// the destination stays dead if this failure kills it: the agent's
// retryat, else the thread's retry schedule (on a copy of its index, taken
// only when the answer says Died).
func (s *Core) reportBook(t *thread.Thread, siteFailed bool, retryAt, now time.Time) {
	st := s.seatOf(t)
	idx := t.Retry
	until := retryAt
	if siteFailed {
		t.SiteFailures++
		if !until.After(now) {
			until = s.schedule(s.clause(t.Clause)).Next(now, &idx, s.rng)
		}
	} else {
		t.SiteFailures = 0
	}
	st.retries = append(st.retries, idx)
	if siteFailed {
		st.failing++
	}
	s.ask(now, window.Request{Op: window.Report, Dest: st.dest, Params: window.ParamsOf(s.clause(t.Clause)),
		Failed: siteFailed, DeadUntil: until})
}

// windowEvent handles one answer of the book. later is true when it came
// through Window, after the request's event: then the threads it concerns
// are updated (and served) here; an answer that came at once leaves that
// to the code that asked.
func (s *Core) windowEvent(ev window.Event, now time.Time, later bool) {
	st, ok := s.seats[ev.Dest]
	if !ok {
		if ev.Kind == window.Granted {
			s.ask(now, window.Request{Op: window.Release, Dest: ev.Dest, Lease: ev.Lease})
		}
		return
	}
	st.state, st.known = ev.State, true
	if st.denied && ev.Kind != window.Denied && !ev.State.Dead() && ev.State.Leases < ev.State.Limit() {
		// The answer shows a session free (the window grew, or others
		// ended theirs): ask now rather than wait for the Free notice.
		st.denied, st.retry = false, time.Time{}
	}
	t := s.threads[st.key]
	if t != nil && (t.Channel != ev.Dest.Channel || t.Host != ev.Dest.Host) {
		t = nil
	}
	switch ev.Kind {
	case window.Granted:
		st.asking = false
		if t == nil || s.stopping {
			st.borrower = 0
			s.ask(now, window.Request{Op: window.Release, Dest: ev.Dest, Lease: ev.Lease})
			break
		}
		st.spare = append(st.spare, ev.Lease)
		t.Asking = st.denied || st.failing > 0
		s.mirror(t, ev.State)
		if ev.Revived {
			// Its retry index stands, as reviveDue leaves it: only a
			// delivery that gets through starts it over.
			s.log.Info("dead destination's retry time has come", "channel", t.Channel, "host", t.Host,
				"window", t.Window.Limit())
		}
	case window.Denied:
		st.asking = false
		st.borrower = 0
		if t == nil {
			break
		}
		s.mirror(t, ev.State)
		if ev.Reason == window.Dead {
			// Its back-off (the mirror's dead-until) wakes it.
			t.Asking = false
			break
		}
		st.denied, st.retry = true, ev.Retry
		t.LastText = "cluster window full"
		if !ev.Retry.IsZero() {
			s.retrySeats = append(s.retrySeats, st)
		}
	case window.Changed:
		idx := -1
		if len(st.retries) > 0 {
			idx = st.retries[0]
			st.retries = st.retries[1:]
		}
		if ev.Failed {
			st.failing = max(st.failing-1, 0)
		}
		if t == nil {
			break
		}
		s.mirror(t, ev.State)
		switch {
		case ev.Died:
			if idx >= 0 {
				t.Retry = idx
			}
			s.log.Info("destination is dead", "channel", t.Channel, "host", t.Host,
				"until", ev.State.DeadUntil, "site_failures", t.SiteFailures, "text", t.LastText)
		case ev.Revived:
			s.revived(t, "destination revived by a delivery")
		}
		s.logShared(t, ev)
	case window.Free:
		st.denied, st.retry = false, time.Time{}
		if t != nil {
			s.mirror(t, ev.State)
		}
	}
	if t != nil && !st.denied && !st.asking && st.failing == 0 {
		t.Asking = false
	}
	if t == nil {
		if !st.asking && len(st.spare) == 0 && !st.denied && len(st.retries) == 0 {
			delete(s.seats, ev.Dest)
		}
		return
	}
	if later {
		if st.borrower != 0 && len(st.spare) > 0 {
			s.lend(st, t, now)
		}
		s.update(t, now)
		// Granted, and no agent could be had for it now.
		s.releaseSpare(st, now)
		return
	}
	s.ring(t).Update(t, now)
	s.agenda.SetWake(t, t.NextWake(now))
}

func (s *Core) revived(t *thread.Thread, msg string) {
	t.BackoffUntil = time.Time{}
	t.Retry = 0
	s.log.Info(msg, "channel", t.Channel, "host", t.Host, "window", t.Window.Limit())
}

// mirror makes t's window the book's answer st: the view of the shared
// window, what Wants compares with, and what the state file keeps.
func (s *Core) mirror(t *thread.Thread, st window.State) {
	t.Window.Restore(st.Window)
	if st.Dead() {
		t.BackoffUntil = st.DeadUntil
	} else {
		t.BackoffUntil = time.Time{}
	}
}

// logShared is logWindow for a book's answer: the window before and after
// the report, with the cluster's sessions.
func (s *Core) logShared(t *thread.Thread, ev window.Event) {
	after := ev.State.Limit()
	if after == ev.From && !s.log.IsTrace() {
		return
	}
	w := ev.State.Window
	kv := []any{"channel", t.Channel, "host", t.Host, "negative", ev.Failed,
		"from", ev.From, "window", after, "busy", ev.State.Leases, "mine", ev.State.Mine, "nodes", ev.State.Nodes,
		"success", w.Success, "failure", w.Failure, "fail_cohorts", w.FailCohorts,
		"ceiling", w.Ceiling, "ceiling_confirmed", ev.State.Confirmed, "fallback", ev.State.Fallback}
	if after != ev.From {
		s.log.Debug("destination_concurrency_feedback", kv...)
	} else {
		s.log.Trace("destination_concurrency_feedback", kv...)
	}
}

// retryDenied lets the threads denied until a time at or before now ask
// again; it returns the earliest such time still ahead.
func (s *Core) retryDenied(now time.Time) {
	keep := s.retrySeats[:0]
	var due []*seat
	for _, st := range s.retrySeats {
		switch {
		case !st.denied || st.retry.IsZero() || s.seats[st.dest] != st:
		case !now.Before(st.retry):
			due = append(due, st)
		default:
			keep = append(keep, st)
		}
	}
	clear(s.retrySeats[len(keep):])
	s.retrySeats = keep
	for _, st := range due {
		st.denied, st.retry = false, time.Time{}
		if t := s.threads[st.key]; t != nil {
			t.Asking = st.asking || st.failing > 0
			s.update(t, now)
		}
	}
}

// nextRetry is the earliest time a denied thread asks again; zero when none.
func (s *Core) nextRetry() time.Time {
	var w time.Time
	for _, st := range s.retrySeats {
		if st.denied && !st.retry.IsZero() && (w.IsZero() || st.retry.Before(w)) {
			w = st.retry
		}
	}
	return w
}

// ClusterView is a destination's window as the book last answered: the
// cluster's view for mailq, WHY and metrics.
type ClusterView struct {
	Window   int // the shared window (0 = dead)
	Leases   int // live sessions on the destination, every node's
	Mine     int // of them, this node's
	Nodes    int // live nodes
	Fallback bool
	// Borrowed is how many of Mine are jobs fed to agents attached to
	// other destinations (feed = "message"), each with its own lease.
	Borrowed  int
	Asking    bool // an Acquire is outstanding
	Denied    bool // waiting for a session to come free
	DeadUntil time.Time
	// ByNode is Leases node by node, in the order of their names, as the
	// store last counted them; nil when only this node counts (fallback).
	ByNode []window.NodeLeases
}

// Sessions says the live sessions node by node, "mx1 2, mx2 3", for
// operators; "" when the book gave no breakdown.
func (c *ClusterView) Sessions() string {
	var b strings.Builder
	for i, n := range c.ByNode {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n.Node)
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(n.Leases))
	}
	return b.String()
}

// clusterView returns t's cluster view; nil without a book or an answer.
func (s *Core) clusterView(t *thread.Thread) *ClusterView {
	if s.book == nil {
		return nil
	}
	st, ok := s.seats[destOf(t)]
	if !ok || !st.known {
		return nil
	}
	return &ClusterView{Window: st.state.Limit(), Leases: st.state.Leases, Mine: st.state.Mine, Nodes: st.state.Nodes,
		Fallback: st.state.Fallback, Asking: st.asking, Denied: st.denied, DeadUntil: st.state.DeadUntil,
		ByNode: slices.Clone(st.state.ByNode)}
}

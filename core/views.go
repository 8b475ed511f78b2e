package core

import (
	"sort"
	"strings"
	"time"

	"zsched/ring"
	"zsched/thread"
)

// The operator's views of the core, for mailq, qshape, WHY, SHOW THREAD
// and metrics. None of them changes the core, and their cost follows the
// destinations and agents in core, never the recipients: the counts they
// show are kept as vertices come and go (thread.Thread's tally,
// ring.Ring.Jobs); WHY costs one message, SHOW THREAD one destination.

// ThreadState is what a destination is doing, for mailq and metrics.
type ThreadState uint8

// Thread states, in the order a thread is classified: the first that
// applies wins.
const (
	ThreadHeld      ThreadState = iota // operator hold
	ThreadQueueOnly                    // queueonly, waiting for ETRN
	ThreadDead                         // failed cohorts declared the destination dead
	ThreadBackoff                      // backing off after a site failure
	ThreadRunning                      // agents attached
	ThreadBlocked                      // wants an agent; a limit keeps it from one
	ThreadWaiting                      // only vertices whose own retry time is ahead
	ThreadIdle                         // nothing queued (fed vertices only, or none)
	numThreadStates
)

var threadStateNames = [...]string{"held", "queueonly", "dead", "backoff", "running", "blocked", "waiting", "idle"}

func (s ThreadState) String() string { return threadStateNames[s] }

// ThreadStates lists every thread state, for metrics that report zeros too.
func ThreadStates() []ThreadState {
	out := make([]ThreadState, numThreadStates)
	for i := range out {
		out[i] = ThreadState(i)
	}
	return out
}

// AgentStates lists the names of agent states (AgentView.State).
func AgentStates() []string { return append([]string(nil), agentStateNames[:]...) }

// ThreadView is one destination as mailq shows it.
type ThreadView struct {
	Channel    string
	Host       string
	Vertices   int
	Recipients int
	Attempts   int
	Agents     []int // ids of the agents attached
	// Busy is its sessions: the agents attached, and jobs fed to agents
	// of other threads (feed = "message") while they run.
	Busy int
	// Borrowed is how many of Busy are such jobs: sessions held by
	// agents attached elsewhere, which Agents does not list.
	Borrowed  int
	Window    int // current concurrency; 0 = dead
	MaxThr    int
	Ceiling   int  // learned concurrency ceiling (issue 10); 0 = none
	Confirmed bool // the ceiling is confirmed: growth past it is slowed
	State     ThreadState
	Pend      Reason    // for ThreadBlocked: the limit in the way
	Wake      time.Time // next time of interest; zero = none
	Backoff   time.Time // back-off end; zero = none
	Oldest    time.Time // arrival of its oldest message
	LastText  string
	QueueOnly bool
	ETRN      bool // an ETRN released the queueonly thread until nothing is due
	Held      bool
	HostBound bool // its ring is one host's ($host in the command)
	// Cluster is the destination's shared window as the book last
	// answered; nil without [cluster] (book.go).
	Cluster *ClusterView
}

// RingView is one thread-ring as mailq shows it.
type RingView struct {
	Clause    int
	Select    string // the clause's select pattern
	Channel   string
	Host      string // host-bound rings only
	HostBound bool
	Threads   []ThreadView // by channel/host
	Msgs      int          // messages with a vertex in the ring
	Agents    int          // agents of the ring, idle ones included
	Idle      int
	MaxRing   int
	Overfeed  int
	MaxThr    int
	// Throttled is the end of the ring's transport back-off (throttle.go);
	// zero when none runs. Probing: the back-off is over and one agent at a
	// time is tried until one completes a job. ThrottleText is the failure.
	Throttled    time.Time
	Probing      bool
	ThrottleText string
}

// AgentView is one transport agent as mailq shows it.
type AgentView struct {
	ID      int
	Channel string
	Host    string // its thread's host, or the last it served
	State   string // starting, working, idling, idle, ending
	Jobs    int    // job lines outstanding
	// Borrowed is how many of Jobs hold a session of another
	// destination than its thread (feed = "message").
	Borrowed int
	Heard    time.Time
	Fed      time.Time // last job line written; zero = none outstanding
}

// Rings returns every ring with its threads, sorted by clause, channel and
// host. It does not change the core. Its cost follows the threads and
// agents in core, not the recipients: the counts it shows are kept as
// vertices come and go (Tally, Ring.Jobs).
func (s *Core) Rings(now time.Time) []RingView {
	byRing := make(map[*ring.Ring]*RingView, len(s.rings))
	view := func(r *ring.Ring) *RingView {
		rv, ok := byRing[r]
		if !ok {
			c := s.clause(r.Clause)
			rv = &RingView{Clause: r.Clause, Select: c.Select, Channel: r.Channel, Host: r.Host,
				HostBound: r.HostBound(), Agents: r.Agents(), Idle: r.IdleCount(),
				MaxRing: s.maxRing(c), Overfeed: c.Overfeed, MaxThr: c.MaxThr,
				// A ring job is one message with vertices in the ring.
				Msgs: r.Jobs()}
			s.throttleView(r, rv)
			byRing[r] = rv
		}
		return rv
	}
	for _, r := range s.rings {
		view(r)
	}
	attached := s.attachedAgents()
	borrowed := s.borrowedSessions()
	for _, t := range s.threads {
		r := s.rings[s.ringKey(t)]
		if r == nil {
			continue
		}
		rv := view(r)
		tv := s.threadView(t, now, attached[t])
		tv.setBorrowed(borrowed[t])
		rv.Threads = append(rv.Threads, tv)
	}
	res := make([]RingView, 0, len(byRing))
	for _, rv := range byRing {
		sort.Slice(rv.Threads, func(i, j int) bool {
			a, b := rv.Threads[i], rv.Threads[j]
			if a.Channel != b.Channel {
				return a.Channel < b.Channel
			}
			return a.Host < b.Host
		})
		res = append(res, *rv)
	}
	sort.Slice(res, func(i, j int) bool {
		a, b := res[i], res[j]
		if a.Clause != b.Clause {
			return a.Clause < b.Clause
		}
		if a.Channel != b.Channel {
			return a.Channel < b.Channel
		}
		return a.Host < b.Host
	})
	return res
}

// attachedAgents maps each thread to the ids of the agents on it, sorted.
func (s *Core) attachedAgents() map[*thread.Thread][]int {
	m := make(map[*thread.Thread][]int)
	for id, a := range s.agents {
		if a.thread != nil {
			m[a.thread] = append(m[a.thread], id)
		}
	}
	for _, ids := range m {
		sort.Ints(ids)
	}
	return m
}

// borrowedSessions counts, per thread, the sessions held by jobs of
// agents attached to other threads (entry.borrowed). It walks the agents'
// outstanding lines, at most overfeed+1 each, and only when there are
// any (Core.borrowed, the one count the feed's hot path keeps): the views'
// cost follows the agents.
func (s *Core) borrowedSessions() map[*thread.Thread]int {
	m := make(map[*thread.Thread]int)
	if s.borrowed == 0 {
		return m
	}
	for _, a := range s.agents {
		for i := range a.fifo {
			if t := a.fifo[i].borrowed; t != nil {
				m[t]++
			}
		}
	}
	return m
}

// borrowedOn counts the sessions of t held by borrowed jobs.
func (s *Core) borrowedOn(t *thread.Thread) int {
	n := 0
	if s.borrowed == 0 {
		return 0
	}
	for _, a := range s.agents {
		for i := range a.fifo {
			if a.fifo[i].borrowed == t {
				n++
			}
		}
	}
	return n
}

// Thread returns one destination, or false when it is not in core.
func (s *Core) Thread(now time.Time, channel, host string) (ThreadView, bool) {
	t := s.findThread(channel, host)
	if t == nil {
		return ThreadView{}, false
	}
	tv := s.threadView(t, now, s.attachedAgents()[t])
	tv.setBorrowed(s.borrowedOn(t))
	return tv, true
}

// setBorrowed sets the borrowed sessions of the thread's view, and of its
// cluster view.
func (tv *ThreadView) setBorrowed(n int) {
	tv.Borrowed = n
	if tv.Cluster != nil {
		tv.Cluster.Borrowed = n
	}
}

// findThread returns the thread of (channel, host) under the clause that
// routes it now.
func (s *Core) findThread(channel, host string) *thread.Thread {
	host = strings.ToLower(host)
	ci, ok := s.cfg.Match(channel, host)
	if !ok {
		return nil
	}
	return s.threads[thread.Key{Clause: ci, Channel: channel, Host: host}]
}

func (s *Core) threadView(t *thread.Thread, now time.Time, agents []int) ThreadView {
	tv := ThreadView{
		Channel: t.Channel, Host: t.Host, Vertices: t.Vertices(), Attempts: t.Attempts,
		Agents: agents, Busy: t.Busy, Window: t.Window.Limit(), MaxThr: s.clause(t.Clause).MaxThr,
		State: s.threadState(t, now), Wake: t.Wake(), LastText: t.LastText,
		QueueOnly: t.QueueOnly, ETRN: t.ETRN, Held: t.Held,
	}
	tv.Ceiling, tv.Confirmed = t.Window.LearnedCeiling(now)
	if t.BackingOff(now) {
		tv.Backoff = t.BackoffUntil
	}
	if tv.State == ThreadBlocked {
		tv.Pend = s.limit(t, now)
	}
	tv.Recipients = t.Recipients()
	tv.Oldest = t.Oldest()
	tv.Cluster = s.clusterView(t)
	if r := s.rings[s.ringKey(t)]; r != nil {
		tv.HostBound = r.HostBound()
	}
	return tv
}

func (s *Core) threadState(t *thread.Thread, now time.Time) ThreadState {
	switch {
	case t.Held:
		return ThreadHeld
	case t.QueueOnly && !t.ETRN:
		return ThreadQueueOnly
	case t.Window.Dead() && t.BackingOff(now):
		return ThreadDead
	case t.BackingOff(now):
		return ThreadBackoff
	case t.Busy > 0:
		return ThreadRunning
	case t.Wants(now):
		return ThreadBlocked
	case t.Waiting.Len() > 0:
		return ThreadWaiting
	}
	return ThreadIdle
}

// limit names what keeps a thread that wants an agent from one, checking
// the limits in the order obtain does.
func (s *Core) limit(t *thread.Thread, now time.Time) Reason {
	c := s.clause(t.Clause)
	r := s.rings[s.ringKey(t)]
	rate := s.cfg.Scheduler.ForkRate
	switch {
	case s.stopping:
		return ReasonStopping
	case r != nil && s.transportClosed(r, now):
		return ReasonTransport
	case r != nil && r.Agents() >= s.maxRing(c):
		return ReasonMaxRing
	case s.total >= s.cfg.Scheduler.MaxTA:
		return ReasonMaxTA
	case s.perChannel[t.Channel] >= c.MaxChannel:
		return ReasonMaxChannel
	case rate > 0 && now.Unix() == s.forkSecond && s.forks >= rate:
		return ReasonForkRate
	}
	return ReasonStarting
}

// AgentViews returns every agent, by id.
func (s *Core) AgentViews() []AgentView {
	out := make([]AgentView, 0, len(s.agents))
	for id, a := range s.agents {
		av := AgentView{ID: id, Channel: a.channel, Host: a.host, State: a.state.String(), Jobs: a.jobs, Heard: a.heard}
		for _, e := range a.fifo {
			if e.kind == entryJob && e.fed.After(av.Fed) {
				av.Fed = e.fed
			}
			if e.borrowed != nil {
				av.Borrowed++
			}
		}
		out = append(out, av)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Gauges is the core's state in numbers, for metrics.
type Gauges struct {
	Messages   int
	Vertices   int
	Recipients int
	Threads    [numThreadStates]int
	Agents     map[string]int // by agent state
	// Throttled counts rings whose transport may not start an agent now
	// (throttle.go).
	Throttled int
	// Borrowed counts the sessions held by jobs fed to agents attached to
	// another destination (feed = "message"), every destination's.
	Borrowed int
	// Busiest are the destinations with the most agents attached, then the
	// most vertices, at most the n asked for.
	Busiest []DestWindow
}

// DestWindow is one destination's window.
type DestWindow struct {
	Channel  string
	Host     string
	Window   int
	MaxThr   int
	Ceiling  int // learned ceiling; 0 = none
	Busy     int // sessions: agents attached and borrowed jobs
	Borrowed int // of Busy, the borrowed jobs
	Vertices int
}

// Gauges counts messages, vertices, recipients, threads by state and agents
// by state, and returns the windows of the n busiest destinations.
func (s *Core) Gauges(now time.Time, n int) Gauges {
	g := Gauges{Messages: len(s.msgs), Agents: make(map[string]int)}
	for _, name := range agentStateNames {
		g.Agents[name] = 0
	}
	// Every vertex of a message in core is in a thread or unrouted.
	for _, v := range s.unmatched {
		g.Vertices++
		g.Recipients += len(v.Rcpts)
	}
	all := make([]DestWindow, 0, len(s.threads))
	borrowed := s.borrowedSessions()
	g.Borrowed = s.borrowed
	for _, t := range s.threads {
		g.Vertices += t.Vertices()
		g.Recipients += t.Recipients()
		g.Threads[s.threadState(t, now)]++
		c, _ := t.Window.LearnedCeiling(now)
		all = append(all, DestWindow{Channel: t.Channel, Host: t.Host, Window: t.Window.Limit(),
			MaxThr: s.clause(t.Clause).MaxThr, Ceiling: c, Busy: t.Busy, Borrowed: borrowed[t], Vertices: t.Vertices()})
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Busy != b.Busy {
			return a.Busy > b.Busy
		}
		if a.Vertices != b.Vertices {
			return a.Vertices > b.Vertices
		}
		if a.Channel != b.Channel {
			return a.Channel < b.Channel
		}
		return a.Host < b.Host
	})
	g.Busiest = all[:min(n, len(all))]
	g.Throttled = s.throttledRings(now)
	for _, a := range s.agents {
		g.Agents[a.state.String()]++
	}
	return g
}

// ShapeRow is one destination's recipients by age, for qshape.
type ShapeRow struct {
	Host   string // "TOTAL" for the sum row
	Total  int
	Counts []int // per bucket: age < buckets[i] (and ≥ the one before); the last counts the rest
}

// Shape counts pending recipients per host by age (now − arrival): Postfix's
// qshape. The first row is the total; then the top hosts by count.
func (s *Core) Shape(now time.Time, buckets []time.Duration, top int) []ShapeRow {
	rows := make(map[string]*ShapeRow)
	total := &ShapeRow{Host: "TOTAL", Counts: make([]int, len(buckets)+1)}
	count := func(host string, arrival time.Time, n int) {
		if n == 0 {
			return
		}
		age := now.Sub(arrival)
		b := sort.Search(len(buckets), func(i int) bool { return age < buckets[i] })
		r := rows[host]
		if r == nil {
			r = &ShapeRow{Host: host, Counts: make([]int, len(buckets)+1)}
			rows[host] = r
		}
		r.Total += n
		r.Counts[b] += n
		total.Total += n
		total.Counts[b] += n
	}
	// By the threads' tallies (recipients by arrival second), not by
	// walking every vertex; then the recipients no clause routes.
	for _, t := range s.threads {
		counted := 0
		t.EachArrival(func(arrival time.Time, n int) {
			count(t.Host, arrival, n)
			counted += n
		})
		// Messages without an arrival time are as old as can be.
		count(t.Host, time.Time{}, t.Recipients()-counted)
	}
	for _, v := range s.unmatched {
		count(v.Host, v.Msg.Arrival, len(v.Rcpts))
	}
	list := make([]ShapeRow, 0, len(rows))
	for _, r := range rows {
		list = append(list, *r)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Total != list[j].Total {
			return list[i].Total > list[j].Total
		}
		return list[i].Host < list[j].Host
	})
	if top > 0 && len(list) > top {
		list = list[:top]
	}
	return append([]ShapeRow{*total}, list...)
}

package core

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"zsched/config"
	"zsched/ring"
	"zsched/thread"
	"zsched/vertex"
)

// This file is the operator's side of the core: read-only views for mailq,
// qshape, WHY and metrics, and the commands — hold and release, ETRN
// (Turn), flush, kill and reload (Reconfigure). Like every other event they
// take now and leave their effects in Ready; none of them blocks or does I/O.

// ErrNoMessage is returned for an id that names no message in core; the
// daemon wraps it for one that is in the spool neither.
var ErrNoMessage = errors.New("core: no such message")

// ErrReload is wrapped by every reason Reconfigure refuses a configuration.
var ErrReload = errors.New("core: reload refused")

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

// Reason says why a recipient is not being delivered right now.
type Reason uint8

// Reasons, as WHY reports them.
const (
	ReasonDue         Reason = iota // ready; its thread's agents reach it next
	ReasonRunning                   // fed to an agent now
	ReasonRetry                     // its own retry time is ahead
	ReasonBackoff                   // the destination backs off after a site failure
	ReasonDead                      // the destination is dead until its next probe
	ReasonWindow                    // the destination's concurrency window is full
	ReasonMaxRing                   // the ring has maxring agents
	ReasonMaxTA                     // the scheduler has maxta agents
	ReasonMaxChannel                // the channel has maxchannel agents
	ReasonForkRate                  // forkrate new agents this second already
	ReasonStarting                  // an agent for it is being started
	ReasonHeldMessage               // operator hold on the message
	ReasonHeldThread                // operator hold on the destination
	ReasonQueueOnly                 // queueonly destination waiting for ETRN
	ReasonUnrouted                  // no clause selects its channel/host
	ReasonStopping                  // the scheduler is shutting down
	ReasonTransport                 // its ring's agents failed at start: throttled (throttle.go)
)

var reasonNames = [...]string{"due", "running", "retry", "backoff", "dead", "window",
	"maxring", "maxta", "maxchannel", "forkrate", "starting", "held-message", "held-thread",
	"queueonly", "unrouted", "stopping", "transport"}

func (r Reason) String() string { return reasonNames[r] }

// ThreadView is one destination as mailq shows it.
type ThreadView struct {
	Channel    string
	Host       string
	Vertices   int
	Recipients int
	Attempts   int
	Agents     []int // ids of the agents attached
	Window     int   // current concurrency; 0 = dead
	MaxThr     int
	Ceiling    int  // learned concurrency ceiling (issue 10); 0 = none
	Confirmed  bool // the ceiling is confirmed: growth past it is slowed
	State      ThreadState
	Pend       Reason    // for ThreadBlocked: the limit in the way
	Wake       time.Time // next time of interest; zero = none
	Backoff    time.Time // back-off end; zero = none
	Oldest     time.Time // arrival of its oldest message
	LastText   string
	QueueOnly  bool
	Turned     bool
	Held       bool
	HostBound  bool // its ring is one host's ($host in the command)
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
	Heard   time.Time
	Fed     time.Time // last job line written; zero = none outstanding
}

// Rings returns every ring with its threads, sorted by clause, channel and
// host. It does not change the core. Its cost follows the threads and
// agents in core, not the recipients: the counts it shows are kept as
// vertices come and go (Tally, Ring.Jobs).
func (s *Scheduler) Rings(now time.Time) []RingView {
	byRing := make(map[*ring.Ring]*RingView, len(s.rings))
	view := func(r *ring.Ring) *RingView {
		rv, ok := byRing[r]
		if !ok {
			c := s.clause(r.Clause)
			rv = &RingView{Clause: r.Clause, Select: c.Select, Channel: r.Channel, Host: r.Host,
				HostBound: r.HostBound, Agents: r.Agents, Idle: len(r.Idle),
				MaxRing: c.MaxRing, Overfeed: c.Overfeed, MaxThr: c.MaxThr,
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
	for _, t := range s.threads {
		r := s.rings[s.ringKey(t)]
		if r == nil {
			continue
		}
		rv := view(r)
		rv.Threads = append(rv.Threads, s.threadView(t, now, attached[t]))
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

// The tallies behind the views (thread.Tally): every change to the
// recipients a thread holds goes through these, so that the views never
// walk the vertices. Check recounts them.

// tallyJoin counts v's recipients in t, the thread v was placed in.
func tallyJoin(t *thread.Thread, v *vertex.Vertex) { t.Tally.Add(v.Msg.Arrival, len(v.Rcpts)) }

// tallyLeave un-counts v's remaining recipients from t: v leaves the
// thread, or its message leaves core.
func tallyLeave(t *thread.Thread, v *vertex.Vertex) { t.Tally.Remove(v.Msg.Arrival, len(v.Rcpts)) }

// tallyDrop un-counts n of v's recipients, about to leave v (expired).
func (s *Scheduler) tallyDrop(v *vertex.Vertex, n int) {
	if t := s.threadOf(v); t != nil {
		t.Tally.Remove(v.Msg.Arrival, n)
	}
}

// dropRcpt removes v's recipient i (vertex.Drop) and un-counts it.
func (s *Scheduler) dropRcpt(v *vertex.Vertex, i int) vertex.Rcpt {
	s.tallyDrop(v, 1)
	return v.Drop(i)
}

// mayExpire reports whether any recipient of t may be past its expiry
// deadline (arrival + expiry) at now, by its tally's oldest arrival: the
// expiry sweep, which runs as often as the shortest clause interval, then
// walks only the threads that may hold something to expire, not the whole
// queue. The tally's seconds are rounded down, so it errs toward looking.
func (s *Scheduler) mayExpire(t *thread.Thread, now time.Time) bool {
	c := s.clause(t.Clause)
	if c.Expiry <= 0 {
		return false
	}
	oldest := t.Tally.Oldest()
	return !oldest.IsZero() && !now.Before(oldest.Add(c.Expiry.D()))
}

// checkTallies recounts every thread's recipients from the vertices of the
// messages in core and compares them with the tallies (for Check).
func (s *Scheduler) checkTallies() error {
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
		if err := t.Tally.Equal(c); err != nil {
			return fmt.Errorf("thread %s/%s: %w", t.Channel, t.Host, err)
		}
	}
	return nil
}

// attachedAgents maps each thread to the ids of the agents on it, sorted.
func (s *Scheduler) attachedAgents() map[*thread.Thread][]int {
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

// Thread returns one destination, or false when it is not in core.
func (s *Scheduler) Thread(now time.Time, channel, host string) (ThreadView, bool) {
	t := s.findThread(channel, host)
	if t == nil {
		return ThreadView{}, false
	}
	return s.threadView(t, now, s.attachedAgents()[t]), true
}

// findThread returns the thread of (channel, host) under the clause that
// routes it now.
func (s *Scheduler) findThread(channel, host string) *thread.Thread {
	host = strings.ToLower(host)
	ci, ok := s.cfg.Match(channel, host)
	if !ok {
		return nil
	}
	return s.threads[thread.Key{Clause: ci, Channel: channel, Host: host}]
}

func (s *Scheduler) threadView(t *thread.Thread, now time.Time, agents []int) ThreadView {
	tv := ThreadView{
		Channel: t.Channel, Host: t.Host, Vertices: t.Vertices, Attempts: t.Attempts,
		Agents: agents, Window: t.Window.Limit(), MaxThr: s.clause(t.Clause).MaxThr,
		State: s.threadState(t, now), Wake: t.Wake, LastText: t.LastText,
		QueueOnly: t.QueueOnly, Turned: t.Turned, Held: t.Held,
	}
	tv.Ceiling, tv.Confirmed = t.Window.LearnedCeiling(now)
	if t.BackingOff(now) {
		tv.Backoff = t.BackoffUntil
	}
	if tv.State == ThreadBlocked {
		tv.Pend = s.limit(t, now)
	}
	tv.Recipients = t.Tally.Recipients
	tv.Oldest = t.Tally.Oldest()
	if r := s.rings[s.ringKey(t)]; r != nil {
		tv.HostBound = r.HostBound
	}
	return tv
}

func (s *Scheduler) threadState(t *thread.Thread, now time.Time) ThreadState {
	switch {
	case t.Held:
		return ThreadHeld
	case t.QueueOnly && !t.Turned:
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
func (s *Scheduler) limit(t *thread.Thread, now time.Time) Reason {
	c := s.clause(t.Clause)
	r := s.rings[s.ringKey(t)]
	rate := s.cfg.Scheduler.ForkRate
	switch {
	case s.quiet:
		return ReasonStopping
	case r != nil && s.transportClosed(r, now):
		return ReasonTransport
	case r != nil && r.Agents >= c.MaxRing:
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

// threadVertices returns every vertex of t: ready, waiting, fed, and those
// of held messages.
func (s *Scheduler) threadVertices(t *thread.Thread) []*vertex.Vertex {
	var vs []*vertex.Vertex
	add := func(v *vertex.Vertex) { vs = append(vs, v) }
	t.Ready.Each(add)
	t.Waiting.Each(add)
	mine := func(v *vertex.Vertex) bool {
		return v.Clause == t.Clause && v.Channel == t.Channel && v.Host == t.Host
	}
	for _, a := range s.agents {
		for _, e := range a.fifo {
			if e.kind == entryJob && s.msgs[e.msg.Inum] == e.msg && mine(e.v) && len(e.v.Rcpts) > 0 {
				vs = append(vs, e.v)
			}
		}
	}
	for _, m := range s.heldMsgs {
		for _, v := range m.Vertices {
			if !v.Queued() && v.Agent == 0 && mine(v) {
				vs = append(vs, v)
			}
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vertex.ByRank(vs[i], vs[j]) })
	return vs
}

// ThreadVertices returns the vertices of one destination in feed order, for
// SHOW THREAD; nil when the thread is not in core.
func (s *Scheduler) ThreadVertices(now time.Time, channel, host string) []VertexView {
	t := s.findThread(channel, host)
	if t == nil {
		return nil
	}
	var out []VertexView
	for _, v := range s.threadVertices(t) {
		out = append(out, s.vertexView(v, t, now))
	}
	return out
}

// VertexView is one vertex with the reason it waits.
type VertexView struct {
	Path     string
	Inum     int64
	Channel  string
	Host     string
	Rcpts    []vertex.Rcpt
	Attempts int
	Expires  time.Time
	Wake     time.Time // the thread's next time of interest
	Fed      time.Time // when it was fed to its agent, or to the agent of its last attempt; zero if never
	Why      Why
	LastText string
}

// Why is the reason a vertex waits, with the time it ends when known.
type Why struct {
	Reason  Reason
	Until   time.Time // end of a retry, back-off or dead period
	Agent   int       // the agent, for ReasonRunning
	Busy    int       // agents on the destination, for ReasonWindow
	Window  int       // the destination's window, for ReasonWindow
	Ceiling int       // its learned ceiling, for ReasonWindow; 0 = none
	Limit   int       // the limit's value, for the limit reasons
	Text    string    // the failure, for ReasonTransport
}

// String says the reason in a sentence for operators.
func (w Why) String() string {
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch w.Reason {
	case ReasonDue:
		return "due: next in line on its destination's agents"
	case ReasonRunning:
		return "being delivered by agent " + strconv.Itoa(w.Agent)
	case ReasonRetry:
		return "deferred: its own retry time is " + at(w.Until)
	case ReasonBackoff:
		return "destination backing off after a site failure until " + at(w.Until)
	case ReasonDead:
		return "destination dead (failed cohorts over the limit); next probe at " + at(w.Until)
	case ReasonWindow:
		if w.Ceiling > 0 {
			return fmt.Sprintf("destination concurrency window full: %d of %d agents busy (learned ceiling %d)", w.Busy, w.Window, w.Ceiling)
		}
		return fmt.Sprintf("destination concurrency window full: %d of %d agents busy", w.Busy, w.Window)
	case ReasonMaxRing:
		return fmt.Sprintf("waiting for an agent: the ring is at maxring %d", w.Limit)
	case ReasonMaxTA:
		return fmt.Sprintf("waiting for an agent: the scheduler is at maxta %d", w.Limit)
	case ReasonMaxChannel:
		return fmt.Sprintf("waiting for an agent: the channel is at maxchannel %d", w.Limit)
	case ReasonForkRate:
		return fmt.Sprintf("waiting for an agent: forkrate %d agents per second reached", w.Limit)
	case ReasonStarting:
		return "an agent is being started for it"
	case ReasonHeldMessage:
		return "held by the operator (message)"
	case ReasonHeldThread:
		return "held by the operator (destination)"
	case ReasonQueueOnly:
		return "queueonly destination: waiting for ETRN"
	case ReasonUnrouted:
		return "no clause selects its channel/host"
	case ReasonStopping:
		return "the scheduler is shutting down"
	case ReasonTransport:
		if w.Until.IsZero() {
			return "transport unavailable: waiting for a probe agent to complete a job (" + w.Text + ")"
		}
		return "transport unavailable until " + at(w.Until) + " (" + w.Text + ")"
	}
	return w.Reason.String()
}

func (s *Scheduler) why(v *vertex.Vertex, t *thread.Thread, now time.Time) Why {
	switch {
	case v.Agent != 0:
		return Why{Reason: ReasonRunning, Agent: v.Agent}
	case v.Clause < 0 || t == nil:
		return Why{Reason: ReasonUnrouted}
	case v.Msg.Held:
		return Why{Reason: ReasonHeldMessage}
	case t.Held:
		return Why{Reason: ReasonHeldThread}
	case t.QueueOnly && !t.Turned:
		return Why{Reason: ReasonQueueOnly}
	case t.Window.Dead() && t.BackingOff(now):
		return Why{Reason: ReasonDead, Until: t.BackoffUntil}
	case t.BackingOff(now):
		return Why{Reason: ReasonBackoff, Until: t.BackoffUntil}
	case v.In(&t.Waiting):
		return Why{Reason: ReasonRetry, Until: v.Due()}
	}
	if lim := t.Window.Limit(); t.Busy >= lim {
		c, _ := t.Window.LearnedCeiling(now)
		return Why{Reason: ReasonWindow, Busy: t.Busy, Window: lim, Ceiling: c}
	}
	if !t.Wants(now) {
		return Why{Reason: ReasonDue}
	}
	w := Why{Reason: s.limit(t, now)}
	c := s.clause(t.Clause)
	switch w.Reason {
	case ReasonMaxRing:
		w.Limit = c.MaxRing
	case ReasonMaxTA:
		w.Limit = s.cfg.Scheduler.MaxTA
	case ReasonMaxChannel:
		w.Limit = c.MaxChannel
	case ReasonForkRate:
		w.Limit = s.cfg.Scheduler.ForkRate
	case ReasonTransport:
		if th := s.throttled(s.rings[s.ringKey(t)]); th != nil {
			w.Until, w.Text = th.until, th.text
		}
	}
	return w
}

func (s *Scheduler) vertexView(v *vertex.Vertex, t *thread.Thread, now time.Time) VertexView {
	vv := VertexView{
		Path: v.Msg.Path, Inum: v.Msg.Inum, Channel: v.Channel, Host: v.Host,
		Rcpts: append([]vertex.Rcpt(nil), v.Rcpts...), Attempts: int(v.Attempts),
		Expires: s.expires(v), Why: s.why(v, t, now), LastText: v.LastText(),
	}
	if t != nil {
		vv.Wake = t.Wake
	}
	if v.Agent != 0 {
		if a := s.agents[v.Agent]; a != nil {
			for _, e := range a.fifo {
				if e.v == v {
					vv.Fed = e.fed
				}
			}
		}
	}
	if vv.Fed.IsZero() {
		vv.Fed = v.LastFed()
	}
	return vv
}

// MessageView is one message and, per vertex, why it waits.
type MessageView struct {
	Path     string
	Inum     int64
	ID       string
	Arrival  time.Time
	Held     bool
	Pending  int
	Vertices []VertexView
}

// Message returns a message's view for WHY. id is its control file path
// relative to transport/, its inode number or its body name (which is the
// control file's name when zsched or ZMailer's router queued it).
func (s *Scheduler) Message(now time.Time, id string) (MessageView, error) {
	m := s.lookup(id)
	if m == nil {
		return MessageView{}, fmt.Errorf("%w: %q", ErrNoMessage, id)
	}
	mv := MessageView{Path: m.Path, Inum: m.Inum, ID: m.ID, Arrival: m.Arrival, Held: m.Held, Pending: m.Pending}
	for _, v := range m.Vertices {
		mv.Vertices = append(mv.Vertices, s.vertexView(v, s.threadOf(v), now))
	}
	sort.Slice(mv.Vertices, func(i, j int) bool {
		a, b := mv.Vertices[i], mv.Vertices[j]
		if a.Channel != b.Channel {
			return a.Channel < b.Channel
		}
		return a.Host < b.Host
	})
	return mv, nil
}

func (s *Scheduler) lookup(id string) *vertex.Message {
	id = strings.TrimSpace(id)
	if id == "" {
		return nil
	}
	if inum, ok := inumOf(id); ok {
		if m := s.msgs[inum]; m != nil && (m.Path == id || m.ID == id || strconv.FormatInt(inum, 10) == id || m.QID == id ||
			m.Path[strings.LastIndexByte(m.Path, '/')+1:] == id) {
			return m
		}
		if ctlName(id) || isQueueID(id) {
			// An inode number, or a control file's name or path: the
			// message it names is not in core. Looking further would
			// walk every message (issue 9: WHY of a message that has
			// just left must not cost the loop the whole queue); only a
			// body name that differs from its control file's is missed.
			return nil
		}
	}
	for _, m := range s.msgs {
		if m.ID == id || m.Path == id {
			return m
		}
	}
	return nil
}

// ctlName reports whether id has the form of a control file's path under
// transport/: up to two hash directory letters, then a decimal name.
func ctlName(id string) bool {
	for range 2 {
		if len(id) > 2 && id[0] >= 'A' && id[0] <= 'Z' && id[1] == '/' {
			id = id[2:]
		}
	}
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '0' || id[i] > '9' {
			return false
		}
	}
	return true
}

// AgentViews returns every agent, by id.
func (s *Scheduler) AgentViews() []AgentView {
	out := make([]AgentView, 0, len(s.agents))
	for id, a := range s.agents {
		av := AgentView{ID: id, Channel: a.channel, Host: a.host, State: a.state.String(), Jobs: a.jobs, Heard: a.heard}
		for _, e := range a.fifo {
			if e.kind == entryJob && e.fed.After(av.Fed) {
				av.Fed = e.fed
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
	Busy     int
	Vertices int
}

// Gauges counts messages, vertices, recipients, threads by state and agents
// by state, and returns the windows of the n busiest destinations.
func (s *Scheduler) Gauges(now time.Time, n int) Gauges {
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
	for _, t := range s.threads {
		g.Vertices += t.Vertices
		g.Recipients += t.Tally.Recipients
		g.Threads[s.threadState(t, now)]++
		c, _ := t.Window.LearnedCeiling(now)
		all = append(all, DestWindow{Channel: t.Channel, Host: t.Host, Window: t.Window.Limit(),
			MaxThr: s.clause(t.Clause).MaxThr, Ceiling: c, Busy: t.Busy, Vertices: t.Vertices})
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
func (s *Scheduler) Shape(now time.Time, buckets []time.Duration, top int) []ShapeRow {
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
		t.Tally.Each(func(arrival time.Time, n int) {
			count(t.Host, arrival, n)
			counted += n
		})
		// Messages without an arrival time are as old as can be.
		count(t.Host, time.Time{}, t.Tally.Recipients-counted)
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

// --- operator commands ---

// HoldMessage keeps a message's vertices from being fed until
// ReleaseMessage; vertices with an agent now finish their attempt first and
// are then held. Held vertices still expire.
func (s *Scheduler) HoldMessage(now time.Time, id string) error {
	m := s.lookup(id)
	if m == nil {
		return fmt.Errorf("%w: %q", ErrNoMessage, id)
	}
	if m.Held {
		return nil
	}
	m.Held = true
	s.heldMsgs[m.Inum] = m
	for _, v := range m.Vertices {
		if !v.Queued() {
			continue
		}
		v.Dequeue()
		if t := s.threadOf(v); t != nil {
			s.touch(t, now)
		}
	}
	return nil
}

// ReleaseMessage ends a message hold.
func (s *Scheduler) ReleaseMessage(now time.Time, id string) error {
	m := s.lookup(id)
	if m == nil {
		return fmt.Errorf("%w: %q", ErrNoMessage, id)
	}
	if !m.Held {
		return nil
	}
	m.Held = false
	delete(s.heldMsgs, m.Inum)
	for _, v := range m.Vertices {
		t := s.threadOf(v)
		if v.Queued() || v.Agent != 0 || t == nil {
			continue
		}
		t.Add(v, now)
		if v.In(&t.Ready) {
			v.SetDue(now)
		}
		s.touch(t, now)
	}
	return nil
}

// sweepHeld expires vertices of held messages past arrival+expiry+expiry2:
// they are in no heap, so the ordinary sweep does not see them.
func (s *Scheduler) sweepHeld(now time.Time) {
	for inum, m := range s.heldMsgs {
		if s.msgs[inum] != m || !m.Held {
			delete(s.heldMsgs, inum)
			continue
		}
		for _, v := range append([]*vertex.Vertex(nil), m.Vertices...) {
			if _, exp2 := s.deadlines(v); v.Queued() || v.Agent != 0 || !expired(exp2, now) {
				continue
			}
			t := s.threadOf(v)
			s.expire(v, now)
			s.dropVertex(v, t)
			if t != nil {
				s.touch(t, now)
			}
		}
	}
}

// Turn is ETRN: every thread whose host is name, or with "@domain" the
// domain or any subdomain of it, is made due now, and queueonly ones are
// released to run until they have nothing due left. Held threads are left
// alone. Only the first word of name counts; case does not. It returns how
// many threads started.
func (s *Scheduler) Turn(now time.Time, name string) int {
	name = strings.ToLower(strings.TrimSpace(name))
	if i := strings.IndexAny(name, " \t"); i >= 0 {
		name = name[:i]
	}
	if name == "" || name == "@" || strings.Contains(name, "/") {
		return 0
	}
	p, err := ParseDest(name)
	if err != nil {
		return 0
	}
	m, err := p.Compile()
	if err != nil {
		return 0
	}
	match := func(host string) bool { return m.Match("", host) }
	var ts []*thread.Thread
	for _, t := range s.threads {
		if match(t.Host) {
			ts = append(ts, t)
		}
	}
	sortThreads(ts)
	n := 0
	for _, t := range ts {
		if t.Held {
			continue // the operator's hold wins; the client may ETRN again
		}
		s.makeDue(t, now)
		if t.QueueOnly {
			t.Turned = true
		}
		s.touch(t, now)
		if t.Busy > 0 || t.Wants(now) {
			n++
		}
	}
	s.log.Debug("etrn", "name", name, "threads", len(ts), "started", n)
	return n
}

// Flush makes every vertex of the selected threads due now and ends their
// back-off (a dead destination gets its probe). sel is "" for every thread,
// or a destination pattern (ParseDest: "smtp/*.example.com", a bare host
// glob for every channel, "@domain"). Queueonly threads stay waiting for
// ETRN.
// It returns how many threads matched.
func (s *Scheduler) Flush(now time.Time, sel string) (int, error) {
	p, err := ParseDest(sel)
	if err != nil {
		return 0, fmt.Errorf("core: flush: %w", err)
	}
	// Compiled once, matched in linear time against every thread.
	m, err := p.Compile()
	if err != nil {
		return 0, fmt.Errorf("core: flush: %w", err)
	}
	var ts []*thread.Thread
	for _, t := range s.threads {
		if m.Match(t.Channel, t.Host) {
			ts = append(ts, t)
		}
	}
	sortThreads(ts)
	for _, t := range ts {
		s.makeDue(t, now)
		s.touch(t, now)
	}
	s.flushThrottles(now, m.MatchChannel)
	return len(ts), nil
}

func sortThreads(ts []*thread.Thread) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Channel != ts[j].Channel {
			return ts[i].Channel < ts[j].Channel
		}
		return ts[i].Host < ts[j].Host
	})
}

// makeDue ends t's back-off and moves its waiting vertices to ready.
func (s *Scheduler) makeDue(t *thread.Thread, now time.Time) {
	t.BackoffUntil = time.Time{}
	for v := t.Waiting.Min(); v != nil; v = t.Waiting.Min() {
		t.Waiting.Remove(v)
		v.SetDue(time.Time{})
		t.Ready.Push(v)
	}
	s.redue(t, now)
}

// redue restarts the dispatch latency clock of t's ready vertices: time
// spent held or waiting for ETRN is the operator's, not the scheduler's.
func (s *Scheduler) redue(t *thread.Thread, now time.Time) {
	t.Ready.Each(func(v *vertex.Vertex) { v.SetDue(now) })
}

// Kill removes a message from core and asks for its files to be removed
// (Ready.Completes with Killed set): no DSN is sent. Agents working on it
// finish their attempt unheard.
func (s *Scheduler) Kill(now time.Time, id string) error {
	m := s.lookup(id)
	if m == nil {
		return fmt.Errorf("%w: %q", ErrNoMessage, id)
	}
	delete(s.heldMsgs, m.Inum)
	s.drop(m, now)
	// The daemon logs the request, with who asked.
	s.ready.Completes = append(s.ready.Completes, Complete{Path: m.Path, ID: m.ID, Inum: m.Inum, Killed: true})
	return nil
}

// Quiesce stops all feeding for shutdown: no agent is started or given a
// job from now on; reports are still taken.
func (s *Scheduler) Quiesce() { s.quiet = true }

// --- reload ---

// Reconfigure applies a new configuration without losing a vertex, a
// window or an agent that still fits. Every destination is matched again:
// clause indexes may change, so threads, rings and agents move to the keys
// the new clauses give them. An agent whose clause now runs a different
// command (argv, stdio, user, group or nice) is ended gracefully after its
// current jobs; idle agents beyond a lowered maxring are ended at once and
// busy ones as they finish. Windows keep their concurrency and feedback
// state, clamped to a lowered maxthr. Recipients no clause routed before are
// placed if the new one does.
//
// A configuration under which a destination in core, or an agent's host,
// would be routed by no clause is refused with an error wrapping ErrReload
// and nothing changes.
func (s *Scheduler) Reconfigure(now time.Time, cfg *config.Config) error {
	// Refuse before changing anything.
	var unrouted []string
	newClause := make(map[*thread.Thread]int, len(s.threads))
	for _, t := range s.threads {
		ci, ok := cfg.Match(t.Channel, t.Host)
		if !ok {
			unrouted = append(unrouted, t.Channel+"/"+t.Host)
			continue
		}
		newClause[t] = ci
	}
	agentClause := make(map[*agent]int, len(s.agents))
	for _, a := range s.agents {
		ci, ok := cfg.Match(a.channel, a.host)
		if !ok {
			if a.thread != nil || a.jobs > 0 {
				unrouted = append(unrouted, a.channel+"/"+a.host+" (agent "+strconv.Itoa(a.id)+")")
				continue
			}
			ci = -1 // an idle agent nothing routes any more: ended below
		}
		agentClause[a] = ci
	}
	if len(unrouted) > 0 {
		sort.Strings(unrouted)
		more := ""
		if len(unrouted) > 5 {
			more = fmt.Sprintf(" and %d more", len(unrouted)-5)
			unrouted = unrouted[:5]
		}
		return fmt.Errorf("%w: no clause would route %s%s", ErrReload, strings.Join(unrouted, ", "), more)
	}

	old := s.cfg
	s.logChanges(old, cfg)
	s.cfg = cfg
	clear(s.clauses)
	// Ring keys change, and the operator may have fixed a command.
	s.forgetThrottles()
	clear(s.words)

	// Take every thread out of its ring and every ring out of the map; the
	// rings are put back under their new keys, reusing the old ring object
	// (its job lists) wherever the ring maps to one new key.
	for _, t := range s.threads {
		if r := s.rings[ringKeyUnder(old, t)]; r != nil {
			r.Remove(t)
		}
	}
	oldRings := s.rings
	s.rings = make(map[ring.Key]*ring.Ring, len(oldRings))
	idlers := make(map[int]ring.Idle)
	for _, r := range oldRings {
		for _, in := range r.Idle {
			idlers[in.Agent] = in
		}
	}
	for _, r := range s.blocked {
		r.Blocked = false
	}
	s.blocked = nil
	reused := make(map[*ring.Ring]bool)
	place := func(from *ring.Ring, k ring.Key, hostBound bool) *ring.Ring {
		if r := s.rings[k]; r != nil {
			return r
		}
		var r *ring.Ring
		if from != nil && !reused[from] {
			reused[from] = true
			r = from
			r.Key, r.HostBound = k, hostBound
		} else {
			r = ring.New(k, hostBound)
		}
		r.Threads, r.Agents, r.Idle = 0, 0, nil
		s.rings[k] = r
		return r
	}
	keyFor := func(ci int, channel, host string) (ring.Key, bool) {
		k := ring.Key{Clause: ci, Channel: channel}
		hb := cfg.Clauses[ci].Command.HostBound()
		if hb {
			k.Host = host
		}
		return k, hb
	}

	// Threads: new keys, windows, queueonly, expiry; vertices follow.
	threads := make(map[thread.Key]*thread.Thread, len(s.threads))
	moved, clamped := 0, 0
	for _, t := range sortedThreads(s.threads) {
		ci := newClause[t]
		c := &cfg.Clauses[ci]
		from := oldRings[ringKeyUnder(old, t)]
		rk, hb := keyFor(ci, t.Channel, t.Host)
		r := place(from, rk, hb)
		if r != from {
			moved++
		}
		r.Threads++
		t.Key = thread.Key{Clause: ci, Channel: t.Channel, Host: t.Host}
		learned := t.Window.State()
		w := thread.NewWindow(c)
		w.Restore(learned)
		if w.Limit() != t.Window.Limit() {
			clamped++
		}
		t.Window = w
		t.QueueOnly = c.QueueOnly
		if !t.QueueOnly {
			t.Turned = false
		}
		// The thread's vertices share its Key (vertex.Dest): they follow
		// it to the new clause without being touched, unless their ring
		// changes.
		if r != from {
			// The vertex leaves one ring's job lists for another's; fed
			// ones are accounted when their attempt ends.
			for _, v := range s.threadVertices(t) {
				if v.Agent != 0 {
					continue
				}
				inHeap := v.Queued()
				if inHeap {
					v.Dequeue()
				}
				s.orderDone(v)
				s.orderAdd(r, v.Msg, []*vertex.Vertex{v}, now)
				if inHeap {
					t.Add(v, now)
				}
			}
		}
		threads[t.Key] = t
	}
	s.threads = threads

	// Agents: into the ring their host now maps to; retired when the
	// command changed or nothing routes them.
	retired := 0
	for _, a := range sortedAgents(s.agents) {
		ci := agentClause[a]
		from := a.ring
		oldIdle, wasIdle := idlers[a.id]
		if ci < 0 {
			// No ring to count it in; it holds no job and ends at once. A
			// private ring keeps AgentExited's accounting away from live
			// rings.
			a.ring = ring.New(ring.Key{Clause: -1, Channel: a.channel, Host: a.host}, true)
			a.ring.Agents = 1
			a.clause = -1
			s.end(a, "reload: no clause routes its host")
			retired++
			continue
		}
		rk, hb := keyFor(ci, a.channel, a.host)
		r := place(from, rk, hb)
		fits := a.clause >= 0 && sameAgent(&old.Clauses[a.clause], &cfg.Clauses[ci])
		a.ring, a.clause = r, ci
		r.Agents++
		switch {
		case a.state == ending:
		case !fits:
			s.end(a, "reload: the clause's agent command changed")
			retired++
		case wasIdle:
			r.Idle = append(r.Idle, oldIdle)
		}
	}
	// Idle agents beyond a lowered maxring go first; busy ones leave as
	// they finish (next).
	for _, r := range s.rings {
		c := &cfg.Clauses[r.Clause]
		for r.Agents-s.ending(r) > c.MaxRing && len(r.Idle) > 0 {
			id := r.Idle[0].Agent
			r.Forget(id)
			s.end(s.agents[id], "reload: ring over maxring")
			retired++
		}
	}
	for k, r := range s.rings {
		if r.Empty() {
			delete(s.rings, k)
		}
	}

	// Recipients that had no clause may have one now.
	routed := 0
	unmatched := s.unmatched
	s.unmatched = nil
	for _, v := range unmatched {
		ci, ok := s.match(v.Channel, v.Host)
		if !ok {
			s.unmatched = append(s.unmatched, v)
			continue
		}
		routed++
		v.Clause = ci
		t := s.thread(ci, v.Channel, v.Host)
		v.Dest = &t.Key
		s.orderAdd(s.ring(t), v.Msg, []*vertex.Vertex{v}, now)
		t.Vertices++
		tallyJoin(t, v)
		t.Add(v, now)
	}

	for _, t := range sortedThreads(s.threads) {
		s.touch(t, now)
	}
	s.unblock(now)
	s.log.Info("configuration reloaded", "file", cfg.File, "clauses", len(cfg.Clauses),
		"threads", len(s.threads), "threads_moved_ring", moved, "windows_clamped", clamped,
		"agents_retired", retired, "rcpts_routed", routed, "unrouted_vertices", len(s.unmatched))
	return nil
}

// ringKeyUnder is the key of t's ring under c (a reload holds two
// configurations at once).
func ringKeyUnder(c *config.Config, t *thread.Thread) ring.Key {
	k := ring.Key{Clause: t.Clause, Channel: t.Channel}
	if t.Clause >= 0 && t.Clause < len(c.Clauses) && c.Clauses[t.Clause].Command.HostBound() {
		k.Host = t.Host
	}
	return k
}

func sortedThreads(m map[thread.Key]*thread.Thread) []*thread.Thread {
	ts := make([]*thread.Thread, 0, len(m))
	for _, t := range m {
		ts = append(ts, t)
	}
	sortThreads(ts)
	return ts
}

func sortedAgents(m map[int]*agent) []*agent {
	as := make([]*agent, 0, len(m))
	for _, a := range m {
		as = append(as, a)
	}
	sort.Slice(as, func(i, j int) bool { return as[i].id < as[j].id })
	return as
}

// sameAgent reports whether an agent started for clause a can serve clause
// b: the same process would be started for both.
func sameAgent(a, b *config.Clause) bool { return config.SameAgent(a, b) }

// ending counts r's agents that are on their way out.
func (s *Scheduler) ending(r *ring.Ring) int {
	n := 0
	for _, a := range s.agents {
		if a.ring == r && a.state == ending {
			n++
		}
	}
	return n
}

// logChanges logs what a reload changes: scheduler settings and clauses
// added, removed or with different attributes (matched by select pattern).
func (s *Scheduler) logChanges(old, cfg *config.Config) {
	for _, d := range fieldDiff(old.Scheduler, cfg.Scheduler) {
		s.log.Info("reload: scheduler setting changed", "key", d[0], "from", d[1], "to", d[2])
	}
	was := make(map[string]*config.Clause, len(old.Clauses))
	for i := range old.Clauses {
		if _, dup := was[old.Clauses[i].Select]; !dup {
			was[old.Clauses[i].Select] = &old.Clauses[i]
		}
	}
	seen := make(map[string]bool)
	for i := range cfg.Clauses {
		c := &cfg.Clauses[i]
		if seen[c.Select] {
			continue
		}
		seen[c.Select] = true
		o, ok := was[c.Select]
		if !ok {
			s.log.Info("reload: clause added", "select", c.Select, "index", i, "line", c.Line)
			continue
		}
		for _, d := range fieldDiff(*o, *c) {
			if d[0] == "Line" {
				continue
			}
			s.log.Info("reload: clause changed", "select", c.Select, "key", d[0], "from", d[1], "to", d[2])
		}
	}
	for sel := range was {
		if !seen[sel] {
			s.log.Info("reload: clause removed", "select", sel)
		}
	}
}

// fieldDiff returns [name, old, new] for each exported field of two structs
// of the same type whose printed values differ.
func fieldDiff[T any](a, b T) [][3]string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out [][3]string
	for i := 0; i < va.NumField(); i++ {
		f := va.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		x, y := fmt.Sprint(va.Field(i).Interface()), fmt.Sprint(vb.Field(i).Interface())
		if x != y {
			out = append(out, [3]string{f.Name, x, y})
		}
	}
	return out
}

// holds reports whether a has a job line for message inum outstanding.
func (a *agent) holds(inum int64) bool {
	for _, e := range a.fifo {
		if e.kind == entryJob && e.msg.Inum == inum {
			return true
		}
	}
	return false
}

package core

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"zsched/thread"
	"zsched/vertex"
)

// WHY and SHOW THREAD: why each vertex of a message or a destination is not
// being delivered right now.

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
	ReasonCluster                   // the destination's shared window is full, or its book has not answered (book.go)
)

var reasonNames = [...]string{"due", "running", "retry", "backoff", "dead", "window",
	"maxring", "maxta", "maxchannel", "forkrate", "starting", "held-message", "held-thread",
	"queueonly", "unrouted", "stopping", "transport", "cluster"}

func (r Reason) String() string { return reasonNames[r] }

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
	Reason Reason
	Until  time.Time // end of a retry, back-off or dead period
	Agent  int       // the agent, for ReasonRunning
	// Via is, for ReasonRunning, the destination the agent is attached
	// to when its job borrows a session of this one (feed = "message");
	// "" when the job is its own thread's.
	Via  string
	Busy int // sessions on the destination, for ReasonWindow
	// Borrowed is how many of Busy are jobs fed to agents attached to
	// other destinations (feed = "message"), for ReasonWindow.
	Borrowed int
	Window   int    // the destination's window, for ReasonWindow
	Ceiling  int    // its learned ceiling, for ReasonWindow; 0 = none
	Limit    int    // the limit's value, for the limit reasons
	Text     string // the failure, for ReasonTransport
	// Cluster is the shared window as the book last answered, for
	// ReasonCluster.
	Cluster *ClusterView
}

// String says the reason in a sentence for operators.
func (w Why) String() string {
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch w.Reason {
	case ReasonDue:
		return "due: next in line on its destination's agents"
	case ReasonRunning:
		return "being delivered by agent " + strconv.Itoa(w.Agent) + w.Borrowing()
	case ReasonRetry:
		return "deferred: its own retry time is " + at(w.Until)
	case ReasonBackoff:
		return "destination backing off after a site failure until " + at(w.Until)
	case ReasonDead:
		return "destination dead (failed cohorts over the limit); next probe at " + at(w.Until)
	case ReasonWindow:
		// Without borrowed jobs every session is an agent of the
		// destination; with them, saying "agents" would have the operator
		// look for agents the thread does not have.
		busy := fmt.Sprintf("%d of %d agents busy", w.Busy, w.Window)
		if w.Borrowed > 0 {
			busy = fmt.Sprintf("%d of %d sessions busy, %d of them jobs borrowed by agents of other destinations", w.Busy, w.Window, w.Borrowed)
		}
		if w.Ceiling > 0 {
			return fmt.Sprintf("destination concurrency window full: %s (learned ceiling %d)", busy, w.Ceiling)
		}
		return "destination concurrency window full: " + busy
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
	case ReasonCluster:
		c := w.Cluster
		if c == nil || c.Asking {
			return "waiting for the cluster's answer to a session request"
		}
		txt := fmt.Sprintf("the cluster's shared window is full: %d of %d sessions busy on %d nodes (%d on this node",
			c.Leases, c.Window, c.Nodes, c.Mine)
		if c.Borrowed > 0 {
			txt += fmt.Sprintf(", %d of them jobs borrowed by agents of other destinations", c.Borrowed)
		}
		if by := c.Sessions(); by != "" {
			txt += "; by node: " + by
		}
		txt += ")"
		if c.Fallback {
			txt += "; cluster: fallback (the store is unreachable: this node's share of the last shared window)"
		}
		return txt
	}
	return w.Reason.String()
}

// Borrowing says, for a running job that borrows a session of its
// destination, which destination its agent is attached to; "" otherwise.
func (w Why) Borrowing() string {
	if w.Reason != ReasonRunning || w.Via == "" {
		return ""
	}
	return ", attached to " + w.Via + ", on a session of this destination it borrowed"
}

func (s *Core) why(v *vertex.Vertex, t *thread.Thread, now time.Time) Why {
	switch {
	case v.Agent != 0:
		w := Why{Reason: ReasonRunning, Agent: v.Agent}
		if a := s.agents[v.Agent]; a != nil {
			for i := range a.fifo {
				if a.fifo[i].v == v && a.fifo[i].borrowed != nil {
					w.Via = a.host
				}
			}
		}
		return w
	case v.Clause < 0 || t == nil:
		return Why{Reason: ReasonUnrouted}
	case v.Msg.Held:
		return Why{Reason: ReasonHeldMessage}
	case t.Held:
		return Why{Reason: ReasonHeldThread}
	case t.QueueOnly && !t.ETRN:
		return Why{Reason: ReasonQueueOnly}
	case t.Window.Dead() && t.BackingOff(now):
		return Why{Reason: ReasonDead, Until: t.BackoffUntil}
	case t.BackingOff(now):
		return Why{Reason: ReasonBackoff, Until: t.BackoffUntil}
	case v.In(&t.Waiting):
		return Why{Reason: ReasonRetry, Until: v.Due()}
	}
	if t.Asking {
		c := s.clusterView(t)
		if c != nil {
			c.Borrowed = s.borrowedOn(t)
		}
		return Why{Reason: ReasonCluster, Cluster: c}
	}
	if lim := t.Window.Limit(); t.Busy >= lim {
		c, _ := t.Window.LearnedCeiling(now)
		return Why{Reason: ReasonWindow, Busy: t.Busy, Borrowed: s.borrowedOn(t), Window: lim, Ceiling: c}
	}
	if !t.Wants(now) {
		return Why{Reason: ReasonDue}
	}
	w := Why{Reason: s.limit(t, now)}
	c := s.clause(t.Clause)
	switch w.Reason {
	case ReasonMaxRing:
		w.Limit = s.maxRing(c)
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

func (s *Core) vertexView(v *vertex.Vertex, t *thread.Thread, now time.Time) VertexView {
	vv := VertexView{
		Path: v.Msg.Path, Inum: v.Msg.Inum, Channel: v.Channel, Host: v.Host,
		Rcpts: append([]vertex.Rcpt(nil), v.Rcpts...), Attempts: int(v.Attempts),
		Expires: s.expires(v), Why: s.why(v, t, now), LastText: v.LastText(),
	}
	if t != nil {
		vv.Wake = t.Wake()
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
func (s *Core) Message(now time.Time, id string) (MessageView, error) {
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

func (s *Core) lookup(id string) *vertex.Message {
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
	// Body names are unique in a queue; should two messages share one,
	// the first to arrive is the one named, whatever the map's order.
	var found *vertex.Message
	for _, m := range s.msgs {
		if (m.ID == id || m.Path == id) && (found == nil || m.Seq < found.Seq) {
			found = m
		}
	}
	return found
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

// threadVertices returns every vertex of t: ready, waiting, fed, and those
// of held messages.
func (s *Core) threadVertices(t *thread.Thread) []*vertex.Vertex {
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
	for _, m := range s.heldMessages {
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
func (s *Core) ThreadVertices(now time.Time, channel, host string) []VertexView {
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

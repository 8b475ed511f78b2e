package core

import (
	"errors"
	"math/rand"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/report"
	"zsched/ring"
	"zsched/thread"
	"zsched/vertex"
	"zsched/window"
)

// ErrDuplicate is returned by Arrive for a message already in core.
var ErrDuplicate = errors.New("core: message already in core")

// expirySweepEvery bounds how often the core looks at expiry deadlines that
// no attempt will reach (ZMailer: 15 minutes).
const expirySweepEvery = time.Minute

// maxGarbage is how many misformed lines an agent may write in one job (or
// between two #hungry) before it is killed: a real agent that writes a
// warning per job is not restarted every hundred jobs.
const maxGarbage = 100

// maxResyncs bounds #resync re-reads of one message (ZMailer's MAXRESYNCS).
const maxResyncs = 30

type agentState uint8

const (
	starting agentState = iota // spawned, its first #hungry not yet seen
	working                    // attached to a thread or between threads
	idling                     // #idle written, its #hungry not yet seen
	idle                       // in the ring's idle pool
	ending                     // told to end or killed; waiting for exit
)

var agentStateNames = [...]string{"starting", "working", "idling", "idle", "ending"}

func (s agentState) String() string { return agentStateNames[s] }

type entryKind uint8

const (
	entryStart entryKind = iota // the unsolicited first #hungry
	entryJob
	entryIdle
)

// entry is one line written to an agent and not yet answered by #hungry.
type entry struct {
	kind entryKind
	v    *vertex.Vertex
	msg  *vertex.Message // v.Msg at feed time; a dropped message no longer matches
	// deferred are the recipients the agent reported as not delivered in
	// this attempt; recipients it did not report at all are added when the
	// job ends.
	deferred []deferral
	fed      time.Time
	reported int // reports of this job, of any status
	// thread is v's thread (threadOf), kept from the feed so that its
	// reports and its end find it without a map lookup by v's names: a
	// vertex stays in its thread while its job runs (a reload re-keys the
	// thread in place; a dropped message's vertex leaves it at the end).
	thread *thread.Thread
	// borrowed is the thread of a job fed from another thread than the
	// agent's (feed = "message"): the job holds one of that thread's
	// sessions (its Busy) until it ends or its agent is killed; nil
	// when none is held.
	borrowed *thread.Thread
	// lease is the borrowed session's hold on its thread's window in the
	// book (book.go), 0 without a book.
	lease window.Lease
}

type deferral struct {
	offset int64
	status report.Status
	text   string
	at     time.Time // a site failure's retryat time; zero if none
}

type agent struct {
	id      int
	clause  int
	channel string
	ring    *ring.Ring
	thread  *thread.Thread
	host    string
	state   agentState
	fifo    []entry // the lines outstanding, oldest first (push, pop)
	// fifoBase is the array fifo is a window of, from its start: pop
	// reslices fifo at the front, push moves it back down (fifo.go).
	fifoBase []entry
	jobs     int // entries of kind entryJob in fifo
	heard    time.Time
	garbage  int  // misformed lines since its last #hungry
	killed   bool // by the scheduler: its exit is no transport failure
	hungry   bool // it has said #hungry at least once
	failed   bool // its exit was a transport failure (throttle.go)
	gen      int  // the ring's throttle it was started under, 0 = none
	// killReason is why the core killed it (jobtimeout, garbage): its
	// unfinished jobs say so, not "signal: killed".
	killReason string
	// lease is its session's hold on the thread's window in the book
	// (book.go), 0 without a book.
	lease window.Lease
	// peers is the message whose other vertices in the ring the agent is
	// fed next (feed = "message"), nil when none.
	peers *vertex.Message
	// peerAt is where in peers.Vertices the next look for a peer starts.
	peerAt int
}

// Core is the deterministic scheduling core: every decision of the
// scheduler, as a state machine (doc.go). It is not safe for concurrent
// use: one goroutine owns it. (config.Scheduler is another thing: the
// [scheduler] table of the configuration.)
type Core struct {
	cfg *config.Config
	// ringCap caps every clause's maxring (SetRingCap); 0: none.
	ringCap int
	log     hclog.Logger
	rng     *rand.Rand

	msgs    map[int64]*vertex.Message
	threads map[thread.Key]*thread.Thread
	rings   map[ring.Key]*ring.Ring
	agents  map[int]*agent

	agenda  thread.Heap  // threads by their next time of interest (ByWake)
	blocked []*ring.Ring // rings waiting for a global, channel or fork-rate slot

	total      int
	perChannel map[string]int
	nextAgent  int
	seq        uint64

	forkSecond int64
	forks      int

	routes    map[[2]string]route // by (channel, host): a cache (match, routeThread)
	dests     destinations        // learned state of destinations without a thread
	unmatched []*vertex.Vertex
	nextSweep time.Time
	// forkBlocked is set while a ring waits for the fork rate's next second.
	forkBlocked bool
	nextExpiry  time.Time

	stats   Counters
	latency Latency
	picker  orderPicker // the rings' view of the threads (order.go)

	// The batches (Ready, Advance): ready collects the effects of the
	// events since the batch in hand was taken; inHand is that batch, its
	// slices the caller's until Advance; spare holds emptied slices for the
	// next batch. owed counts the re-reads of the batch in hand not yet
	// answered through Reread, answered marks which.
	ready    Ready
	inHand   Ready
	spare    Ready
	taken    bool
	owed     int
	answered []bool

	// Operator state (commands.go, queue.go): destination holds by (channel, host),
	// which outlive their threads; held messages, whose vertices sit in no
	// heap; stopping once shutdown stops all feeding.
	heldDests    map[[2]string]DestMatcher // by (channel glob, host glob), compiled: queue.go
	heldMessages map[int64]*vertex.Message
	stopping     bool

	// Transport state (throttle.go, words.go): throttled rings, the next
	// end of a back-off, and per ring the rate limits of agent words.
	throttles   map[ring.Key]*throttle
	throttleGen int
	nextLift    time.Time
	words       map[ring.Key]*words

	// The windows' book (book.go): nil = the threads' own windows.
	book       window.Book
	seats      map[window.Dest]*seat
	retrySeats []*seat // denied seats with a retry time, in denial order

	// borrowed counts the jobs that hold a session of another thread than
	// their agent's (entry.borrowed, feed = "message"): the views walk the
	// agents for them only when there are any.
	borrowed int
}

// Counters are the scheduler's running totals.
type Counters struct {
	Arrived     int64
	Delivered   int64
	Failed      int64
	Deferred    int64
	Expired     int64
	Spawned     int64
	AgentsEnded int64
	Killed      int64
	Garbage     int64
	// Throttles counts transport throttles: rings whose agents failed at
	// start and that wait before starting another (throttle.go).
	Throttles int64
}

// New returns an empty scheduler for cfg.
func New(cfg *config.Config, log hclog.Logger, rng *rand.Rand) *Core {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Core{
		cfg:          cfg,
		log:          log,
		rng:          rng,
		msgs:         make(map[int64]*vertex.Message),
		threads:      make(map[thread.Key]*thread.Thread),
		rings:        make(map[ring.Key]*ring.Ring),
		agents:       make(map[int]*agent),
		perChannel:   make(map[string]int),
		routes:       make(map[[2]string]route),
		heldDests:    make(map[[2]string]DestMatcher),
		heldMessages: make(map[int64]*vertex.Message),
	}
}

// Counters returns the running totals.
func (s *Core) Counters() Counters { return s.stats }

// Messages returns how many messages are in core.
func (s *Core) Messages() int { return len(s.msgs) }

// Agents returns how many agents exist, idle and ending ones included.
func (s *Core) Agents() int { return s.total }

// Idle reports whether nothing is queued and no agent is busy: the state
// in which `run -drain` may finish.
func (s *Core) Idle() bool {
	if len(s.msgs) > 0 {
		return false
	}
	for _, a := range s.agents {
		if a.jobs > 0 {
			return false
		}
	}
	return true
}

// NextWakeup returns when Tick should next be called; zero means only an
// event can create work.
func (s *Core) NextWakeup() time.Time {
	var w time.Time
	if t := s.agenda.Min(); t != nil {
		w = t.Wake()
	}
	earlier := func(at time.Time) {
		if !at.IsZero() && (w.IsZero() || at.Before(w)) {
			w = at
		}
	}
	earlier(s.nextSweep)
	earlier(s.nextLift)
	if len(s.retrySeats) > 0 {
		earlier(s.nextRetry())
	}
	if len(s.msgs) > 0 {
		earlier(s.nextExpiry)
	}
	if s.forkBlocked {
		// Rings blocked by the fork rate may start in the next second;
		// others wait for an agent to exit.
		earlier(time.Unix(s.forkSecond+1, 0))
	}
	return w
}

func (s *Core) clause(i int) *config.Clause { return &s.cfg.Clauses[i] }

// Arrive places a control file's pending recipients into threads and rings.
func (s *Core) Arrive(now time.Time, a Arrival) error {
	s.event("Arrive")
	if _, dup := s.msgs[a.Inum]; dup {
		return ErrDuplicate
	}
	s.seq++
	m := &vertex.Message{
		Inum:    a.Inum,
		Path:    a.Path,
		ID:      a.ID,
		QID:     a.QID,
		Arrival: a.Arrival,
		Seq:     s.seq,
		Bounce:  a.Bounce,
		Warned:  a.Warned,
		Diags:   a.Diags,
	}
	if m.QID == "" {
		m.QID = a.Path
	}
	m.Vertices = make([]*vertex.Vertex, 0, len(a.Groups))
	s.msgs[a.Inum] = m
	if a.Held {
		m.Held = true
		s.heldMessages[a.Inum] = m
	}
	s.stats.Arrived++
	if s.nextExpiry.IsZero() {
		s.nextExpiry = now.Add(s.expiryEvery())
	}
	for _, r := range a.Refused {
		s.refuse(m, r, now)
	}
	for _, g := range a.Groups {
		if len(g.Rcpts) == 0 {
			continue
		}
		m.Pending += len(g.Rcpts)
		host := strings.ToLower(g.Host)
		t := s.routeThread(g.Channel, host, now)
		if t == nil {
			s.log.Error("no clause matches; recipients wait for a config that routes them",
				"msg", m.QID, "channel", g.Channel, "host", host, "rcpts", len(g.Rcpts))
			v := vertex.New(m, &vertex.Dest{Clause: -1, Channel: g.Channel, Host: host}, g.Rcpts)
			restoreRetry(v, g, now)
			m.Vertices = append(m.Vertices, v)
			s.unmatched = append(s.unmatched, v)
			continue
		}
		v := vertex.New(m, &t.Key, g.Rcpts)
		restoreRetry(v, g, now)
		m.Vertices = append(m.Vertices, v)
		s.placeVertex(t, v, now)
		s.update(t, now)
	}
	if m.Pending == 0 {
		s.complete(m)
	}
	return nil
}

// placeVertex puts v, a vertex of a message in core, into thread t: it
// takes t's key as its destination (one copy of the names per destination
// in core instead of one per vertex, DESIGN §8), is ranked in t's ring,
// counted in t and put on the heap its time calls for. Arrive places new
// vertices through it, Reconfigure those a new clause routes; the caller
// then updates t.
func (s *Core) placeVertex(t *thread.Thread, v *vertex.Vertex, now time.Time) {
	v.Dest = &t.Key
	s.orderAdd(s.ring(t), v, now)
	t.Join(v)
	t.Add(v, now)
}

// route is what the core keeps of a (channel, host) it has routed: the
// clause that matches it (-1: none) and, once an arrival looked it up and
// while it exists, its thread. config.Match is a linear glob scan and
// arrivals repeat destinations; and with the thread kept, an arrival's
// group costs one map lookup by its names instead of two (the clause, then
// the thread by clause, channel and host). A reload clears the cache;
// dropThread forgets the thread.
type route struct {
	clause int
	thread *thread.Thread
}

// match returns the clause for (channel, host), cached.
func (s *Core) match(channel, host string) (int, bool) {
	k := [2]string{channel, host}
	if rt, ok := s.routes[k]; ok {
		return rt.clause, rt.clause >= 0
	}
	ci := s.matchNew(k)
	return ci, ci >= 0
}

// matchNew matches (channel, host) in the configuration and caches it, with
// no thread; -1 when no clause matches.
func (s *Core) matchNew(k [2]string) int {
	ci, ok := s.cfg.Match(k[0], k[1])
	if !ok {
		ci = -1
	}
	s.setRoute(k, route{clause: ci})
	return ci
}

func (s *Core) setRoute(k [2]string, rt route) {
	if _, ok := s.routes[k]; !ok && len(s.routes) >= maxClauseCache {
		clear(s.routes)
	}
	s.routes[k] = rt
}

// routeThread returns the thread for (channel, host), made if need be; nil
// when no clause matches.
func (s *Core) routeThread(channel, host string, now time.Time) *thread.Thread {
	k := [2]string{channel, host}
	rt, ok := s.routes[k]
	if ok && rt.thread != nil {
		return rt.thread
	}
	if !ok {
		rt.clause = s.matchNew(k)
	}
	if rt.clause < 0 {
		return nil
	}
	rt.thread = s.thread(rt.clause, channel, host, now)
	s.setRoute(k, rt)
	return rt.thread
}

// maxClauseCache bounds the route cache; past it the cache starts over.
const maxClauseCache = 1 << 16

// thread finds or creates the thread and ring for a vertex: map lookups,
// never scans.
func (s *Core) thread(ci int, channel, host string, now time.Time) *thread.Thread {
	k := thread.Key{Clause: ci, Channel: channel, Host: host}
	if t, ok := s.threads[k]; ok {
		return t
	}
	c := s.clause(ci)
	t := thread.New(k, thread.NewWindow(c))
	t.QueueOnly = c.QueueOnly
	t.Held = s.destHeld(channel, host)
	s.restoreLearned(t, now)
	s.threads[k] = t
	s.ring(t).AddThread()
	return t
}

func (s *Core) ringKey(t *thread.Thread) ring.Key {
	k := ring.Key{Clause: t.Clause, Channel: t.Channel}
	if s.clause(t.Clause).Command.HostBound() {
		k.Host = t.Host
	}
	return k
}

// ring returns t's ring, making it if there is none. The ring is kept on
// the thread (thread.Thread.Ring): a thread's ring changes only in a reload,
// which sets it anew, and is not dropped while the thread exists (it counts
// the thread).
func (s *Core) ring(t *thread.Thread) *ring.Ring {
	if r, ok := t.Ring.(*ring.Ring); ok {
		return r
	}
	k := s.ringKey(t)
	r, ok := s.rings[k]
	if !ok {
		r = ring.New(k, k.Host != "")
		setOrder(r, s.clause(k.Clause))
		s.rings[k] = r
	}
	t.Ring = r
	return r
}

// update restores every index that depends on t after t changed: the ring's
// wanting heap and the agenda; it drops t once empty and idle, ends an ETRN
// run with nothing due left, and, if t wants an agent, gives it one.
func (s *Core) update(t *thread.Thread, now time.Time) {
	s.reviveDue(t, now)
	if t.Vertices() == 0 && t.Busy == 0 {
		s.keepLearned(t, now)
		s.dropThread(t)
		return
	}
	if t.ETRN && t.Busy == 0 && (t.Ready.Len() == 0 || t.BackingOff(now)) {
		// An ETRN run ends when nothing due is left: what it deferred
		// waits for the next ETRN, as queueonly means.
		t.ETRN = false
	}
	r := s.ring(t)
	r.Update(t, now)
	s.agenda.SetWake(t, t.NextWake(now))
	if r.Offers(t) {
		s.serve(r, now, -1)
	}
}

func (s *Core) dropThread(t *thread.Thread) {
	r := s.ring(t)
	r.RemoveThread(t)
	s.agenda.SetWake(t, time.Time{})
	delete(s.threads, t.Key)
	if k := [2]string{t.Channel, t.Host}; s.routes[k].thread == t {
		s.routes[k] = route{clause: t.Clause}
	}
	if s.book != nil {
		s.dropSeat(t)
	}
	if r.Empty() {
		s.dropRing(r)
	}
}

func (s *Core) dropRing(r *ring.Ring) {
	if r.Blocked() {
		for i, x := range s.blocked {
			if x == r {
				s.blocked = append(s.blocked[:i], s.blocked[i+1:]...)
				break
			}
		}
		r.SetBlocked(false)
	}
	delete(s.rings, r.Key)
	s.ringGone(r.Key)
}

func (s *Core) threadOf(v *vertex.Vertex) *thread.Thread {
	if v.Clause < 0 {
		return nil
	}
	return s.threads[*v.Dest]
}

// Tick handles timers: threads whose time has come, job timeouts, idle
// reaping and the expiry sweep.
func (s *Core) Tick(now time.Time) {
	s.event("Tick")
	for t := s.agenda.Min(); t != nil && !t.Wake().After(now); t = s.agenda.Min() {
		s.agenda.SetWake(t, time.Time{})
		t.Promote(now)
		s.update(t, now)
	}
	if !s.nextSweep.IsZero() && !now.Before(s.nextSweep) {
		s.sweepAgents(now)
	}
	s.liftThrottles(now)
	if len(s.retrySeats) > 0 {
		s.retryDenied(now)
	}
	if !now.Before(s.nextExpiry) {
		s.nextExpiry = now.Add(s.expiryEvery())
		s.sweepExpiry(now)
		s.sweepHeld(now)
		s.forgetStale(now)
	}
	if len(s.blocked) > 0 {
		s.unblock(now)
	}
}

// Has reports whether message inum is in core.
func (s *Core) Has(inum int64) bool {
	_, ok := s.msgs[inum]
	return ok
}

// dropRcpt removes v's recipient i (vertex.Drop) and un-counts it in v's
// thread.
func (s *Core) dropRcpt(v *vertex.Vertex, i int) vertex.Rcpt {
	return dropRcptIn(s.threadOf(v), v, i)
}

// hasJob reports whether a has a job line for message inum outstanding.
func (a *agent) hasJob(inum int64) bool {
	for _, e := range a.fifo {
		if e.kind == entryJob && e.msg.Inum == inum {
			return true
		}
	}
	return false
}

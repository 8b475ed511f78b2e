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
	fifo    []entry
	jobs    int // entries of kind entryJob in fifo
	heard   time.Time
	garbage int  // misformed lines since its last #hungry
	killed  bool // by the scheduler: its exit is no transport failure
	hungry  bool // it has said #hungry at least once
	failed  bool // its exit was a transport failure (throttle.go)
	gen     int  // the ring's throttle it was started under, 0 = none
	// killReason is why the core killed it (jobtimeout, garbage): its
	// unfinished jobs say so, not "signal: killed".
	killReason string
}

// Scheduler is the deterministic scheduling core. It is not safe for
// concurrent use: one goroutine owns it.
type Scheduler struct {
	cfg *config.Config
	log hclog.Logger
	rng *rand.Rand

	msgs    map[int64]*vertex.Message
	threads map[thread.Key]*thread.Thread
	rings   map[ring.Key]*ring.Ring
	agents  map[int]*agent

	timers  timerHeap
	blocked []*ring.Ring // rings waiting for a global, channel or fork-rate slot

	total      int
	perChannel map[string]int
	nextAgent  int
	seq        uint64

	forkSecond int64
	forks      int

	clauses   map[[2]string]int // (channel, host) → clause index, -1 none
	dests     destinations      // learned state of destinations without a thread
	unmatched []*vertex.Vertex
	nextSweep time.Time
	// forkBlocked is set while a ring waits for the fork rate's next second.
	forkBlocked bool
	nextExpiry  time.Time

	stats   Counters
	latency Latency
	ready   Ready
	spare   Ready       // the batch Ready returned last: its slices are reused
	picker  orderPicker // the rings' view of the threads (order.go)

	// Operator state (ops.go): destination holds by (channel, host), which
	// outlive their threads; held messages, whose vertices sit in no heap;
	// quiet once shutdown stops all feeding.
	holds    map[[2]string]DestMatcher // by (channel glob, host glob), compiled: queue.go
	heldMsgs map[int64]*vertex.Message
	quiet    bool

	// Transport state (throttle.go, words.go): throttled rings, the next
	// end of a back-off, and per ring the rate limits of agent words.
	throttles   map[ring.Key]*throttle
	throttleGen int
	nextLift    time.Time
	words       map[ring.Key]*words
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
func New(cfg *config.Config, log hclog.Logger, rng *rand.Rand) *Scheduler {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Scheduler{
		cfg:        cfg,
		log:        log,
		rng:        rng,
		msgs:       make(map[int64]*vertex.Message),
		threads:    make(map[thread.Key]*thread.Thread),
		rings:      make(map[ring.Key]*ring.Ring),
		agents:     make(map[int]*agent),
		perChannel: make(map[string]int),
		clauses:    make(map[[2]string]int),
		holds:      make(map[[2]string]DestMatcher),
		heldMsgs:   make(map[int64]*vertex.Message),
	}
}

// Ready returns the effects of the events since the last call. Its slices
// are the core's: they stay valid while the caller carries them out, other
// calls into the core included, until the next call of Ready, which reuses
// them (a caller that keeps actions longer copies them). Reuse is what
// makes a dispatch allocate no action slices: under load Ready is called
// for every batch of agent lines.
func (s *Scheduler) Ready() Ready {
	r := s.ready
	s.ready = s.spare.reuse()
	s.spare = r
	return r
}

// readyKeep bounds the slices Ready keeps for reuse: a burst (a scan that
// queued thousands of messages, a mass expiry) must not pin its memory.
const readyKeep = 4096

// reuse returns r's slices emptied, their elements cleared so that they
// hold no strings or messages alive.
func (r *Ready) reuse() Ready {
	return Ready{
		Spawns:    reuseSlice(r.Spawns),
		Writes:    reuseSlice(r.Writes),
		Stops:     reuseSlice(r.Stops),
		Diags:     reuseSlice(r.Diags),
		Outcomes:  reuseSlice(r.Outcomes),
		Completes: reuseSlice(r.Completes),
		Rereads:   reuseSlice(r.Rereads),
		DSNs:      reuseSlice(r.DSNs),
		Throttles: reuseSlice(r.Throttles),
	}
}

func reuseSlice[T any](s []T) []T {
	if cap(s) > readyKeep {
		return nil
	}
	clear(s)
	return s[:0]
}

// Counters returns the running totals.
func (s *Scheduler) Counters() Counters { return s.stats }

// Messages returns how many messages are in core.
func (s *Scheduler) Messages() int { return len(s.msgs) }

// Agents returns how many agents exist, idle and ending ones included.
func (s *Scheduler) Agents() int { return s.total }

// Idle reports whether nothing is queued and no agent is busy: the state
// in which `run -drain` may finish.
func (s *Scheduler) Idle() bool {
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
func (s *Scheduler) NextWakeup() time.Time {
	var w time.Time
	if len(s.timers) > 0 {
		w = s.timers[0].Wake
	}
	earlier := func(at time.Time) {
		if !at.IsZero() && (w.IsZero() || at.Before(w)) {
			w = at
		}
	}
	earlier(s.nextSweep)
	earlier(s.nextLift)
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

func (s *Scheduler) clause(i int) *config.Clause { return &s.cfg.Clauses[i] }

// Arrive places a control file's pending recipients into threads and rings.
func (s *Scheduler) Arrive(now time.Time, a Arrival) error {
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
		s.heldMsgs[a.Inum] = m
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
		ci, ok := s.match(g.Channel, host)
		if !ok {
			s.log.Error("no clause matches; recipients wait for a config that routes them",
				"msg", m.QID, "channel", g.Channel, "host", host, "rcpts", len(g.Rcpts))
			v := vertex.New(m, &vertex.Dest{Clause: -1, Channel: g.Channel, Host: host}, g.Rcpts)
			restoreRetry(v, g, now)
			m.Vertices = append(m.Vertices, v)
			s.unmatched = append(s.unmatched, v)
			continue
		}
		t := s.thread(ci, g.Channel, host)
		// The thread's key, not the control file's strings: one copy per
		// destination in core instead of one per vertex (DESIGN §8).
		v := vertex.New(m, &t.Key, g.Rcpts)
		restoreRetry(v, g, now)
		m.Vertices = append(m.Vertices, v)
		s.orderAdd(s.ring(t), m, []*vertex.Vertex{v}, now)
		t.Vertices++
		tallyJoin(t, v)
		t.Add(v, now)
		s.touch(t, now)
	}
	if m.Pending == 0 {
		s.complete(m)
	}
	return nil
}

// match returns the clause for (channel, host), cached: config.Match is a
// linear glob scan and arrivals repeat destinations.
func (s *Scheduler) match(channel, host string) (int, bool) {
	k := [2]string{channel, host}
	if ci, ok := s.clauses[k]; ok {
		return ci, ci >= 0
	}
	ci, ok := s.cfg.Match(channel, host)
	if !ok {
		ci = -1
	}
	if len(s.clauses) >= maxClauseCache {
		clear(s.clauses)
	}
	s.clauses[k] = ci
	return ci, ok
}

// maxClauseCache bounds the clause cache; past it the cache starts over.
const maxClauseCache = 1 << 16

// thread finds or creates the thread and ring for a vertex: map lookups,
// never scans.
func (s *Scheduler) thread(ci int, channel, host string) *thread.Thread {
	k := thread.Key{Clause: ci, Channel: channel, Host: host}
	if t, ok := s.threads[k]; ok {
		return t
	}
	c := s.clause(ci)
	t := thread.New(k, thread.NewWindow(c))
	t.QueueOnly = c.QueueOnly
	t.Held = s.destHeld(channel, host)
	s.recall(t)
	s.threads[k] = t
	r := s.ring(t)
	r.Threads++
	return t
}

func (s *Scheduler) ringKey(t *thread.Thread) ring.Key {
	k := ring.Key{Clause: t.Clause, Channel: t.Channel}
	if s.clause(t.Clause).Command.HostBound() {
		k.Host = t.Host
	}
	return k
}

func (s *Scheduler) ring(t *thread.Thread) *ring.Ring {
	k := s.ringKey(t)
	r, ok := s.rings[k]
	if !ok {
		r = ring.New(k, k.Host != "")
		s.rings[k] = r
	}
	return r
}

// touch restores every index that depends on t after t changed: the ring's
// wanting heap, the timer heap, and, if t wants an agent, gives it one.
func (s *Scheduler) touch(t *thread.Thread, now time.Time) {
	s.reviveDue(t, now)
	if t.Vertices == 0 && t.Busy == 0 {
		s.remember(t, now)
		s.dropThread(t)
		return
	}
	if t.Turned && t.Busy == 0 && (t.Ready.Len() == 0 || t.BackingOff(now)) {
		// An ETRN run ends when nothing due is left: what it deferred
		// waits for the next ETRN, as queueonly means.
		t.Turned = false
	}
	r := s.ring(t)
	r.Update(t, now)
	s.timers.set(t, t.NextWake(now))
	if t.RingIndex >= 0 {
		s.serve(r, now, -1)
	}
}

func (s *Scheduler) dropThread(t *thread.Thread) {
	r := s.ring(t)
	r.Remove(t)
	s.timers.set(t, time.Time{})
	delete(s.threads, t.Key)
	r.Threads--
	if r.Empty() {
		s.dropRing(r)
	}
}

func (s *Scheduler) dropRing(r *ring.Ring) {
	if r.Blocked {
		for i, x := range s.blocked {
			if x == r {
				s.blocked = append(s.blocked[:i], s.blocked[i+1:]...)
				break
			}
		}
		r.Blocked = false
	}
	delete(s.rings, r.Key)
	s.ringGone(r.Key)
}

func (s *Scheduler) threadOf(v *vertex.Vertex) *thread.Thread {
	if v.Clause < 0 {
		return nil
	}
	return s.threads[*v.Dest]
}

// Tick handles timers: threads whose time has come, job timeouts, idle
// reaping and the expiry sweep.
func (s *Scheduler) Tick(now time.Time) {
	for len(s.timers) > 0 && !s.timers[0].Wake.After(now) {
		t := s.timers[0]
		s.timers.set(t, time.Time{})
		t.Promote(now)
		s.touch(t, now)
	}
	if !s.nextSweep.IsZero() && !now.Before(s.nextSweep) {
		s.sweepAgents(now)
	}
	s.liftThrottles(now)
	if !now.Before(s.nextExpiry) {
		s.nextExpiry = now.Add(s.expiryEvery())
		s.sweepExpiry(now)
		s.sweepHeld(now)
	}
	if len(s.blocked) > 0 {
		s.unblock(now)
	}
}

// Has reports whether message inum is in core.
func (s *Scheduler) Has(inum int64) bool {
	_, ok := s.msgs[inum]
	return ok
}

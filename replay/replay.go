// Package replay is the policy simulator: it replays a trace's arrivals
// through the real scheduling core (package core, as the daemon drives it)
// with simulated transport agents on a fake clock, each destination
// answering as its model says (package model), and measures what the
// configuration did — the Result that `scheduler simulate` prints beside
// what the trace says really happened.
//
// The driver does what package sim does for tests, built for volume: it
// keeps only the messages in core, streams outcomes into counters, and
// runs the core's invariant check every Options.Check events rather than
// after each. What it adds is the daemon's admission (admission.Gate:
// message and recipient active limits; further arrivals wait, in arrival
// order, and one message may overshoot the recipient limit by its own
// size, as a control file is read whole), the
// destinations' sessions (each accepted session is open at its
// destination until it ends: that is the concurrency a limiter refuses
// above), and the agents' start-up time.
//
// Observations the core only logs (window changes, refusals) are taken
// here from the core's views and the driver's own sessions: the window of
// a followed destination is read with core.Thread after each of its
// deliveries is judged (the agent's #hungry), refusals are the sessions
// the model refused.
package replay

import (
	"fmt"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/admission"
	"zsched/config"
	"zsched/core"
	"zsched/model"
	"zsched/report"
	"zsched/sim"
	"zsched/vertex"
)

// Model is what the driver needs of a destination model; *model.Model is
// one.
type Model interface {
	Server(channel, host string) model.Server
	AgentStartup() time.Duration
}

// Options tune a run.
type Options struct {
	Name string // the Result's name (the configuration file)
	Seed int64
	// Check runs the core's invariant check every Check events (0: never;
	// 1: after every event, as tests do).
	Check int
	// Until stops the clock; zero runs until the queue is empty.
	Until time.Time
	// Top is how many of the destinations with the most recipients have
	// their window followed. Default 5.
	Top int
	// Progress, when set, is called every ProgressEvery events (default
	// 100 000) and at the end.
	Progress      func(Progress)
	ProgressEvery int
	// Trace, when set, gets the run's outcome log: the daemon's outcome
	// line, one per recipient outcome, stamped with the simulated clock
	// (JSON with TraceJSON) — a trace like a real run's (agent ids stand
	// for pids).
	Trace     io.Writer
	TraceJSON bool
}

// Progress reports how far a run is.
type Progress struct {
	Now      time.Time
	Arrived  int // messages handed to the core
	Messages int // in the workload
	Events   int64
	Done     bool
}

// Run replays w under cfg with destinations answering as m says.
func Run(cfg *config.Config, w *Workload, m Model, o Options) (Result, error) {
	if o.Top <= 0 {
		o.Top = 5
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 100_000
	}
	s := &run{
		cfg: cfg, w: w, m: m, o: o,
		core: core.New(cfg, hclog.NewNullLogger(), rand.New(rand.NewSource(o.Seed))),
		gate: admission.NewGate(admission.Limits{Messages: cfg.Scheduler.MessageActiveLimit,
			Recipients: cfg.Scheduler.RecipientActiveLimit}),
		rng:     rand.New(rand.NewSource(o.Seed + 1)),
		agents:  make(map[int]*agent),
		msgs:    make(map[int64]*msg),
		dests:   make([]destState, len(w.Dests)),
		destIdx: make(map[[2]string]int32, len(w.Dests)),
		startup: m.AgentStartup(),
		nextIn:  1000,
	}
	for i, d := range w.Dests {
		_, s.dests[i].routed = cfg.Match(d.Channel, d.Host)
		s.dests[i].server = m.Server(d.Channel, d.Host)
		s.destIdx[[2]string{d.Channel, strings.ToLower(d.Host)}] = int32(i)
		s.dests[i].top = -1
	}
	for k, i := range TopDests(w, o.Top) {
		s.dests[i].top = k
		d := w.Dests[i]
		s.res.Top = append(s.res.Top, DestResult{Name: d.Name(), Recipients: d.Recipients})
	}
	if len(w.Msgs) > 0 {
		s.now = w.Msgs[0].Arrival
	}
	if o.Trace != nil {
		s.log = hclog.New(&hclog.LoggerOptions{Name: "zsched", Level: hclog.Info, JSONFormat: o.TraceJSON,
			Output: o.Trace, TimeFn: func() time.Time { return s.now }})
	}
	if err := s.loop(); err != nil {
		return s.result(), err
	}
	return s.result(), nil
}

// run is one simulation.
type run struct {
	cfg  *config.Config
	w    *Workload
	m    Model
	o    Options
	core *core.Core
	gate *admission.Gate // the daemon's admission (DESIGN §8)
	rng  *rand.Rand
	now  time.Time

	events   sim.Timeline[event]
	agents   map[int]*agent
	live     int
	msgs     map[int64]*msg
	nextIn   int64
	next     int // next message of w to arrive
	inRcpts  int // recipients pending in core
	unrouted int // of them, at destinations no clause matches: they wait for a reload
	dests    []destState
	destIdx  map[[2]string]int32
	startup  time.Duration
	status   []report.Status // scratch

	res    Result
	delays []time.Duration
	count  int64 // events handled
	err    error
	log    hclog.Logger // Options.Trace
}

// destState is a destination's state in the simulation.
type destState struct {
	server model.Server
	routed bool // a clause matches it
	open   int  // accepted sessions in progress
	peak   int
	top    int // index in res.Top, -1 if not followed
	wsum   float64
	wn     int
}

// msg is a message in core: the workload's message and each recipient's
// status byte, as the control file holds it.
type msg struct {
	inum   int64
	w      *Msg
	status []byte // ' ' pending, '~' locked, '+' delivered, '-' failed
}

// agent is a simulated transport agent: it serves its lines in order.
type agent struct {
	id      int
	channel string
	host    string // host-bound rings: its host
	lines   []string
	busy    bool // a job or start-up in progress
	dead    bool
	job     job
}

// job is the session an agent is in.
type job struct {
	m       *msg
	dest    int32
	rcpts   []int
	status  []report.Status
	refused bool
	retry   time.Duration
}

// The recipients' r-line offsets: one per recipient index.
const (
	firstOffset = 100
	offsetStep  = 64
)

func offsetOf(i int) int64 { return firstOffset + int64(i)*offsetStep }

func indexOf(off int64) int { return int((off - firstOffset) / offsetStep) }

type eventKind uint8

const (
	evHungry eventKind = iota // the agent writes #hungry
	evDone                    // the agent's session ends: reports, then #hungry
	evResync                  // the agent writes #resync path, then #hungry
	evExit                    // the agent's process has exited
)

type event struct {
	kind  eventKind
	agent int
	path  string
}

func (s *run) post(at time.Time, kind eventKind, agent int, path string) {
	s.events.Post(at, event{kind: kind, agent: agent, path: path})
}

func (s *run) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

// loop handles arrivals, agent events and the core's timers in time order
// until nothing is left to happen or the clock reaches Until.
func (s *run) loop() error {
	for s.err == nil {
		// What comes next: an agent event, an arrival the admission
		// lets in, or the core's timer — in that order at equal times;
		// or, while the gate holds arrivals back counting messages the
		// core no longer holds, its next reconciliation.
		var at time.Time
		kind := 0
		if next, ok := s.events.Next(); ok {
			at, kind = next, 1
		}
		if s.next < len(s.w.Msgs) {
			if !s.gate.Room(s.now, s.core, nil) {
				if w := s.gate.Wake(); s.gate.Messages() > s.core.Messages() && !w.IsZero() && (kind == 0 || w.Before(at)) {
					at, kind = w, 4
				}
			} else if a := s.w.Msgs[s.next].Arrival; kind == 0 || a.Before(at) {
				at, kind = a, 2
			}
		}
		if wake := s.core.NextWakeup(); !wake.IsZero() && (kind == 0 || wake.Before(at)) {
			if kind == 0 && s.next >= len(s.w.Msgs) && s.inRcpts <= s.unrouted {
				// Nothing queued that can move: only idle agents age,
				// and mail no clause routes waits for a reload.
				break
			}
			at, kind = wake, 3
		}
		if kind == 0 {
			break
		}
		if s.o.Until.IsZero() && at.Sub(s.w.End) > maxOverrun {
			s.fail(fmt.Errorf("replay: %d recipients still queued %s after the trace's end (is expiry off?); stopped",
				s.inRcpts, maxOverrun))
			break
		}
		if !s.o.Until.IsZero() && at.After(s.o.Until) {
			s.now = s.o.Until
			break
		}
		if at.After(s.now) {
			s.now = at
		}
		switch kind {
		case 1:
			_, e := s.events.Pop()
			s.deliver(e)
		case 2:
			s.arrive()
		case 3:
			s.core.Tick(s.now)
			s.apply()
		case 4: // the gate looks again at the next turn
		}
		s.count++
		if s.o.Check > 0 && s.count%int64(s.o.Check) == 0 {
			s.res.Checks++
			if err := s.core.Check(s.now); err != nil {
				s.fail(fmt.Errorf("replay: core check at %s (event %d): %w", s.now.Format(time.RFC3339Nano), s.count, err))
			}
		}
		if s.o.Progress != nil && s.count%int64(s.o.ProgressEvery) == 0 {
			s.o.Progress(Progress{Now: s.now, Arrived: s.next, Messages: len(s.w.Msgs), Events: s.count})
		}
	}
	if s.o.Progress != nil {
		s.o.Progress(Progress{Now: s.now, Arrived: s.next, Messages: len(s.w.Msgs), Events: s.count, Done: true})
	}
	return s.err
}

// maxOverrun bounds a run without Until past the trace's end: mail that
// never expires would keep the clock going.
const maxOverrun = 366 * 24 * time.Hour

// arrive hands the next message to the core.
func (s *run) arrive() {
	wm := &s.w.Msgs[s.next]
	s.next++
	s.nextIn++
	m := &msg{inum: s.nextIn, w: wm, status: make([]byte, len(wm.Rcpts))}
	for i := range m.status {
		m.status[i] = ' '
	}
	s.msgs[m.inum] = m
	s.inRcpts += len(wm.Rcpts)
	s.res.Recipients += len(wm.Rcpts)
	for _, d := range wm.Rcpts {
		if !s.dests[d].routed {
			s.unrouted++
		}
	}
	if err := s.core.Arrive(s.now, s.arrival(m)); err != nil {
		s.fail(fmt.Errorf("replay: arrive %d: %w", m.inum, err))
	}
	s.gate.Admit(m.inum, len(wm.Rcpts))
	s.apply()
}

// arrival is m's pending recipients grouped per destination, as a
// control file read from the queue.
func (s *run) arrival(m *msg) core.Arrival {
	path := strconv.FormatInt(m.inum, 10)
	a := core.Arrival{Inum: m.inum, Path: path, ID: path, Arrival: m.w.Arrival}
	var groups [8]int32
	idx := groups[:0]
	for i, d := range m.w.Rcpts {
		if m.status[i] != ' ' {
			continue
		}
		g := -1
		for k, gd := range idx {
			if gd == d {
				g = k
				break
			}
		}
		if g < 0 {
			g = len(idx)
			idx = append(idx, d)
			dd := s.w.Dests[d]
			a.Groups = append(a.Groups, core.Group{Channel: dd.Channel, Host: dd.Host})
		}
		a.Groups[g].Rcpts = append(a.Groups[g].Rcpts, vertex.Rcpt{Offset: offsetOf(i)})
	}
	return a
}

// apply carries out the core's actions.
func (s *run) apply() {
	for s.core.HasReady() {
		r := s.core.Ready()
		for _, sp := range r.Spawns {
			a := &agent{id: sp.Agent, channel: sp.Channel, host: sp.Host, busy: true}
			s.agents[a.id] = a
			s.live++
			s.res.AgentsStarted++
			s.res.PeakAgents = max(s.res.PeakAgents, s.live)
			s.post(s.now.Add(s.startup), evHungry, a.id, "")
		}
		for _, w := range r.Writes {
			if a := s.agents[w.Agent]; a != nil && !a.dead {
				a.lines = append(a.lines, w.Line)
				if !a.busy {
					s.begin(a)
				}
			}
		}
		for _, st := range r.Stops {
			if a := s.agents[st.Agent]; a != nil && !a.dead {
				a.dead = true
				a.lines = nil
				s.post(s.now, evExit, a.id, "")
			}
		}
		for _, o := range r.Outcomes {
			s.outcome(o)
		}
		for _, c := range r.Completes {
			delete(s.msgs, c.Inum)
			s.gate.Left(c.Inum)
		}
		for _, rr := range r.Rereads {
			m := s.msgs[rr.Inum]
			if m == nil {
				s.core.Reread(s.now, rr.Inum, nil)
				continue
			}
			for i, b := range m.status {
				if b == '~' {
					m.status[i] = ' ' // the locking agent is gone: a stale lock
				}
			}
			a := s.arrival(m)
			s.core.Reread(s.now, rr.Inum, &a)
		}
		s.core.Advance()
	}
}

// outcome counts one recipient's outcome.
func (s *run) outcome(o core.Outcome) {
	if s.log != nil {
		next := ""
		if !o.Next.IsZero() {
			next = o.Next.UTC().Format(time.RFC3339)
		}
		// The daemon's outcome line (daemon.logOutcome), key for key.
		s.log.Info("outcome", "msg", o.Path, "rcpt", o.Offset, "to", o.User, "channel", o.Channel,
			"host", o.Host, "ta", o.Agent, "status", o.Status, "delay", o.Delay.Truncate(time.Millisecond).String(),
			"attempts", o.Attempts, "next", next, "text", o.Text)
	}
	if o.Attempts == 1 && o.Status != "gone" {
		s.res.FirstAttempts++
		if !o.Final() {
			s.res.FirstDeferred++
		}
	}
	if !o.Final() {
		return
	}
	s.inRcpts--
	s.gate.Settled(o.Inum)
	switch o.Status {
	case "expired":
		s.res.Expired++
		if m := s.msgs[o.Inum]; m != nil {
			if i := indexOf(o.Offset); i >= 0 && i < len(m.status) && (m.status[i] == ' ' || m.status[i] == '~') {
				m.status[i] = '-' // the file goes with the message
			}
		}
	case "gone":
	default:
		st, _ := report.ParseStatus(o.Status)
		switch st.Class() {
		case report.Delivered:
			s.res.Delivered++
			s.delays = append(s.delays, o.Delay)
		case report.Permanent:
			s.res.Failed++
		}
	}
}

// begin starts the agent's next line, if it has one.
func (s *run) begin(a *agent) {
	for len(a.lines) > 0 && !a.busy {
		line := a.lines[0]
		a.lines = a.lines[1:]
		if line == "#idle" {
			s.post(s.now, evHungry, a.id, "")
			a.busy = true
			return
		}
		path, host, _ := strings.Cut(line, "\t")
		if host == "" {
			host = a.host
		}
		inum, _ := strconv.ParseInt(path, 10, 64)
		m := s.msgs[inum]
		d, ok := s.destIdx[[2]string{a.channel, strings.ToLower(host)}]
		j := job{m: m, dest: d}
		if m != nil && ok {
			for i, rd := range m.w.Rcpts {
				if rd == d && m.status[i] == ' ' {
					m.status[i] = '~'
					j.rcpts = append(j.rcpts, i)
				}
			}
		}
		a.busy = true
		if len(j.rcpts) == 0 {
			s.post(s.now, evResync, a.id, path)
			return
		}
		ds := &s.dests[d]
		j.status = make([]report.Status, len(j.rcpts))
		at := ds.server.Attempt(s.rng, ds.open, j.status)
		j.refused, j.retry = at.Refused, at.Retry
		if at.Refused {
			s.res.Refusals++
		} else {
			ds.open++
			ds.peak = max(ds.peak, ds.open)
		}
		a.job = j
		s.post(s.now.Add(max(at.Service, 0)), evDone, a.id, "")
	}
}

// deliver handles one agent event.
func (s *run) deliver(e event) {
	a := s.agents[e.agent]
	if a == nil {
		return
	}
	switch e.kind {
	case evExit:
		delete(s.agents, a.id)
		s.live--
		s.core.AgentExited(s.now, a.id, "simulated exit")
		s.apply()
		return
	case evDone:
		s.done(a)
		return
	}
	if a.dead {
		return
	}
	if e.kind == evResync {
		s.core.AgentLine(s.now, a.id, "#resync "+e.path)
		s.apply()
	}
	a.busy = false
	s.core.AgentLine(s.now, a.id, "#hungry")
	s.apply()
	s.begin(a)
}

// done ends an agent's session: the destination's session closes, the
// agent reports each recipient, marks it as a real agent marks the control
// file, and asks for more.
func (s *run) done(a *agent) {
	j := a.job
	a.job = job{}
	ds := &s.dests[j.dest]
	if !j.refused {
		ds.open--
	}
	if a.dead {
		return // its locks stay until the core's re-read resets them
	}
	for k, i := range j.rcpts {
		l := report.Line{Inum: j.m.inum, Offset: offsetOf(i), Status: j.status[k]}
		switch l.Status.Class() {
		case report.Delivered:
			j.m.status[i] = '+'
		case report.Permanent:
			j.m.status[i] = '-'
		default:
			j.m.status[i] = ' '
		}
		if l.Status == report.RetryAt {
			l.Retry = "+" + strconv.FormatInt(int64(max(j.retry, time.Second)/time.Second), 10)
		}
		s.core.AgentLine(s.now, a.id, l.String())
		s.apply()
	}
	a.busy = false
	s.core.AgentLine(s.now, a.id, "#hungry")
	s.apply()
	if ds.top >= 0 {
		d := s.w.Dests[j.dest]
		if tv, ok := s.core.Thread(s.now, d.Channel, d.Host); ok {
			t := &s.res.Top[ds.top]
			t.PeakWindow = max(t.PeakWindow, tv.Window)
			ds.wsum += float64(tv.Window)
			ds.wn++
		}
	}
	s.begin(a)
}

// result completes the Result.
func (s *run) result() Result {
	r := s.res
	r.Name = s.o.Name
	r.Until = s.now
	r.Events = s.count
	r.Pending = r.Recipients - r.Delivered - r.Failed - r.Expired
	r.Unrouted = s.unrouted
	// Messages that never entered the core are pending too.
	for _, m := range s.w.Msgs[s.next:] {
		r.Recipients += len(m.Rcpts)
		r.Pending += len(m.Rcpts)
	}
	r.setDelays(s.delays)
	for i := range s.dests {
		ds := &s.dests[i]
		if ds.top < 0 {
			continue
		}
		t := &r.Top[ds.top]
		t.PeakSessions = ds.peak
		if ds.wn > 0 {
			t.AvgWindow = ds.wsum / float64(ds.wn)
		}
	}
	return r
}

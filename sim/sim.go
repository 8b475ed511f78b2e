// Package sim runs the scheduling core against simulated transport agents
// and a fake clock: the harness for scenario scripts, property tests, the
// replay test and the feedback and preemption experiments. Agents answer
// job lines through a Behavior after a simulated service time, or, Manual,
// line by line as a script says; control files are in-memory recipient
// tables that agents mark as real ones do. Messages enter the core through
// the daemon's admission policy (package admission): the active limits,
// and on a restart the startup read. Format writes a batch of the core's
// actions as text. Everything is deterministic for a given seed.
package sim

import (
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/admission"
	"zsched/config"
	"zsched/core"
	"zsched/report"
	"zsched/vertex"
)

// Epoch is the simulation's start time.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Rcpt is one recipient of a simulated control file.
type Rcpt struct {
	Offset  int64
	Channel string
	Host    string
	User    string
	Notify  uint8
	Status  byte // ' ' pending, '+' done, '-' failed, '~' locked
}

// Msg is a simulated control file.
type Msg struct {
	Inum    int64
	Path    string
	Arrival time.Time
	Rcpts   []*Rcpt
	Diags   []core.Diag // d lines appended, in order
}

// Job is what an agent is asked to deliver: the pending recipients of Msg
// that match its channel and the job's host.
type Job struct {
	Agent *Agent
	Msg   *Msg
	Host  string
	Rcpts []*Rcpt
	// Reported counts the recipients a manual agent reported so far.
	Reported int
}

// Response is an agent's answer to one job.
type Response struct {
	// Status per recipient of the job, in order; missing ones are left
	// unreported (the core must treat them as deferred).
	Status []report.Status
	Retry  string        // retryat argument
	Text   string        // report text
	Delay  time.Duration // service time before the answer
	Crash  bool          // die instead of answering (after reporting Status)
	Hang   bool          // never answer
	// Say are lines the agent writes before its reports: its own words
	// (stderr text in socketpair mode), not protocol.
	Say []string
	// Resync answers the job with "#resync path" and reports nothing: the
	// agent could not use it (a read-only spool, the wrong channel).
	Resync bool
	// Notary, when set, goes with every report, its Recipient set to
	// each recipient's address.
	Notary report.Notary
}

// Behavior decides an agent's answer to a job.
type Behavior func(j Job) Response

// Sink delivers everything at once.
func Sink(j Job) Response {
	st := make([]report.Status, len(j.Rcpts))
	for i := range st {
		st[i] = report.OK3
	}
	return Response{Status: st}
}

// Agent is a simulated transport agent.
type Agent struct {
	ID      int
	Channel string
	Host    string
	Jobs    []string // job lines received, in order
	// Pending are the jobs a manual agent (Sim.Manual) was given and has
	// not finished (#hungry) yet, oldest first; lines are the lines it
	// must answer with #hungry, true for a job line.
	Pending []*Job
	lines   []bool
	busyAt  time.Time
	dead    bool
	hung    bool
}

// Sim is one simulation.
type Sim struct {
	Core     *core.Core
	Now      time.Time
	Behavior Behavior
	// Check runs the core's invariant check after every event.
	Check bool
	// Manual, when set, makes agents do nothing by themselves: they say
	// #hungry, report and exit when the caller says so (Hungry, Report,
	// Line, Exit), as a scenario script drives them; job lines wait in
	// Agent.Pending. Behavior is not used.
	Manual bool
	// OnReady, when set, sees each batch of the core's actions before the
	// simulation carries it out (d lines, completions and DSN requests are
	// the daemon's business: tests act the daemon's part there).
	OnReady func(r *core.Ready)

	Msgs map[int64]*Msg
	// Gate admits messages into the core under the configuration's
	// active limits, as the daemon's intake does; Waiting are the
	// messages it holds back on the simulated disk, oldest first.
	Gate    *admission.Gate
	Waiting []*Msg
	// Startup is the startup read a Restart runs (admission.Startup);
	// StartupEnd is why the last one ended.
	Startup    admission.Startup
	StartupEnd string
	Agents     map[int]*Agent
	Outcomes   []core.Outcome
	Completed  map[int64]bool
	Diags      int
	// JobLog is every job line written, in order, with the agent.
	JobLog []JobLine
	// PeakAgents is the most agents alive at once.
	PeakAgents int
	// Busy counts, per host, the agents working a job there now; PeakBusy
	// is its maximum.
	Busy     map[string]int
	PeakBusy map[string]int

	log     hclog.Logger
	events  Timeline[*event]
	nextIn  int64
	err     error
	stopped bool
}

// JobLine is one job line as the core wrote it.
type JobLine struct {
	At    time.Time
	Agent int
	Path  string
	Host  string
}

// New returns a simulation of cfg with the given behaviour; the core logs
// nowhere.
func New(cfg *config.Config, b Behavior, seed int64) *Sim {
	return NewLogged(cfg, b, seed, nil)
}

// NewLogged is New with the core logging to log (tests pass one that
// writes to t.Log), also after a Restart.
func NewLogged(cfg *config.Config, b Behavior, seed int64, log hclog.Logger) *Sim {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Sim{
		log:       log,
		Core:      core.New(cfg, log, rand.New(rand.NewSource(seed))),
		Gate:      admission.NewGate(limits(cfg)),
		Now:       Epoch,
		Behavior:  b,
		Msgs:      make(map[int64]*Msg),
		Agents:    make(map[int]*Agent),
		Completed: make(map[int64]bool),
		Busy:      make(map[string]int),
		PeakBusy:  make(map[string]int),
		nextIn:    1000,
	}
}

// Enqueue adds a message with recipients given as "channel/host/user" and
// hands it to the core. It returns the message.
func (s *Sim) Enqueue(rcpts ...string) *Msg {
	s.nextIn++
	m := &Msg{Inum: s.nextIn, Path: strconv.FormatInt(s.nextIn, 10), Arrival: s.Now}
	off := int64(100)
	for _, r := range rcpts {
		f := strings.SplitN(r, "/", 3)
		if len(f) != 3 {
			panic("sim: recipient must be channel/host/user: " + r)
		}
		m.Rcpts = append(m.Rcpts, &Rcpt{Offset: off, Channel: f[0], Host: f[1], User: f[2], Status: ' '})
		off += int64(len(r)) + 20
	}
	s.Msgs[m.Inum] = m
	s.Waiting = append(s.Waiting, m)
	s.apply()
	return m
}

// Add hands the core a message built by the caller (recipients with their
// own offsets and NOTIFY bits). A zero Inum, Path or Arrival is filled in
// as Enqueue fills them.
func (s *Sim) Add(m *Msg) {
	if m.Inum == 0 {
		s.nextIn++
		m.Inum = s.nextIn
	}
	if m.Path == "" {
		m.Path = strconv.FormatInt(m.Inum, 10)
	}
	if m.Arrival.IsZero() {
		m.Arrival = s.Now
	}
	s.Msgs[m.Inum] = m
	s.Waiting = append(s.Waiting, m)
	s.apply()
}

// limits are the gate's limits under cfg.
func limits(cfg *config.Config) admission.Limits {
	return admission.Limits{Messages: cfg.Scheduler.MessageActiveLimit, Recipients: cfg.Scheduler.RecipientActiveLimit}
}

// admit hands the core the waiting messages the gate lets in, in order,
// as the daemon's intake does with files read from the queue; it reports
// whether it admitted any.
func (s *Sim) admit() bool {
	n := 0
	for len(s.Waiting) > 0 && s.Gate.Room(s.Now, s.Core, nil) {
		m := s.Waiting[0]
		s.Waiting[0] = nil
		s.Waiting = s.Waiting[1:]
		a := s.arrival(m)
		for _, d := range m.Diags {
			a.Warned = a.Warned || d.Notary.Action == "delayed"
		}
		if err := s.Core.Arrive(s.Now, a); err != nil {
			s.fail(fmt.Errorf("arrive %d: %w", m.Inum, err))
			continue
		}
		rcpts := 0
		for _, g := range a.Groups {
			rcpts += len(g.Rcpts)
		}
		s.Gate.Admit(m.Inum, rcpts)
		n++
	}
	if len(s.Waiting) == 0 {
		s.Waiting = nil
	}
	return n > 0
}

func (s *Sim) arrival(m *Msg) core.Arrival {
	a := core.Arrival{Inum: m.Inum, Path: m.Path, ID: m.Path, Arrival: m.Arrival}
	idx := map[[2]string]int{}
	for _, r := range m.Rcpts {
		if r.Status != ' ' {
			continue
		}
		k := [2]string{r.Channel, r.Host}
		i, ok := idx[k]
		if !ok {
			i = len(a.Groups)
			idx[k] = i
			a.Groups = append(a.Groups, core.Group{Channel: r.Channel, Host: r.Host})
		}
		a.Groups[i].Rcpts = append(a.Groups[i].Rcpts, vertex.Rcpt{Offset: r.Offset, User: r.User, Notify: r.Notify})
	}
	return a
}

// Err returns the first invariant or protocol violation seen.
func (s *Sim) Err() error { return s.err }

func (s *Sim) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

type event struct {
	agent int
	line  string
	exit  bool
}

func (s *Sim) post(at time.Time, agent int, line string, exit bool) {
	s.events.Post(at, &event{agent: agent, line: line, exit: exit})
}

// apply admits what the gate lets in and carries out the core's actions,
// until neither is left.
func (s *Sim) apply() {
	s.admit()
	for {
		s.applyReady()
		if !s.admit() {
			break
		}
	}
	if s.Check {
		if err := s.Core.Check(s.Now); err != nil {
			s.fail(fmt.Errorf("at %s: %w", s.Now.Sub(Epoch), err))
		}
	}
}

// applyReady carries out the core's batches.
func (s *Sim) applyReady() {
	for s.Core.HasReady() {
		r := s.Core.Ready()
		for _, d := range r.Diags {
			if m := s.Msgs[d.Inum]; m != nil {
				m.Diags = append(m.Diags, d)
			}
		}
		if s.OnReady != nil {
			s.OnReady(&r)
		}
		for _, sp := range r.Spawns {
			a := &Agent{ID: sp.Agent, Channel: sp.Channel, Host: sp.Host}
			s.Agents[a.ID] = a
			s.PeakAgents = max(s.PeakAgents, len(s.Agents))
			if s.Manual {
				a.lines = append(a.lines, false)
			} else {
				s.post(s.Now, a.ID, "#hungry", false)
			}
		}
		for _, w := range r.Writes {
			s.write(s.Agents[w.Agent], w.Line)
		}
		for _, st := range r.Stops {
			a := s.Agents[st.Agent]
			if a != nil && !a.dead {
				a.dead = true
				s.post(s.Now, a.ID, "", true)
			}
		}
		s.Diags += len(r.Diags)
		s.Outcomes = append(s.Outcomes, r.Outcomes...)
		for _, o := range r.Outcomes {
			if o.Final() {
				s.Gate.Settled(o.Inum)
			}
			// Expiry ends a recipient without its status byte: the file
			// is removed with the message.
			if m := s.Msgs[o.Inum]; m != nil && o.Status == "expired" {
				for _, rc := range m.Rcpts {
					if rc.Offset == o.Offset && (rc.Status == ' ' || rc.Status == '~') {
						rc.Status = '-'
					}
				}
			}
		}
		for _, c := range r.Completes {
			s.Gate.Left(c.Inum)
			if s.Completed[c.Inum] {
				s.fail(fmt.Errorf("message %d completed twice", c.Inum))
			}
			s.Completed[c.Inum] = true
			if m := s.Msgs[c.Inum]; m != nil && !c.Killed {
				for _, rc := range m.Rcpts {
					if rc.Status == ' ' || rc.Status == '~' {
						s.fail(fmt.Errorf("message %d completed with %s still pending", c.Inum, rc.User))
					}
				}
			}
		}
		for _, rr := range r.Rereads {
			m := s.Msgs[rr.Inum]
			if m == nil {
				s.Core.Reread(s.Now, rr.Inum, nil)
				continue
			}
			for _, rc := range m.Rcpts {
				if rc.Status == '~' {
					rc.Status = ' ' // the locking agent is dead: a stale lock
				}
			}
			a := s.arrival(m)
			s.Core.Reread(s.Now, rr.Inum, &a)
		}
		s.Core.Advance()
	}
}

// write delivers one line to a simulated agent, which answers after its
// service time. Agents serve their lines one after another.
func (s *Sim) write(a *Agent, line string) {
	if a == nil || a.dead || a.hung {
		return
	}
	start := s.Now
	if a.busyAt.After(start) {
		start = a.busyAt
	}
	if line == "#idle" {
		a.busyAt = start
		if s.Manual {
			a.lines = append(a.lines, false)
		} else {
			s.post(start, a.ID, "#hungry", false)
		}
		return
	}
	path, host, _ := strings.Cut(line, "\t")
	if host == "" {
		host = a.Host
	}
	a.Jobs = append(a.Jobs, line)
	s.JobLog = append(s.JobLog, JobLine{At: s.Now, Agent: a.ID, Path: path, Host: host})
	inum, _ := strconv.ParseInt(path, 10, 64)
	m := s.Msgs[inum]
	j := Job{Agent: a, Msg: m, Host: host}
	if m != nil {
		for _, r := range m.Rcpts {
			if r.Status == ' ' && r.Channel == a.Channel && r.Host == host {
				r.Status = '~'
				j.Rcpts = append(j.Rcpts, r)
			}
		}
	}
	if s.Manual {
		a.Pending = append(a.Pending, &j)
		a.lines = append(a.lines, true)
		return
	}
	if len(j.Rcpts) == 0 {
		s.post(start, a.ID, "#resync "+path, false)
		s.post(start, a.ID, "#hungry", false)
		a.busyAt = start
		return
	}
	resp := s.Behavior(j)
	done := start.Add(resp.Delay)
	a.busyAt = done
	for _, l := range resp.Say {
		s.post(done, a.ID, l, false)
	}
	if resp.Resync {
		for _, r := range j.Rcpts {
			r.Status = ' ' // it never locked them
		}
		s.post(done, a.ID, "#resync "+path, false)
		s.post(done, a.ID, "#hungry", false)
		return
	}
	s.Busy[host]++
	s.PeakBusy[host] = max(s.PeakBusy[host], s.Busy[host])
	for _, l := range mark(j, resp) {
		s.post(done, a.ID, l, false)
	}
	s.post(done, a.ID, "\x00done "+host, false)
	switch {
	case resp.Hang:
		a.hung = true
	case resp.Crash:
		a.dead = true
		s.post(done, a.ID, "", true)
	default:
		unlock(j)
		s.post(done, a.ID, "#hungry", false)
	}
}

// mark marks the recipients of j as resp says, as an agent marks the
// control file, and returns the report lines it writes.
func mark(j Job, resp Response) []string {
	var lines []string
	for i, r := range j.Rcpts {
		if i >= len(resp.Status) {
			break
		}
		l := report.Line{Inum: j.Msg.Inum, Offset: r.Offset, Status: resp.Status[i], Retry: resp.Retry, Text: resp.Text}
		if !resp.Notary.IsZero() {
			l.Notary = resp.Notary
			l.Notary.Recipient = r.User
		}
		if l.Status == report.RetryAt && l.Retry == "" {
			l.Retry = "+60"
		}
		switch l.Status.Class() {
		case report.Delivered:
			r.Status = '+'
		case report.Permanent:
			r.Status = '-'
		default:
			r.Status = ' '
		}
		lines = append(lines, l.String())
	}
	return lines
}

// unlock unlocks the recipients of j left unreported, as libta does.
func unlock(j Job) {
	for _, r := range j.Rcpts {
		if r.Status == '~' {
			r.Status = ' '
		}
	}
}

// Line has agent id write line now (a manual agent: Manual).
func (s *Sim) Line(id int, line string) error {
	if a := s.Agents[id]; a == nil || a.dead {
		return fmt.Errorf("sim: agent %d is not running", id)
	}
	s.Core.AgentLine(s.Now, id, line)
	s.apply()
	return nil
}

// Hungry has agent id say #hungry now. A manual agent that was working on
// a job has finished it: the recipients it did not report are unlocked, as
// libta does.
func (s *Sim) Hungry(id int) error {
	if a := s.Agents[id]; a != nil && len(a.lines) > 0 {
		if a.lines[0] && len(a.Pending) > 0 {
			unlock(*a.Pending[0])
			a.Pending = a.Pending[1:]
		}
		a.lines = a.lines[1:]
	}
	return s.Line(id, "#hungry")
}

// Report has manual agent id report on the next recipients of the oldest
// job it holds, one per status in resp.Status, or say #resync when the job
// matched no recipient. The job lasts until the agent says #hungry. It
// returns an error when the agent holds no job.
func (s *Sim) Report(id int, resp Response) error {
	a := s.Agents[id]
	if a == nil || len(a.Pending) == 0 {
		return fmt.Errorf("sim: agent %d holds no job", id)
	}
	j := a.Pending[0]
	if len(j.Rcpts) == 0 {
		path := ""
		if j.Msg != nil {
			path = j.Msg.Path
		}
		return s.Line(id, "#resync "+path)
	}
	rest := *j
	rest.Rcpts = j.Rcpts[min(j.Reported, len(j.Rcpts)):]
	j.Reported += min(len(resp.Status), len(rest.Rcpts))
	for _, l := range mark(rest, resp) {
		if err := s.Line(id, l); err != nil {
			return err
		}
	}
	return nil
}

// Exit has agent id's process exit now, holding what it holds: its locks
// stay until the core's re-read resets them.
func (s *Sim) Exit(id int) error {
	a := s.Agents[id]
	if a == nil {
		return fmt.Errorf("sim: agent %d is not running", id)
	}
	a.dead = true
	delete(s.Agents, id)
	s.Core.AgentExited(s.Now, id, "simulated exit")
	s.apply()
	return nil
}

// Step handles the next event or timer; it returns false when nothing is
// left to happen.
func (s *Sim) Step() bool {
	wake := s.Core.NextWakeup()
	if gw := s.gateWake(); !gw.IsZero() && (wake.IsZero() || gw.Before(wake)) {
		if at, ok := s.events.Next(); !ok || gw.Before(at) {
			if gw.After(s.Now) {
				s.Now = gw
			}
			s.apply() // the gate reconciles its count and admits
			return true
		}
	}
	if at, ok := s.events.Next(); ok {
		if wake.IsZero() || !wake.Before(at) {
			at, e := s.events.Pop()
			if at.After(s.Now) {
				s.Now = at
			}
			s.deliver(e)
			return true
		}
	}
	if wake.IsZero() {
		return false
	}
	if wake.After(s.Now) {
		s.Now = wake
	}
	s.Core.Tick(s.Now)
	s.apply()
	return true
}

// gateWake is when the gate should look again at messages it holds back:
// its next reconciliation, while it counts messages the core no longer
// holds (they left without a completion: reconciling frees their room);
// zero otherwise.
func (s *Sim) gateWake() time.Time {
	if len(s.Waiting) == 0 || s.Gate.Messages() <= s.Core.Messages() {
		return time.Time{}
	}
	return s.Gate.Wake()
}

func (s *Sim) deliver(e *event) {
	a := s.Agents[e.agent]
	switch {
	case e.exit:
		// Locks of a dead agent stay until the core's re-read resets them.
		delete(s.Agents, e.agent)
		s.Core.AgentExited(s.Now, e.agent, "simulated exit")
	case strings.HasPrefix(e.line, "\x00done "):
		s.Busy[strings.TrimPrefix(e.line, "\x00done ")]--
		return
	case a == nil:
		return
	default:
		s.Core.AgentLine(s.Now, e.agent, e.line)
	}
	s.apply()
}

// Advance handles every event and timer due up to Epoch+to, then sets the
// clock there: unlike Step it never runs past the given time, and it keeps
// going while the queue is empty (idle agents still age).
func (s *Sim) Advance(to time.Duration) {
	end := Epoch.Add(to)
	for s.err == nil {
		next := s.Core.NextWakeup()
		if at, ok := s.events.Next(); ok && (next.IsZero() || at.Before(next)) {
			next = at
		}
		if gw := s.gateWake(); !gw.IsZero() && (next.IsZero() || gw.Before(next)) {
			next = gw
		}
		if next.IsZero() || next.After(end) {
			break
		}
		s.Step()
	}
	if s.Now.Before(end) {
		s.Now = end
	}
}

// Run steps until nothing is left to happen, the queue is empty and idle,
// or until is reached.
func (s *Sim) Run(until time.Duration) {
	end := Epoch.Add(until)
	for s.err == nil && s.Now.Before(end) {
		if s.Core.Messages() == 0 && s.events.Len() == 0 && len(s.Waiting) == 0 {
			return
		}
		if !s.Step() {
			return
		}
	}
}

// Pending returns the recipients not yet delivered or failed.
func (s *Sim) Pending() []string {
	var p []string
	for _, m := range s.Msgs {
		for _, r := range m.Rcpts {
			if r.Status == ' ' || r.Status == '~' {
				p = append(p, m.Path+":"+r.User)
			}
		}
	}
	sort.Strings(p)
	return p
}

// Final returns, per "inum/offset", the number of final outcomes logged.
func (s *Sim) Final() map[string]int {
	f := make(map[string]int)
	for _, o := range s.Outcomes {
		if o.Final() {
			f[strconv.FormatInt(o.Inum, 10)+"/"+strconv.FormatInt(o.Offset, 10)]++
		}
	}
	return f
}

// Do calls f with the simulated time, then carries out the core's actions
// (for operator commands, which are core calls outside any agent event).
func (s *Sim) Do(f func(now time.Time)) {
	f(s.Now)
	s.apply()
}

// Restart simulates a scheduler restart: the old core, its agents and their
// pending events vanish; locks are reset as a scan resets stale ones; a new
// core (cfg, seed) reads every message with pending recipients again, with
// its original arrival time, in arrival order, through a new gate. A
// message whose d lines include a delay warning arrives as warned, as the
// daemon reads it.
//
// The new core starts with the startup read (admission.Startup): its rings
// are capped at startup_maxring while the queue is read. The simulated
// disk reads in no time, so the read ends once the first batch is carried
// out ("queue read"), or when the gate first fills ("core full").
func (s *Sim) Restart(cfg *config.Config, seed int64) { s.RestartFrom(cfg, seed, nil) }

// RestartFrom is Restart with the destination state the old core had
// learned (Destinations) given to the new one before it reads the queue,
// as the daemon does with its state file.
func (s *Sim) RestartFrom(cfg *config.Config, seed int64, learned []core.Destination) {
	s.Core = core.New(cfg, s.log, rand.New(rand.NewSource(seed)))
	s.Gate = admission.NewGate(limits(cfg))
	s.Startup = admission.NewStartup(cfg.Scheduler.StartupMaxRing)
	s.Startup.Begin(s.Now)
	s.Core.SetRingCap(s.Now, s.Startup.RingCap())
	if len(learned) > 0 {
		s.Core.Learn(s.Now, learned)
	}
	s.events.Clear()
	s.Agents = make(map[int]*Agent)
	clear(s.Busy)
	inums := make([]int64, 0, len(s.Msgs))
	for inum := range s.Msgs {
		if !s.Completed[inum] {
			inums = append(inums, inum)
		}
	}
	sort.Slice(inums, func(i, j int) bool { return inums[i] < inums[j] })
	s.Waiting = s.Waiting[:0]
	for _, inum := range inums {
		m := s.Msgs[inum]
		for _, rc := range m.Rcpts {
			if rc.Status == '~' {
				rc.Status = ' '
			}
		}
		s.Waiting = append(s.Waiting, m)
	}
	s.apply()
	s.startupCheck()
}

// startupCheck ends the startup read when the admission says so, and
// opens the rings.
func (s *Sim) startupCheck() {
	why := s.Startup.Check(s.Now, len(s.Waiting) == 0, s.Gate.Full(s.Core))
	if why == "" {
		return
	}
	s.StartupEnd = why
	s.Core.SetRingCap(s.Now, s.Startup.RingCap())
	s.apply()
}

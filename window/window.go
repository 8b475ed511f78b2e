package window

import (
	"strconv"
	"time"

	"zsched/config"
	"zsched/thread"
)

// Dest names a destination as the cluster shares it: channel and host, the
// thread's key without its clause (two nodes may order their clauses
// differently; the provider behind a host is the same).
type Dest struct {
	Channel string
	Host    string
}

func (d Dest) String() string { return d.Channel + "/" + d.Host }

// Lease names one session's hold on a destination, unique within a book.
// 0 is no lease.
type Lease uint64

func (l Lease) String() string { return strconv.FormatUint(uint64(l), 10) }

// Params are a clause's window settings: what thread.NewWindow takes from
// the clause. They travel with every request, so the shared state always
// computes with the asking node's configuration (a reload applies at the
// next request; nodes are expected to agree).
type Params struct {
	Max         int // maxthr
	Initial     int // initial_concurrency
	Positive    config.Feedback
	Negative    config.Feedback
	CohortLimit int // failed_cohort_limit; 0 = never dead
	Learn       bool
	ProbeFactor int
	TTL         time.Duration // ceiling_ttl; 0 = never forgotten
	SlowStart   bool          // slow_start
}

// ParamsOf returns the window settings of a clause.
func ParamsOf(c *config.Clause) Params {
	w := thread.NewWindow(c)
	return Params{Max: w.Max, Initial: w.Initial, Positive: w.Positive, Negative: w.Negative,
		CohortLimit: w.CohortLimit, Learn: w.Learn, ProbeFactor: w.ProbeFactor, TTL: w.TTL, SlowStart: w.SlowStart}
}

// Normal applies thread.NewWindow's lower bounds: what every book
// computes with.
func (p Params) Normal() Params {
	p.Max, p.Initial, p.ProbeFactor = max(p.Max, 1), max(p.Initial, 1), max(p.ProbeFactor, 1)
	return p
}

// New returns a fresh window with p: a destination's first state.
func (p Params) New() thread.Window {
	p = p.Normal()
	w := thread.Window{}
	p.Apply(&w)
	w.Start()
	return w
}

// Apply gives w the settings p and clamps what it learned to them, as
// thread.Window.Restore clamps a saved state to the configuration: the
// window never above maxthr, a ceiling only while the clause learns one.
// The Redis script's apply does exactly this.
func (p Params) Apply(w *thread.Window) {
	p = p.Normal()
	w.Max, w.Initial, w.Positive, w.Negative = p.Max, p.Initial, p.Positive, p.Negative
	w.CohortLimit, w.Learn, w.ProbeFactor, w.TTL = p.CohortLimit, p.Learn, p.ProbeFactor, p.TTL
	w.SlowStart = p.SlowStart
	w.Concurrency = min(w.Concurrency, w.Max)
	w.Starting = w.Starting && w.SlowStart
	if !w.Learn {
		w.Ceiling, w.Strikes, w.Calm, w.Clean, w.CeilingAt = 0, 0, 0, 0, time.Time{}
	}
	w.Ceiling = min(w.Ceiling, w.Max)
}

// Op is what a request asks.
type Op uint8

const (
	// Acquire asks for one session on Dest: answered Granted (with a
	// lease) or Denied.
	Acquire Op = iota + 1
	// Release ends the session of Lease. Its answer, if any, is Free
	// events for whoever was denied.
	Release
	// Report judges one delivery on Dest (DESIGN §6: a job line, judged
	// when its last recipient is reported): answered Changed.
	Report
)

func (o Op) String() string {
	switch o {
	case Acquire:
		return "acquire"
	case Release:
		return "release"
	case Report:
		return "report"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// Request is one question from a node's core to its book.
type Request struct {
	Op     Op
	Dest   Dest
	Params Params // Acquire, Report: the destination's clause settings
	Lease  Lease  // Release
	// Report: Failed is true when the delivery ended in a site failure
	// (deferall, retryat), the input of thread.Window.Failed; false is
	// Succeeded's.
	Failed bool
	// Report with Failed: how long the destination stays dead if this
	// failure declares it so (the agent's retryat, else the clause's
	// retry schedule at now). Ignored otherwise.
	DeadUntil time.Time
}

// Kind is what an event says.
type Kind uint8

const (
	// Granted answers Acquire: a session may start; Release Lease when
	// it ends.
	Granted Kind = iota + 1
	// Denied answers Acquire: no session now (Reason). Ask again after a
	// Free event for Dest, or at Retry at the latest.
	Denied
	// Changed answers Report: the window after the judgement. It comes
	// for every report, changed or not (the feedback trace).
	Changed
	// Free says the answer to a Denied on Dest may have changed: a lease
	// was released or expired, the window grew or revived, or the
	// destination died (asking again learns until when). Ask again if
	// still wanted; another node may have taken the session first.
	Free
)

func (k Kind) String() string {
	switch k {
	case Granted:
		return "granted"
	case Denied:
		return "denied"
	case Changed:
		return "changed"
	case Free:
		return "free"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Reason says why an Acquire was denied.
type Reason uint8

const (
	// Full: the live sessions fill the window.
	Full Reason = iota + 1
	// Dead: the destination is dead until State.DeadUntil.
	Dead
)

func (r Reason) String() string {
	switch r {
	case Full:
		return "window full"
	case Dead:
		return "dead destination"
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Event is one answer from a book to its node's core.
type Event struct {
	Kind   Kind
	Dest   Dest
	Lease  Lease     // Granted
	Reason Reason    // Denied
	Retry  time.Time // Denied: ask again by then; zero = only after Free
	// Revived (Granted, Changed): a dead destination came back with this
	// request: its dead-until time had passed (Granted), or a delivery
	// still in flight succeeded (Changed).
	Revived bool
	From    int  // Changed: the window before the report
	Failed  bool // Changed: the report was a site failure
	Died    bool // Changed: it declared the destination dead
	State   State
}

// State is a destination's window as a book saw it when it answered.
type State struct {
	// Window is the learned state (Concurrency 0 = dead), shared across
	// the cluster unless Fallback.
	Window    thread.WindowState
	DeadUntil time.Time // while dead: no session before it
	Ceiling   int       // the learned ceiling in force (0 = none)
	Confirmed bool      // the ceiling is confirmed
	Leases    int       // live sessions on the destination, every node's
	Mine      int       // of them, this node's
	Nodes     int       // live nodes sharing the store (1 for a local book)
	// ByNode is Leases node by node, in the order of their names, for
	// operators (mailq, WHY); nil when only this node counts (a local
	// book, a fallback window).
	ByNode []NodeLeases
	// Fallback: the shared store was unreachable and the node's own
	// window answered (capped at its share of the last shared window).
	Fallback bool
}

// NodeLeases is one node's live sessions on a destination.
type NodeLeases struct {
	Node   string
	Leases int
}

// Limit is the window: how many sessions may run at once, 0 while dead.
func (s State) Limit() int { return s.Window.Concurrency }

// Dead reports whether the destination is dead.
func (s State) Dead() bool { return s.Window.Concurrency == 0 }

// Book is where a node's destination windows live: in the core's own
// memory (Local), in memory shared by simulated nodes (Board), or in Redis
// (package cluster). Do hands it requests made at now and returns the
// events that are answered at once, in order; an asynchronous book
// returns nil and delivers its answers later by its own means (the core
// takes them as events all the same). A book never blocks the caller.
type Book interface {
	Do(now time.Time, reqs []Request) []Event
}

// Outbox is the book a pure core holds when the real one is asynchronous:
// Do records the requests and answers nothing; the caller takes them
// (with the core's other actions) and hands them to the real book, whose
// events come back to the core later.
type Outbox struct {
	reqs []Request
}

// Do records reqs.
func (o *Outbox) Do(_ time.Time, reqs []Request) []Event {
	o.reqs = append(o.reqs, reqs...)
	return nil
}

// Take returns the requests recorded since the last Take, oldest first.
func (o *Outbox) Take() []Request {
	r := o.reqs
	o.reqs = nil
	return r
}

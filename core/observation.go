package core

import "time"

// Observation is something the core saw or decided that is no effect to
// carry out: a delivery's feedback to its destination's window, a
// destination dead or revived, a learned ceiling, a reload's changes, a
// transport working again, an ETRN. Ready hands them out in the order they
// happened; the daemon logs each (the lines it wrote before), metrics
// count them, and the lab and tests measure them. They are data: nothing
// needs to read the core's log, which is for diagnostics only.
type Observation struct {
	Kind    Observed
	Channel string
	Host    string

	// Feedback: the judgement of one delivery and the window it left.
	Feedback Feedback

	// Dead: no agent before Until; SiteFailures in a row, the last one's
	// text.
	Until        time.Time
	SiteFailures int
	Text         string

	// Revived, RetryDue: the window the destination starts again with.
	// CeilingLearned, CeilingConfirmed, CeilingForgotten: the window, and
	// Ceiling is the ceiling learned, confirmed or forgotten.
	Window  int
	Ceiling int

	// TransportWorks: the clause's select, the agent whose job went
	// through, the failures since the ring last worked.
	Clause   string
	Agent    int
	Failures int

	// Reloaded: what the reload changed (one per reload, so a pointer).
	Reload *Reload

	// ETRN: the name asked for (in Host), the threads it matched and how
	// many of them have work going.
	Threads int
	Started int
}

// Observed is the kind of an Observation.
type Observed uint8

const (
	ObservedFeedback         Observed = iota + 1 // a delivery judged: Feedback
	ObservedDead                                 // a destination declared dead
	ObservedRevived                              // a dead destination revived by a delivery in flight
	ObservedRetryDue                             // a dead destination's retry time has come
	ObservedCeilingLearned                       // learned_ceiling: a ceiling learned or moved
	ObservedCeilingConfirmed                     // a ceiling confirmed by refusals just above it
	ObservedCeilingForgotten                     // a ceiling dropped (the window took more, or its TTL)
	ObservedTransportWorks                       // a throttled transport completed a job
	ObservedReloaded                             // a reload took effect: Reload
	ObservedETRN                                 // an ETRN was run
)

var observedNames = [...]string{"", "feedback", "dead", "revived", "retry_due", "ceiling_learned",
	"ceiling_confirmed", "ceiling_forgotten", "transport_works", "reloaded", "etrn"}

// String is the kind's name, as metrics label it.
func (o Observed) String() string {
	if int(o) < len(observedNames) {
		return observedNames[o]
	}
	return "unknown"
}

// ObservedKinds lists every kind, in order (metrics declare a counter each).
func ObservedKinds() []Observed {
	ks := make([]Observed, 0, len(observedNames)-1)
	for k := ObservedFeedback; k <= ObservedETRN; k++ {
		ks = append(ks, k)
	}
	return ks
}

// Feedback is Postfix's destination_concurrency_feedback_debug record: one
// delivery judged, negative when a report was a site failure, the window
// before (From) and after, and the window's learned state after.
type Feedback struct {
	Negative         bool
	From             int
	Window           int
	Busy             int
	Success          float64
	Failure          float64
	FailCohorts      float64
	Ceiling          int
	CeilingConfirmed bool
}

// Reload is what a reload changed, and what it did to the core's state.
type Reload struct {
	File           string
	Clauses        int
	Threads        int
	ThreadsMoved   int // to another ring
	WindowsClamped int
	AgentsRetired  int
	RcptsRouted    int // recipients that had no clause and have one now
	Unrouted       int // vertices still without a clause
	Changes        []Change
}

// Change is one difference between the old configuration and the new.
type Change struct {
	What   string // "scheduler setting changed", "clause added", "clause changed", "clause removed"
	Select string // the clause's select pattern; "" for a scheduler setting
	Index  int    // the added clause's index
	Line   int    // the added clause's line in the file
	Key    string // the setting that changed
	From   string
	To     string
}

// observe appends o to the batch being built.
func (s *Core) observe(o Observation) {
	s.ready.Observations = append(s.ready.Observations, o)
}

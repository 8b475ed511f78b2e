package thread

import "zsched/config"

// roundoff absorbs float rounding in the feedback sums, so that six
// feedbacks of 1/6 make one step as the README means them to, not
// 0.9999999999999999 of one. qmgr_queue.c compares the raw doubles and so
// now and then takes one delivery more per step.
const roundoff = 1e-9

// Window is a destination's concurrency window under Postfix 2.5 feedback:
// SCHEDULER_README's "Pseudocode for the Postfix 2.5 concurrency scheduler"
// as qmgr_queue.c carries it out. Concurrency 0 means the destination is
// dead.
//
// Where the README's pseudocode and qmgr_queue.c differ, Window follows the
// code, which is what the README's measurements ran:
//   - a destination is dead once fail_cohorts reaches the cohort limit
//     (>=, as the README's prose says "after N pseudo-cohorts"), not only
//     when it exceeds it; a limit of 0 turns dead-destination detection off;
//   - positive feedback is skipped entirely at the concurrency limit, so it
//     neither accumulates nor resets the negative cycle there;
//   - a dead destination revives at its retry time (Revive) or with the
//     first success of a delivery still in flight, to the busy count if any
//     else the initial concurrency ("best concurrency is anyone's guess"):
//     not to a single probe.
//
// The core uses only the methods, never the fields, so that a shared
// implementation can take Window's place (DESIGN §13); the fields are
// exported for the state file and for tests.
type Window struct {
	Concurrency int     // agents allowed at once; 0 = dead
	Success     float64 // positive feedback not yet turned into concurrency
	Failure     float64 // the negative cycle: a failure below 0 costs one
	FailCohorts float64 // pseudo-cohorts failed since the last success

	Max         int // maxthr: the destination concurrency limit
	Initial     int // initial_concurrency
	Positive    config.Feedback
	Negative    config.Feedback
	CohortLimit int // failed_cohort_limit; 0 = never dead
}

// NewWindow returns a window at the clause's initial concurrency.
func NewWindow(c *config.Clause) Window {
	w := Window{
		Max:         max(c.MaxThr, 1),
		Initial:     max(c.InitialConcurrency, 1),
		Positive:    c.PositiveFeedback,
		Negative:    c.NegativeFeedback,
		CohortLimit: c.FailedCohortLimit,
	}
	w.Concurrency = min(w.Initial, w.Max)
	return w
}

// Limit is how many agents may work the destination at once: 0 while it
// is dead.
func (w *Window) Limit() int { return w.Concurrency }

// Dead reports whether pseudo-cohort failures declared the destination dead.
func (w *Window) Dead() bool { return w.Concurrency == 0 }

// Succeeded applies positive feedback for one delivery without a site
// failure. busy is the number of agents on the destination, this delivery's
// included. A dead destination revives. Otherwise the safety rule withholds
// feedback unless concurrency < busy + initial: a window far above what is
// in use would delay the effect of negative feedback.
func (w *Window) Succeeded(busy int) {
	w.FailCohorts = 0
	if w.Concurrency == 0 {
		w.Revive(busy)
		return
	}
	if w.Concurrency >= w.Max || w.Concurrency >= busy+w.Initial {
		return
	}
	w.Success += w.Positive.Of(float64(w.Concurrency))
	// Hysteresis: concurrency grows at the end of 1/g steps. The loop
	// allows for feedback above 1 and for rounding.
	for w.Success >= 1-roundoff {
		w.Concurrency++
		w.Failure = 0
		w.Success--
	}
	w.Success = max(w.Success, 0)
	w.Concurrency = min(w.Concurrency, w.Max)
}

// Failed applies negative feedback for one delivery that ended in a site
// failure. It reports whether this failure declared the destination dead.
func (w *Window) Failed() (died bool) {
	if w.Concurrency == 0 {
		return false
	}
	w.FailCohorts += 1 / float64(w.Concurrency)
	if w.CohortLimit > 0 && w.FailCohorts >= float64(w.CohortLimit)-roundoff {
		w.Concurrency = 0
		return true
	}
	// Reverse hysteresis: concurrency shrinks at the start of 1/f steps,
	// so overload is corrected at once; the cycle goes on at 1 so that
	// negative feedback still cancels positive feedback there.
	w.Failure -= w.Negative.Of(float64(w.Concurrency))
	for w.Failure < -roundoff {
		w.Concurrency--
		w.Failure++
		w.Success = 0
	}
	w.Failure = max(w.Failure, 0)
	w.Concurrency = max(w.Concurrency, 1)
	return false
}

// Revive brings a dead destination back: to busy agents when some are still
// at work, else to the initial concurrency, with fresh feedback cycles. It
// does nothing to a live one.
func (w *Window) Revive(busy int) {
	if w.Concurrency != 0 {
		return
	}
	w.Concurrency = min(w.Initial, w.Max)
	if busy > 0 {
		w.Concurrency = min(busy, w.Max)
	}
	w.Success, w.Failure, w.FailCohorts = 0, 0, 0
}

// Fresh reports whether the window holds nothing learned: it is where a
// new destination starts.
func (w *Window) Fresh() bool {
	return w.Concurrency == min(w.Initial, w.Max) && w.Success == 0 && w.Failure == 0 && w.FailCohorts == 0
}

// WindowState is the learned part of a Window: what a restart should not
// have to learn again.
type WindowState struct {
	Concurrency int
	Success     float64
	Failure     float64
	FailCohorts float64
}

// State returns the learned part of w.
func (w *Window) State() WindowState {
	return WindowState{Concurrency: w.Concurrency, Success: w.Success, Failure: w.Failure, FailCohorts: w.FailCohorts}
}

// Restore sets the learned part of w from s, clamped to w's current limit
// (the configuration may have changed since s was learned). Values a window
// cannot reach are ignored.
func (w *Window) Restore(s WindowState) {
	if s.Concurrency < 0 || s.Success < 0 || s.Success >= 1 || s.Failure < 0 || s.Failure > 1 || s.FailCohorts < 0 {
		return
	}
	w.Concurrency = min(s.Concurrency, w.Max)
	w.Success, w.Failure, w.FailCohorts = s.Success, s.Failure, s.FailCohorts
}

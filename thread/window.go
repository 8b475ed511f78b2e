package thread

import "zsched/config"

// Window is a destination's concurrency window with Postfix 2.5 feedback
// (postfix SCHEDULER_README, "Pseudocode for the Postfix 2.5 concurrency
// scheduler"). Concurrency 0 means the destination is dead.
type Window struct {
	Concurrency int
	Success     float64
	Failure     float64
	FailCohorts float64

	Max         int // maxthr: the destination concurrency limit
	Initial     int
	Positive    config.Feedback
	Negative    config.Feedback
	CohortLimit int
}

// NewWindow returns a window at its initial concurrency.
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

// Dead reports whether pseudo-cohort failures declared the destination dead.
func (w *Window) Dead() bool { return w.Concurrency == 0 }

// Limit is how many agents may work the destination. A dead destination
// whose back-off has passed gets one probe.
func (w *Window) Limit(backingOff bool) int {
	if w.Concurrency == 0 {
		if backingOff {
			return 0
		}
		return 1
	}
	return w.Concurrency
}

// Succeeded applies positive feedback for one delivery without site
// failure. busy is the number of agents on the destination: the safety rule
// withholds positive feedback unless concurrency < busy + initial. It
// reports whether the concurrency changed.
func (w *Window) Succeeded(busy int) bool {
	old := w.Concurrency
	w.FailCohorts = 0
	if w.Concurrency == 0 {
		// The first success after a dead destination's retry time revives it.
		w.Concurrency = min(w.Initial, w.Max)
		w.Success, w.Failure = 0, 0
		return true
	}
	if w.Concurrency >= busy+w.Initial {
		return false
	}
	w.Success += w.Positive.Of(float64(w.Concurrency))
	for w.Success >= 1 {
		w.Concurrency++
		w.Failure = 0
		w.Success--
	}
	if w.Concurrency > w.Max {
		w.Concurrency = w.Max
	}
	return w.Concurrency != old
}

// Failed applies negative feedback for one delivery that ended in a site
// failure. It reports whether the concurrency changed.
func (w *Window) Failed() bool {
	old := w.Concurrency
	if w.Concurrency > 0 {
		w.FailCohorts += 1 / float64(w.Concurrency)
		if w.FailCohorts > float64(w.CohortLimit) {
			w.Concurrency = 0
		}
	}
	if w.Concurrency > 0 {
		w.Failure -= w.Negative.Of(float64(w.Concurrency))
		for w.Failure < 0 {
			w.Concurrency--
			w.Failure++
			w.Success = 0
		}
		if w.Concurrency < 1 {
			w.Concurrency = 1
		}
	}
	return w.Concurrency != old
}

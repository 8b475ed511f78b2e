package thread

import (
	"time"

	"zsched/config"
)

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
// Beyond Postfix, a window that has had no feedback yet starts slow
// (slow_start, after TCP): it allows one session, and one more each time
// as many deliveries as it allows got through, until it reaches the
// initial concurrency; the first failure ends the slow start where it is
// and Postfix's feedback governs from there. So a destination never
// reached is not sent initial_concurrency sessions before one of them
// got through: against a limit below the initial window, Postfix's burst
// overshoots it before any refusal is judged.
//
// Beyond Postfix, a window learns a ceiling (learned_ceiling): the
// destination's own limit, from its refusals, so that a server with an
// active limiter is not re-tested every pseudo-cohort (Postfix's 1/N defers
// one delivery in N+1 there for as long as the traffic lasts). See
// Succeeded and Failed for the rules. The ceiling only ever slows positive
// feedback; negative feedback, dead-destination detection and the ramp-up
// of a destination that never pushes back are exactly Postfix's.
//
// The core uses only the methods, never the fields, so that a shared
// implementation can take Window's place (DESIGN §13); the fields are
// exported for the state file and for tests.
type Window struct {
	Concurrency int     // agents allowed at once; 0 = dead
	Success     float64 // positive feedback not yet turned into concurrency
	Failure     float64 // the negative cycle: a failure below 0 costs one
	FailCohorts float64 // pseudo-cohorts failed since the last success

	// The learned ceiling: 0 = none. Strikes counts refusals just above
	// it not cancelled by failures at or below it, at most 2; at 2 the
	// ceiling is confirmed and slows growth past it. Calm counts
	// deliveries judged since the last site failure, Clean those of them
	// judged above the ceiling.
	Ceiling   int
	Strikes   int
	Calm      int
	Clean     int
	CeilingAt time.Time // when the ceiling was learned, last confirmed or raised

	// Starting: the window is in its slow start (SlowStart), short of
	// the initial concurrency, with no failure yet; Success counts the
	// deliveries towards its next step.
	Starting bool

	Max         int // maxthr: the destination concurrency limit
	Initial     int // initial_concurrency
	Positive    config.Feedback
	Negative    config.Feedback
	CohortLimit int // failed_cohort_limit; 0 = never dead

	Learn       bool          // learned_ceiling
	ProbeFactor int           // ceiling_probe_factor
	TTL         time.Duration // ceiling_ttl; 0 = never forgotten
	SlowStart   bool          // slow_start

	// Nodes is how many scheduler nodes share the window (DESIGN §13;
	// 0 or 1: this node alone), set by the book before each judgement.
	// Transient: not learned, not in WindowState. See learn.
	Nodes int
}

// confirmedStrikes is how many refusals just above a ceiling confirm it.
// One refusal may be noise or a burst's overshoot; a second at the same
// level, with no failure below it between them, looks like a limit.
const confirmedStrikes = 2

// promptRefusal is how many deliveries above the ceiling may be judged
// before a refusal and it still counts as prompt: those that were in
// flight when the window stepped up end about when the new session is
// refused. It is per node sharing the window: each node's new session
// takes its own round trip to the store and its own agent start, and the
// other nodes' deliveries go on being judged meanwhile.
const promptRefusal = 2

// probeFloor keeps a confirmed ceiling's probes at least ProbeFactor ×
// probeFloor deliveries apart, as they are at a ceiling of 5 under 1/N
// feedback. Each probe costs one refused delivery, so the factor alone
// (one probe in ProbeFactor × ceiling + 1 deliveries) would make a low
// ceiling expensive: 1 in 21 at ceiling 2 with the default 10, against 1
// in 51 (2 %) at 5 and above.
const probeFloor = 5

// NewWindow returns a window at the clause's initial concurrency.
func NewWindow(c *config.Clause) Window {
	w := Window{
		Max:         max(c.MaxThr, 1),
		Initial:     max(c.InitialConcurrency, 1),
		Positive:    c.PositiveFeedback,
		Negative:    c.NegativeFeedback,
		CohortLimit: c.FailedCohortLimit,
		Learn:       c.LearnedCeiling,
		ProbeFactor: max(c.CeilingProbeFactor, 1),
		TTL:         time.Duration(c.CeilingTTL),
		SlowStart:   c.SlowStart,
	}
	w.Start()
	return w
}

// Start puts the window where a new destination starts: at the initial
// concurrency, or at 1 in slow start.
func (w *Window) Start() { w.Concurrency, w.Starting = w.start() }

// start is where Start puts the window: its concurrency, and whether it is
// in slow start.
func (w *Window) start() (concurrency int, starting bool) {
	concurrency = min(w.Initial, w.Max)
	if w.SlowStart && concurrency > 1 {
		return 1, true
	}
	return concurrency, false
}

// Limit is how many agents may work the destination at once: 0 while it
// is dead.
func (w *Window) Limit() int { return w.Concurrency }

// Dead reports whether pseudo-cohort failures declared the destination dead.
func (w *Window) Dead() bool { return w.Concurrency == 0 }

// Succeeded applies positive feedback for one delivery without a site
// failure, judged at now. busy is the number of agents on the destination,
// this delivery's included. A dead destination revives. Otherwise the
// safety rule withholds feedback unless concurrency < busy + initial: a
// window far above what is in use would delay the effect of negative
// feedback.
//
// With a learned ceiling: a whole pseudo-cohort (window-many deliveries)
// judged above the ceiling without a site failure shows the destination
// takes more, and the ceiling rises to the window, unconfirmed. At or
// above a confirmed ceiling positive feedback is divided by the probe
// factor, so the window tests the limit once in factor times as many
// deliveries as Postfix's, and never more often than once in factor ×
// probeFloor.
func (w *Window) Succeeded(busy int, now time.Time) {
	w.FailCohorts = 0
	if w.Concurrency == 0 {
		w.Revive(busy)
		return
	}
	if w.Starting {
		// Slow start: one more session once a window's worth of
		// deliveries got through (Success counts them), up to the
		// initial window, where Postfix's feedback takes over. One per
		// success, TCP's doubling, would overshoot: successes judged at
		// one instant each open a session before any of them is refused.
		w.Success += 1 / float64(w.Concurrency)
		if w.Success >= 1-roundoff {
			w.Concurrency++
			w.Success = 0
		}
		if w.Concurrency >= min(w.Initial, w.Max) {
			w.Concurrency, w.Starting, w.Success = min(w.Initial, w.Max), false, 0
		}
		return
	}
	w.expire(now)
	if w.Ceiling > 0 {
		w.Calm++
	}
	if w.Ceiling > 0 && w.Concurrency > w.Ceiling {
		w.Clean++
		if w.Clean >= w.Concurrency {
			w.Ceiling, w.Strikes, w.Clean, w.CeilingAt = w.Concurrency, 0, 0, now
		}
	}
	if w.Concurrency >= w.Max || w.Concurrency >= busy+w.Initial {
		return
	}
	g := w.Positive.Of(float64(w.Concurrency))
	if w.Confirmed() && w.Concurrency >= w.Ceiling {
		g = min(g/float64(w.ProbeFactor), 1/float64(w.ProbeFactor*probeFloor))
	}
	w.Success += g
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
// failure, judged at now. It reports whether this failure declared the
// destination dead.
//
// In slow start a failure weighs as one delivery of a pseudo-cohort of
// the initial window's size: the window is short of it only by caution,
// and a destination must not be declared dead sooner for it (at a window
// of 1 one failure is a whole cohort: a site refusing one session in
// five would die at its second). A failure with more than one session
// allowed ends the slow start: the window may have found the limit, and
// feedback governs from there. One with a single session allowed says
// nothing of a concurrency limit: the slow start goes on at 1, and as
// many failures in a row declare the destination dead as would at the
// initial window. Neither teaches a ceiling: one failure below the
// initial window cannot tell a limit from noise (a noisy site would get
// a ceiling of 1 or 2 and keep it), and a limit refuses again at the
// first probe past it after the slow start.
//
// With learned_ceiling, the failure at window W first teaches the ceiling
// (before Postfix's feedback lowers the window):
//   - no ceiling, or W above ceiling+1: the limit is W-1, one strike;
//   - W = ceiling+1: a probe refused, as a limit would: one more strike
//     (confirmed at two), and the ceiling's age starts over;
//   - W at or below the ceiling: a limit there does not explain it (noise,
//     as one bad server of K behind one address, or a limit that fell). A
//     confirmed ceiling loses its confirmation; an unconfirmed one moves
//     to W-1. So noise cannot hold a window down for long, and a limit
//     that fell is learned anew at its next two refusals.
func (w *Window) Failed(now time.Time) (died bool) {
	if w.Concurrency == 0 {
		return false
	}
	w.expire(now)
	cohort := w.Concurrency
	if w.Starting {
		cohort = min(w.Initial, w.Max)
		if w.Concurrency == 1 {
			// One session failing says nothing of a concurrency
			// limit: the slow start goes on at 1.
			w.FailCohorts += 1 / float64(cohort)
			if w.CohortLimit > 0 && w.FailCohorts >= float64(w.CohortLimit)-roundoff {
				w.Concurrency, w.Starting, w.Success = 0, false, 0
				return true
			}
			return false
		}
		w.Starting, w.Success = false, 0
	} else if w.Learn {
		w.learn(now)
	}
	w.FailCohorts += 1 / float64(cohort)
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

// learn applies a site failure at the current window to the ceiling.
func (w *Window) learn(now time.Time) {
	at := w.Concurrency
	// A limiter refuses the first session past it at once, and never one
	// at or below it; noise strikes anywhere, at any time. A refusal
	// counts as a strike only when it came promptly after the window
	// stepped past the ceiling, and after a whole pseudo-cohort at or
	// below the ceiling went without a site failure.
	prompt := w.Clean <= promptRefusal*max(w.Nodes, 1)
	settled := w.Calm-w.Clean >= w.Ceiling
	switch {
	case w.Ceiling == 0 || at > w.Ceiling+1:
		w.Ceiling, w.Strikes, w.CeilingAt = max(at-1, 1), 1, now
	case at == w.Ceiling+1 && prompt && settled:
		w.Strikes = min(w.Strikes+1, confirmedStrikes)
		w.CeilingAt = now
	case at == w.Ceiling+1:
		w.Strikes = min(w.Strikes, 1)
	case w.Strikes >= confirmedStrikes:
		w.Strikes--
	default:
		w.Ceiling, w.Strikes, w.CeilingAt = max(at-1, 1), 1, now
	}
	w.Clean, w.Calm = 0, 0
}

// expire forgets a ceiling older than the TTL: a destination's capacity
// changes, and a ceiling nothing confirmed for that long is a guess.
func (w *Window) expire(now time.Time) {
	if w.Ceiling > 0 && w.TTL > 0 && now.Sub(w.CeilingAt) > w.TTL {
		w.Ceiling, w.Strikes, w.Calm, w.Clean, w.CeilingAt = 0, 0, 0, 0, time.Time{}
	}
}

// Confirmed reports whether the window has a confirmed ceiling, one that
// slows growth past it.
func (w *Window) Confirmed() bool { return w.Ceiling > 0 && w.Strikes >= confirmedStrikes }

// LearnedCeiling returns the ceiling in force at now (0 if none) and
// whether it is confirmed.
func (w *Window) LearnedCeiling(now time.Time) (ceiling int, confirmed bool) {
	if w.Ceiling == 0 || w.TTL > 0 && now.Sub(w.CeilingAt) > w.TTL {
		return 0, false
	}
	return w.Ceiling, w.Confirmed()
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
// new destination starts. A window past its slow start is not: the
// destination has been reached, and its next thread need not start slow.
func (w *Window) Fresh() bool {
	c, starting := w.start()
	return w.Concurrency == c && w.Starting == starting && w.Success == 0 && w.Failure == 0 &&
		w.FailCohorts == 0 && w.Ceiling == 0
}

// WindowState is the learned part of a Window: what a restart should not
// have to learn again.
type WindowState struct {
	Concurrency int
	Success     float64
	Failure     float64
	FailCohorts float64
	Ceiling     int // 0 = none
	Strikes     int
	CeilingAt   time.Time
	Starting    bool // in slow start
}

// State returns the learned part of w.
func (w *Window) State() WindowState {
	return WindowState{Concurrency: w.Concurrency, Success: w.Success, Failure: w.Failure, FailCohorts: w.FailCohorts,
		Ceiling: w.Ceiling, Strikes: w.Strikes, CeilingAt: w.CeilingAt, Starting: w.Starting}
}

// Restore sets the learned part of w from s, clamped to w's current limit
// (the configuration may have changed since s was learned). Values a window
// cannot reach are ignored. A ceiling is kept only while the clause learns
// ceilings, and never above maxthr; one past its TTL is dropped at the
// next feedback.
func (w *Window) Restore(s WindowState) {
	if s.Concurrency < 0 || s.Success < 0 || s.Success >= 1 || s.Failure < 0 || s.Failure > 1 || s.FailCohorts < 0 ||
		s.Ceiling < 0 || s.Strikes < 0 || s.Strikes > confirmedStrikes {
		return
	}
	w.Concurrency = min(s.Concurrency, w.Max)
	w.Success, w.Failure, w.FailCohorts = s.Success, s.Failure, s.FailCohorts
	w.Starting = s.Starting && w.SlowStart && w.Concurrency > 0
	w.Ceiling, w.Strikes, w.CeilingAt = 0, 0, time.Time{}
	if w.Learn && s.Ceiling > 0 {
		w.Ceiling, w.Strikes, w.CeilingAt = min(s.Ceiling, w.Max), s.Strikes, s.CeilingAt
	}
}

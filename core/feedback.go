package core

import (
	"time"

	"zsched/thread"
)

// Concurrency feedback (DESIGN §6), per delivery as in Postfix: one job
// line is judged when the agent's #hungry ends it, negative when any of its
// reports was a site failure (deferall, retryat), else positive. A site
// failure alone does not stop the destination: it shrinks the window, and
// the recipients of that job wait for their own retry time (Postfix defers
// the message). Only a destination declared dead by pseudo-cohort failures
// backs off as a whole: BackoffUntil is set, no agent is fed from it, and
// its vertices wait. At that time it revives to its initial concurrency
// (Postfix's unthrottle timer; reviveDue), or sooner with the success of a
// delivery still in flight.

// feedback applies the judgement of one delivery to t's window. retryAt is
// the latest retryat of the job's reports, zero if none: a destination that
// dies waits for it instead of its retry schedule.
func (s *Core) feedback(t *thread.Thread, siteFailed bool, retryAt, now time.Time) {
	before := t.Window.Limit()
	if siteFailed {
		t.SiteFailures++
		if t.Window.Failed(now) {
			until := retryAt
			if !until.After(now) {
				until = s.schedule(s.clause(t.Clause)).Next(now, &t.Retry, s.rng)
			}
			t.BackoffUntil = until
			s.log.Info("destination is dead", "channel", t.Channel, "host", t.Host,
				"until", until, "site_failures", t.SiteFailures, "text", t.LastText)
		}
	} else {
		t.SiteFailures = 0
		t.Window.Succeeded(t.Busy, now)
		if before == 0 {
			// A delivery that was in flight when the destination died got
			// through: it works again, and its retry index starts over.
			t.BackoffUntil = time.Time{}
			t.Retry = 0
			s.log.Info("destination revived by a delivery", "channel", t.Channel, "host", t.Host,
				"window", t.Window.Limit())
		}
	}
	s.logWindow(t, before, siteFailed)
}

// reviveDue gives a dead destination whose retry time has come its window
// back. update calls it first, so no thread sits with due work behind a
// window of 0.
func (s *Core) reviveDue(t *thread.Thread, now time.Time) {
	if !t.Window.Dead() || t.BackingOff(now) {
		return
	}
	t.Window.Revive(t.Busy)
	s.log.Info("dead destination's retry time has come", "channel", t.Channel, "host", t.Host,
		"window", t.Window.Limit())
}

// logWindow is Postfix's destination_concurrency_feedback_debug: every
// feedback event at trace level (what the lab measures), each change of the
// window at debug level.
func (s *Core) logWindow(t *thread.Thread, before int, siteFailed bool) {
	after := t.Window.Limit()
	if after == before && !s.log.IsTrace() {
		return
	}
	st := t.Window.State()
	kv := []any{"channel", t.Channel, "host", t.Host, "negative", siteFailed,
		"from", before, "window", after, "busy", t.Busy,
		"success", st.Success, "failure", st.Failure, "fail_cohorts", st.FailCohorts,
		"ceiling", st.Ceiling, "ceiling_confirmed", t.Window.Confirmed()}
	if after != before {
		s.log.Debug("destination_concurrency_feedback", kv...)
	} else {
		s.log.Trace("destination_concurrency_feedback", kv...)
	}
}

// siteRetry returns the latest retryat time among a job's site-failure
// reports, zero if none asked for one.
func siteRetry(e entry) time.Time {
	var at time.Time
	for _, d := range e.deferred {
		if d.at.After(at) {
			at = d.at
		}
	}
	return at
}

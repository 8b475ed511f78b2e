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
	if s.book != nil {
		s.reportBook(t, siteFailed, retryAt, now) // book.go
		return
	}
	before := t.Window.Limit()
	ceiling, confirmed := t.Window.Ceiling, t.Window.Confirmed()
	if siteFailed {
		t.SiteFailures++
		if t.Window.Failed(now) {
			until := retryAt
			if !until.After(now) {
				until = s.schedule(s.clause(t.Clause)).Next(now, &t.Retry, s.rng)
			}
			t.BackoffUntil = until
			s.observe(Observation{Kind: ObservedDead, Channel: t.Channel, Host: t.Host,
				Until: until, SiteFailures: t.SiteFailures, Text: t.LastText})
		}
	} else {
		t.SiteFailures = 0
		t.Window.Succeeded(t.Busy, now)
		if before == 0 {
			// A delivery that was in flight when the destination died got
			// through: it works again, and its retry index starts over.
			t.BackoffUntil = time.Time{}
			t.Retry = 0
			s.observe(Observation{Kind: ObservedRevived, Channel: t.Channel, Host: t.Host, Window: t.Window.Limit()})
		}
	}
	s.observeWindow(t, before, siteFailed, ceiling, confirmed)
}

// reviveDue gives a dead destination whose retry time has come its window
// back. update calls it first, so no thread sits with due work behind a
// window of 0.
func (s *Core) reviveDue(t *thread.Thread, now time.Time) {
	if !t.Window.Dead() || t.BackingOff(now) {
		return
	}
	t.Window.Revive(t.Busy)
	if s.book != nil {
		// Only the mirror: the book revives it at the next Acquire, or
		// says until when it stays dead (book.go).
		return
	}
	s.observe(Observation{Kind: ObservedRetryDue, Channel: t.Channel, Host: t.Host, Window: t.Window.Limit()})
}

// observeWindow records the feedback event (Postfix's
// destination_concurrency_feedback_debug: what the lab measures), then any
// change of the learned ceiling it made, given the ceiling and its
// confirmation before.
func (s *Core) observeWindow(t *thread.Thread, before int, siteFailed bool, ceiling int, confirmed bool) {
	st := t.Window.State()
	s.observe(Observation{Kind: ObservedFeedback, Channel: t.Channel, Host: t.Host, Feedback: Feedback{
		Negative: siteFailed, From: before, Window: t.Window.Limit(), Busy: t.Busy,
		Success: st.Success, Failure: st.Failure, FailCohorts: st.FailCohorts,
		Ceiling: st.Ceiling, CeilingConfirmed: t.Window.Confirmed()}})
	o := Observation{Channel: t.Channel, Host: t.Host, Window: t.Window.Limit(), Ceiling: st.Ceiling}
	switch {
	case st.Ceiling == 0 && ceiling > 0:
		o.Kind, o.Ceiling = ObservedCeilingForgotten, ceiling
	case st.Ceiling != ceiling:
		o.Kind = ObservedCeilingLearned
	case t.Window.Confirmed() && !confirmed:
		o.Kind = ObservedCeilingConfirmed
	default:
		return
	}
	s.observe(o)
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

package core

import (
	"time"

	"zsched/thread"
)

// feedback applies Postfix's per-delivery concurrency feedback.
func (s *Scheduler) feedback(t *thread.Thread, siteFailed bool, now time.Time) {
	before := t.Window.Concurrency
	if siteFailed {
		if t.Window.Failed() && t.Window.Dead() {
			c := s.clause(t.Clause)
			if !t.BackingOff(now) {
				t.BackoffUntil = s.schedule(c).Next(now, &t.Retry, s.rng)
			}
			s.log.Info("destination is dead", "channel", t.Channel, "host", t.Host, "until", t.BackoffUntil)
		}
	} else {
		t.SiteFailures = 0
		t.Window.Succeeded(t.Busy)
	}
	if t.Window.Concurrency != before {
		s.log.Debug("destination_concurrency_feedback", "channel", t.Channel, "host", t.Host,
			"from", before, "to", t.Window.Concurrency, "busy", t.Busy)
	}
}

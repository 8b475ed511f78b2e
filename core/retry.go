package core

import (
	"time"

	"zsched/config"
	"zsched/report"
	"zsched/thread"
	"zsched/vertex"
)

// siteFailure backs off the whole destination at the first site failure of
// a run: no agent is fed from it until its retry time, which retryat sets
// when the agent gives one.
func (s *Scheduler) siteFailure(t *thread.Thread, l report.Line, now time.Time) {
	if t == nil || t.BackingOff(now) {
		return
	}
	c := s.clause(t.Clause)
	at := s.schedule(c).Next(now, &t.Retry, s.rng)
	if secs, ok := l.RetryAfter(now.Unix()); ok {
		at = now.Add(time.Duration(secs) * time.Second)
	}
	t.BackoffUntil = at
	t.SiteFailures++
	t.LastText = l.Text
	s.log.Debug("destination backs off", "channel", t.Channel, "host", t.Host, "until", at, "status", l.Status)
	s.touch(t, now)
}

func (s *Scheduler) schedule(c *config.Clause) thread.Schedule {
	return thread.Schedule{Interval: c.Interval.D(), Retries: c.Retries, Skew: c.Skew}
}

// expire gives up on a vertex's remaining recipients: a d line each (the
// last agent notary, or 5.4.7) so the DSN can tell the sender.
func (s *Scheduler) expire(v *vertex.Vertex, now time.Time) {
	n := v.LastNotary
	text := "expired after " + now.Sub(v.Msg.Arrival).Truncate(time.Second).String()
	if v.LastText != "" {
		text += ": " + v.LastText
	}
	for len(v.Rcpts) > 0 {
		r := v.Drop(len(v.Rcpts) - 1)
		rn := n
		if rn.IsZero() {
			rn = report.Notary{Recipient: r.User, Action: "failed", Status: "5.4.7 (unspecified timeout failure)",
				Diagnostic: "x-local; 500 (" + text + ")"}
		}
		rn.Action = "failed"
		s.diag(v.Msg, r, rn, text)
		s.stats.Expired++
		s.ready.Outcomes = append(s.ready.Outcomes, Outcome{
			Path: v.Msg.Path, Inum: v.Msg.Inum, Offset: r.Offset, User: r.User,
			Channel: v.Channel, Host: v.Host, Status: "expired",
			Delay: now.Sub(v.Msg.Arrival), Attempts: v.Attempts, Text: text,
		})
	}
}

// sweepExpiry expires vertices past arrival+expiry+expiry2 that no attempt
// would reach (a dead or queueonly destination, a held message).
func (s *Scheduler) sweepExpiry(now time.Time) {
	for _, t := range s.threads {
		var due []*vertex.Vertex
		collect := func(v *vertex.Vertex) {
			if !v.Expires2.IsZero() && !now.Before(v.Expires2) {
				due = append(due, v)
			}
		}
		t.Ready.Each(collect)
		t.Waiting.Each(collect)
		for _, v := range due {
			s.expire(v, now)
			s.dropVertex(v, t)
		}
		if len(due) > 0 {
			s.touch(t, now)
		}
	}
}

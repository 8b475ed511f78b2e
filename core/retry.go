package core

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"zsched/config"
	"zsched/report"
	"zsched/thread"
	"zsched/vertex"
)

// Retry, expiry and delay warnings (DESIGN §9).
//
// Two levels of retry. A vertex whose attempt failed waits for its own
// next time, from its own index into the clause's retries (or the agent's
// retryat after a site failure). A destination declared dead by site
// failures (feedback.go) backs off as a whole, with the thread's index or
// retryat. Each index advances once per failed run. A thread backing off is
// not fed, whatever arrives meanwhile (ZMailer restarts it on every
// arrival, Q6); Thread (views.go) says so.
//
// Expiry. A vertex past arrival+expiry expires
//   - at its next failed attempt (finish in report.go); its own retry time is
//     never set past that deadline, so a last attempt happens at the deadline;
//   - at the expiry sweep, if it waits after a failed attempt (its retry time,
//     e.g. an agent's retryat, lies past the deadline) or its destination is
//     backing off: waiting longer would only bounce it late.
//
// Any vertex past arrival+expiry+expiry2 expires at the sweep, attempted or
// not (held, queueonly, or never reached). Arrival is the body file's
// mtime, so deadlines survive restarts; ZMailer's attempts-in-this-process
// rule (Q20) does not apply: after a restart the first attempt comes at
// once and, past the deadline, its failure expires the recipient. Operator
// holds keep a recipient until expiry2. The sweep runs every expiryEvery.
//
// Delay warnings. With delay_warning_time set, a message still queued that
// long gets, once, a d line with action "delayed" for each pending recipient
// whose NOTIFY has DELAY, and a DSN action to report them at once.

// notifyDelay is ctlfile.NotifyDelay, without importing the edge package.
const notifyDelay = 8

// siteFailure notes a site-failure report (deferall, retryat) on its
// destination and returns the time the agent asked for with retryat, zero
// if none (or one not in the future). It does not stop the destination:
// feedback shrinks the window, and backs the whole thread off once the
// failures declare it dead (feedback.go).
func (s *Core) siteFailure(t *thread.Thread, l report.Line, now time.Time) time.Time {
	if t != nil {
		t.LastText = l.Status.String()
		if l.Text != "" {
			t.LastText += " " + l.Text
		}
	}
	if secs, ok := l.RetryAfter(now.Unix()); ok && secs > 0 {
		return thread.At(now, secs)
	}
	return time.Time{}
}

// probeRefused reports whether a site failure on t, judged now, is a
// probe of its learned limit refused: the window stands above a confirmed
// ceiling (thread.Window.learn), so the session refused is the one the
// destination's concurrency limit was expected to refuse, and the site is
// not failing. Its recipients are due again at once rather than at their
// retry time: they are fed within the window the refusal brings back to
// the ceiling, where the limit takes them. Waiting out the retry schedule
// instead leaves them to trickle out after everything else (a 1 s
// interval under the default skew is a retry almost 2 s later, thread.
// Schedule's MinRetry rule), the whole drain tail of lab cluster. A
// refusal at or below the ceiling (noise, or a limit that fell) takes its
// confirmation away, so this cannot retry a failing site in a loop.
func probeRefused(t *thread.Thread) bool {
	return t.Window.Confirmed() && t.Window.Limit() > t.Window.Ceiling
}

func (s *Core) schedule(c *config.Clause) thread.Schedule {
	return thread.Schedule{Interval: c.Interval.D(), Retries: c.Retries, Skew: c.Skew}
}

// vertexRetry is the next time of a vertex deferred on its own, never past
// its expiry deadline: the last attempt happens at the deadline, so the
// recipient expires on time instead of up to one retry step late.
func (s *Core) vertexRetry(c *config.Clause, v *vertex.Vertex, now time.Time) time.Time {
	i := int(v.Retry)
	next := s.schedule(c).Next(now, &i, s.rng)
	v.Retry = int32(i)
	if deadline, _ := s.deadlines(v); !deadline.IsZero() && now.Before(deadline) && next.After(deadline) {
		next = deadline
	}
	return next
}

// deadlines returns v's expiry deadlines: arrival + expiry, and that plus
// expiry2; zero when its clause has no expiry or it has no clause. They
// are computed, not kept in the vertex: they follow from the message and
// the clause, which a reload may change (DESIGN §8: every byte of a vertex
// is paid per recipient).
func (s *Core) deadlines(v *vertex.Vertex) (expires, expires2 time.Time) {
	if v.Clause < 0 || v.Msg.Arrival.IsZero() {
		return time.Time{}, time.Time{}
	}
	c := s.clause(v.Clause)
	if c.Expiry <= 0 {
		return time.Time{}, time.Time{}
	}
	expires = v.Msg.Arrival.Add(c.Expiry.D())
	return expires, expires.Add(c.Expiry2.D())
}

// expires returns v's expiry deadline (deadlines), zero if none.
func (s *Core) expires(v *vertex.Vertex) time.Time {
	e, _ := s.deadlines(v)
	return e
}

// expire gives up on a vertex's remaining recipients: a d line each (the
// last agent notary, or a 5.4.7 one) so the DSN can tell the sender.
func (s *Core) expire(v *vertex.Vertex, now time.Time) {
	text := "expired after " + age(now.Sub(v.Msg.Arrival))
	if v.LastText() != "" {
		text += ": " + v.LastText()
	}
	for _, r := range v.Rcpts {
		n := v.LastNotary()
		if n.IsZero() {
			n = report.Notary{Status: "5.4.7 (delivery time expired)", Diagnostic: "x-local; 500 (" + text + ")"}
		}
		// The vertex's last notary may name another of its recipients.
		n.Recipient = r.User
		n.Action = "failed"
		s.diag(v.Msg, r, n, text)
		s.stats.Expired++
		s.ready.Outcomes = append(s.ready.Outcomes, Outcome{
			Path: v.Msg.Path, QID: v.Msg.QID, Inum: v.Msg.Inum, Offset: r.Offset, User: r.User,
			Channel: v.Channel, Host: v.Host, Status: "expired",
			Delay: now.Sub(v.Msg.Arrival), Attempts: int(v.Attempts), Text: text,
		})
	}
	if t := s.threadOf(v); t != nil {
		t.Drop(v, len(v.Rcpts))
	}
	v.Msg.Pending -= len(v.Rcpts)
	v.Rcpts = v.Rcpts[:0]
}

// age formats a queue age for people: "5d", "2d3h0m0s", "3s".
func age(d time.Duration) string {
	d = d.Truncate(time.Second)
	const day = 24 * time.Hour
	if d < day {
		return d.String()
	}
	s := strconv.FormatInt(int64(d/day), 10) + "d"
	if rest := d % day; rest > 0 {
		s += rest.String()
	}
	return s
}

// expiryEvery is the expiry sweep's period: the shortest retry interval of
// any clause, within [1s, 1m]. Deadlines are met to within that period
// (ZMailer: 15 minutes) while a queue of many vertices is walked at most
// once a minute under ordinary intervals.
func (s *Core) expiryEvery() time.Duration {
	every := expirySweepEvery
	for i := range s.cfg.Clauses {
		if iv := s.cfg.Clauses[i].Interval.D(); iv > 0 && iv < every {
			every = iv
		}
	}
	return max(every, time.Second)
}

// sweepExpiry expires what no attempt will reach in time: vertices past
// expiry whose destination is backing off, and any vertex past expiry2.
// Effects come out in message order, whatever the maps' order.
func (s *Core) sweepExpiry(now time.Time) {
	var due []*vertex.Vertex
	for _, t := range s.threads {
		if !s.mayExpire(t, now) {
			continue
		}
		backingOff := t.BackingOff(now)
		collect := func(waiting bool) func(*vertex.Vertex) {
			return func(v *vertex.Vertex) {
				failed := (waiting || backingOff) && !t.Held && !v.Msg.Held
				if exp, exp2 := s.deadlines(v); expired(exp2, now) || failed && expired(exp, now) {
					due = append(due, v)
				}
			}
		}
		t.Ready.Each(collect(false))
		t.Waiting.Each(collect(true))
	}
	slices.SortFunc(due, func(a, b *vertex.Vertex) int {
		if c := cmp.Compare(a.Msg.Seq, b.Msg.Seq); c != 0 {
			return c
		}
		if c := strings.Compare(a.Channel, b.Channel); c != 0 {
			return c
		}
		return strings.Compare(a.Host, b.Host)
	})
	var changed []*thread.Thread
	seen := make(map[*thread.Thread]bool)
	for _, v := range due {
		t := s.threadOf(v)
		s.expire(v, now)
		s.dropVertex(v, t)
		if t != nil && !seen[t] {
			seen[t] = true
			changed = append(changed, t)
		}
	}
	for _, t := range changed {
		s.update(t, now)
	}
	s.warnDelayed(now)
}

func expired(deadline, now time.Time) bool { return !deadline.IsZero() && !now.Before(deadline) }

// warnDelayed writes the delay warnings that are due.
func (s *Core) warnDelayed(now time.Time) {
	after := s.cfg.Scheduler.DelayWarningTime.D()
	if after <= 0 {
		return
	}
	var due []*vertex.Message
	for _, m := range s.msgs {
		if !m.Warned && m.Pending > 0 && !m.Arrival.IsZero() && !now.Before(m.Arrival.Add(after)) {
			due = append(due, m)
		}
	}
	slices.SortFunc(due, func(a, b *vertex.Message) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, m := range due {
		s.warn(m, now)
	}
}

// warn writes a message's delay warning: a d line with action "delayed" for
// each pending recipient that asked for NOTIFY=DELAY, then asks for the
// DSN. It is done once per message, asked for or not.
func (s *Core) warn(m *vertex.Message, now time.Time) {
	m.Warned = true
	n := 0
	text := "delayed for " + age(now.Sub(m.Arrival)) + "; still trying"
	for _, v := range m.Vertices {
		for _, r := range v.Rcpts {
			if r.Notify&notifyDelay == 0 {
				continue
			}
			nt := report.Notary{Recipient: r.User, Action: "delayed", Status: "4.0.0"}
			if ln := v.LastNotary(); !ln.IsZero() {
				nt.Status = transient(ln.Status)
				nt.Diagnostic = ln.Diagnostic
				nt.RemoteMTA = ln.RemoteMTA
			}
			t := text
			if v.LastText() != "" {
				t += ": " + v.LastText()
			}
			s.diag(m, r, nt, t)
			n++
		}
	}
	if n > 0 {
		s.ready.DSNs = append(s.ready.DSNs, DSN{Path: m.Path, ID: m.ID, Inum: m.Inum})
	}
}

// transient turns an agent's status code into a 4.x.x one for a delay
// report: ZMailer's smtp writes 5.4.1 for a refused connection it will
// retry (zmailer-ta-observed R4), which a "delayed" action contradicts.
func transient(status string) string {
	if status == "" {
		return "4.0.0"
	}
	if status[0] == '5' || status[0] == '2' {
		return "4" + status[1:]
	}
	return status
}

// mayExpire reports whether any recipient of t may be past its expiry
// deadline (arrival + expiry) at now, by its tally's oldest arrival: the
// expiry sweep, which runs as often as the shortest clause interval, then
// walks only the threads that may hold something to expire, not the whole
// queue. The tally's seconds are rounded down, so it errs toward looking.
func (s *Core) mayExpire(t *thread.Thread, now time.Time) bool {
	c := s.clause(t.Clause)
	if c.Expiry <= 0 {
		return false
	}
	oldest := t.Oldest()
	return !oldest.IsZero() && !now.Before(oldest.Add(c.Expiry.D()))
}

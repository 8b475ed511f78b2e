package core

import (
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/report"
	"zsched/thread"
	"zsched/vertex"
)

// report applies one recipient report; false when it names no pending
// recipient fed to a (in a message still in core).
//
// The job is found in the agent's own queue, not through the message map:
// the agent's jobs were touched when they were fed, while with a million
// recipients queued a map lookup is a cache miss.
func (s *Core) report(a *agent, l report.Line, now time.Time) bool {
	var e *entry
	var v *vertex.Vertex
	var i int
	for k := range a.fifo {
		x := &a.fifo[k]
		if x.kind != entryJob || x.msg.Inum != l.Inum || x.msg.Gone {
			continue
		}
		if j, found := x.v.Find(l.Offset); found {
			e, v, i = x, x.v, j
			break
		}
	}
	if v == nil {
		return false
	}
	m := e.msg
	rc := v.Rcpts[i]
	e.reported++
	// What the attempt said is kept for the vertex's later use (WHY, the
	// DSN on expiry); a report that ends the vertex needs no record, and
	// that is most reports (vertex.SetLastText allocates).
	if final := l.Status.Class() == report.Delivered || l.Status.Class() == report.Permanent; !final || len(v.Rcpts) > 1 {
		if !l.Notary.IsZero() {
			v.SetLastNotary(l.Notary)
		}
		v.SetLastText(l.Text)
	}
	switch l.Status.Class() {
	case report.Delivered:
		dropRcptIn(e.thread, v, i)
		s.stats.Delivered++
		if l.Status == report.OK2 {
			m.Diags = true
		} else if l.Status == report.OK && rc.Notify&notifySuccess != 0 {
			s.diag(m, rc, l.Notary, l.Text)
		}
		s.outcome(a, v, rc, l.Status.String(), l.Text, now, time.Time{})
	case report.Permanent:
		dropRcptIn(e.thread, v, i)
		s.stats.Failed++
		if l.Status == report.Error2 {
			m.Diags = true
		} else {
			s.diag(m, rc, l.Notary, l.Text)
		}
		s.outcome(a, v, rc, l.Status.String(), l.Text, now, time.Time{})
	case report.Transient:
		e.deferred = append(e.deferred, deferral{offset: rc.Offset, status: l.Status, text: l.Text})
	case report.SiteFailed:
		at := s.siteFailure(s.threadOf(v), l, now)
		e.deferred = append(e.deferred, deferral{offset: rc.Offset, status: l.Status, text: l.Text, at: at})
		v.SiteFailed = true
	}
	return true
}

// dropRcptIn is dropRcpt for a vertex whose thread t is known.
func dropRcptIn(t *thread.Thread, v *vertex.Vertex, i int) vertex.Rcpt {
	if t != nil {
		t.Drop(v, 1)
	}
	return v.Drop(i)
}

// ctlfile.NotifySuccess and NotifyNever, without importing the edge package.
const (
	notifyNever   = 1
	notifySuccess = 2
)

func (s *Core) diag(m *vertex.Message, rc vertex.Rcpt, n report.Notary, text string) {
	m.Diags = true
	s.ready.Diags = append(s.ready.Diags, Diag{Path: m.Path, Inum: m.Inum, Offset: rc.Offset, Notary: n, Text: text})
}

// finish ends one job: the attempt of its vertex is judged, the recipients
// it left pending are rescheduled, feedback is applied to the destination.
// why, when set, is the text for recipients the agent never reported.
func (s *Core) finish(a *agent, e entry, now time.Time, why string) {
	v := e.v
	v.Agent = 0
	if e.msg.Gone {
		// The message was dropped from core while the job ran: drop left
		// this vertex counted in its thread, which it leaves now.
		s.giveBack(&e, now)
		if t := e.thread; t != nil {
			t.Leave(v)
			s.update(t, now)
		}
		return
	}
	t := e.thread
	if why == "" && !v.Resynced {
		why = "the agent did not report this recipient"
	}
	resynced := v.Resynced
	v.Resynced = false
	siteFailed := v.SiteFailed
	v.SiteFailed = false

	siteAt := siteRetry(e)
	// An agent that died of a broken transport delivered nothing: negative
	// feedback, never success (throttle.go).
	failed := siteFailed || a.failed
	// Judged before the feedback, which brings the window back down.
	limited := siteFailed && !a.failed && siteAt.IsZero() && t != nil && probeRefused(t)
	if a.failed && t != nil {
		t.LastText = "transport failed: " + why
	}
	switch {
	case t == nil:
	case resynced && e.reported == 0 && !a.failed:
		// The agent could not use the job and said so (#resync): no
		// attempt was made, and none is judged. An agent that answers
		// every job so (a read-only spool, the wrong channel) must not
		// grow the window.
	default:
		t.Attempts++
		s.feedback(t, failed, siteAt, now)
	}

	if len(v.Rcpts) > 0 {
		v.SetLastFed(e.fed) // SHOW THREAD's last feed time
		// Recipients still pending: reported as deferred, or not at all.
		var next time.Time
		c := s.clause(v.Clause)
		switch {
		case resynced && !failed && len(e.deferred) == 0 && v.Msg.Resyncs <= 1:
			// The file was re-read (a stale lock reset): try again at
			// once, but only once; an agent that resyncs again waits for
			// the retry schedule.
			next = now
		case failed && t != nil && t.BackingOff(now):
			next = t.BackoffUntil // the destination is dead
		case limited:
			// The destination's limit refused a probe: due at once, fed
			// when the window has room; its retry index stands.
			next = now
		case siteFailed && siteAt.After(now):
			next = siteAt // the agent's retryat
		default:
			next = s.vertexRetry(c, v, now)
		}
		deadline, _ := s.deadlines(v)
		expire := expired(deadline, now)
		for _, r := range v.Rcpts {
			st, text, reported := "deferred", why, false
			for _, d := range e.deferred {
				if d.offset == r.Offset {
					st, text, reported = d.status.String(), d.text, true
				}
			}
			if !reported && why == "" {
				continue // a resynced job's recipient: no attempt was made
			}
			s.stats.Deferred++
			if !reported && text != "" {
				v.SetLastText(text)
			}
			if expire {
				// expire logs the recipient's one final outcome, with
				// this attempt's text.
				continue
			}
			s.outcome(a, v, r, st, text, now, next)
		}
		if expire {
			s.expire(v, now)
		} else {
			if next.After(now) {
				v.SetDue(next)
			} else {
				v.SetDue(time.Time{})
			}
			if t != nil {
				s.orderRequeue(v, now)
				t.Add(v, now)
			}
		}
	}
	// A borrowed session comes free once the attempt is judged: the
	// feedback above counted it busy, as it counts the agent of an
	// attached job.
	s.giveBack(&e, now)
	if len(v.Rcpts) == 0 {
		s.dropVertex(v, t)
	}
	if t != nil {
		s.update(t, now)
	}
}

func (s *Core) dropVertex(v *vertex.Vertex, t *thread.Thread) {
	s.orderDone(v)
	v.Dequeue()
	v.Unlink()
	if t != nil {
		t.Leave(v)
	}
	if v.Msg.Pending == 0 && len(v.Msg.Vertices) == 0 {
		s.complete(v.Msg)
	}
}

func (s *Core) complete(m *vertex.Message) {
	delete(s.msgs, m.Inum)
	m.Gone = true
	s.ready.Completes = append(s.ready.Completes, Complete{Path: m.Path, ID: m.ID, Inum: m.Inum, Diags: m.Diags, Bounce: m.Bounce})
}

func (s *Core) outcome(a *agent, v *vertex.Vertex, r vertex.Rcpt, status, text string, now, next time.Time) {
	s.ready.Outcomes = append(s.ready.Outcomes, Outcome{
		Path: v.Msg.Path, QID: v.Msg.QID, Inum: v.Msg.Inum, Offset: r.Offset, User: r.User,
		Channel: v.Channel, Host: v.Host, Agent: a.id, Status: status,
		Delay: now.Sub(v.Msg.Arrival), Attempts: int(v.Attempts), Retry: int(v.Retry), Next: next, Text: text,
	})
}

// resync handles "#resync path": the agent could not use the job. The file
// is re-read (stale locks reset) and the job's recipients reconciled.
func (s *Core) resync(a *agent, path string, now time.Time) {
	if strings.HasPrefix(path, "/") || path == ".." || strings.HasPrefix(path, "../") || strings.Contains(path, "/../") || strings.HasSuffix(path, "/..") {
		// Paths an agent names are only ever matched against the core's
		// own (m.Path), never opened; one that escapes the postoffice is
		// still a broken or hostile agent, counted like garbage.
		s.garbage(a, now, "resync outside the postoffice", "#resync "+path)
		return
	}
	inum, ok := inumOf(path)
	m := s.msgs[inum]
	if !ok || m == nil || m.Path != path {
		s.log.Debug("resync for a file not in core", "agent", a.id, "path", path)
		return
	}
	for k := range a.fifo {
		if a.fifo[k].kind == entryJob && a.fifo[k].msg == m {
			a.fifo[k].v.Resynced = true
		}
	}
	m.Resyncs++
	s.say(a, resyncWords, now, hclog.Info, "agent cannot use its job (#resync); the file is read again",
		"msg", m.Path, "resyncs", m.Resyncs)
	if m.Resyncs > maxResyncs {
		s.log.Warn("message resynced too often; dropped from core until the next scan", "msg", m.QID)
		s.drop(m, now)
		return
	}
	s.ready.Rereads = append(s.ready.Rereads, Reread{Path: m.Path, Inum: m.Inum})
}

// inumOf returns the leading decimal number of a control file's base name.
func inumOf(path string) (int64, bool) {
	base := path[strings.LastIndexByte(path, '/')+1:]
	n := 0
	for n < len(base) && base[n] >= '0' && base[n] <= '9' {
		n++
	}
	v, err := strconv.ParseInt(base[:n], 10, 64)
	return v, err == nil
}

// Reread reconciles a message with its control file read again: recipients
// no longer pending in the file leave core without an outcome of ours. A nil
// arrival (the file vanished, or a live lock) drops the message from core;
// the caller's scan brings it back if it still exists.
func (s *Core) Reread(now time.Time, inum int64, a *Arrival) {
	s.answer(inum)
	m := s.msgs[inum]
	if m == nil {
		return
	}
	if a == nil {
		s.drop(m, now)
		return
	}
	if a.Diags {
		m.Diags = true
	}
	pending := make(map[int64]bool)
	for _, g := range a.Groups {
		for _, r := range g.Rcpts {
			pending[r.Offset] = true
		}
	}
	for _, v := range append([]*vertex.Vertex(nil), m.Vertices...) {
		if v.Agent != 0 && !v.Resynced {
			// Another live agent holds it: it may have marked a recipient
			// and not yet reported it; its report (or its exit) settles it.
			continue
		}
		for i := len(v.Rcpts) - 1; i >= 0; i-- {
			if !pending[v.Rcpts[i].Offset] {
				r := s.dropRcpt(v, i)
				s.ready.Outcomes = append(s.ready.Outcomes, Outcome{
					Path: m.Path, QID: m.QID, Inum: m.Inum, Offset: r.Offset, User: r.User,
					Channel: v.Channel, Host: v.Host, Status: "gone",
					Delay: now.Sub(m.Arrival), Attempts: int(v.Attempts),
					Text: "no longer pending in the control file",
				})
			}
		}
		if len(v.Rcpts) == 0 && v.Agent == 0 {
			t := s.threadOf(v)
			s.dropVertex(v, t)
			if t != nil {
				s.update(t, now)
			}
		}
	}
	if m.Pending == 0 && len(m.Vertices) == 0 && s.msgs[inum] == m {
		s.complete(m)
	}
}

// drop forgets a message without touching its files.
func (s *Core) drop(m *vertex.Message, now time.Time) {
	delete(s.msgs, m.Inum)
	m.Gone = true
	for _, v := range m.Vertices {
		t := s.threadOf(v)
		s.orderDone(v)
		if v.Clause < 0 {
			s.removeUnmatched(v)
		}
		if v.Agent != 0 {
			// Its recipients are no longer in core; the vertex leaves its
			// thread when its job ends (finish sees the message is gone).
			if t != nil {
				t.Drop(v, len(v.Rcpts))
			}
			v.Rcpts = v.Rcpts[:0]
			continue
		}
		v.Dequeue()
		if t != nil {
			t.Leave(v)
			s.update(t, now)
		}
	}
	m.Vertices = nil
}

func (s *Core) removeUnmatched(v *vertex.Vertex) {
	for i, x := range s.unmatched {
		if x == v {
			s.unmatched = append(s.unmatched[:i], s.unmatched[i+1:]...)
			return
		}
	}
}

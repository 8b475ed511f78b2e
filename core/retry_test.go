package core_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/textproto"
	"sort"
	"strings"
	"testing"
	"time"

	"zsched/core"
	"zsched/ctlfile"
	"zsched/dsn"
	"zsched/report"
	"zsched/sim"
)

// mailer plays the daemon's part in a simulation: at each completion and
// each DSN request it builds the reports owed for the message's d lines not
// yet reported, with package dsn as daemon/complete.go does from the files,
// and marks those lines reported.
type mailer struct {
	t       testing.TB
	s       *sim.Sim
	check   bool          // run the core's invariant check after every batch of effects
	done    map[int64]int // d lines of each message already reported
	reports map[int64][]sent
}

type sent struct {
	at     time.Time
	report dsn.Report
	final  bool // sent at completion, not as a delay warning
}

func newMailer(t testing.TB, s *sim.Sim) *mailer {
	ml := &mailer{t: t, s: s, done: map[int64]int{}, reports: map[int64][]sent{}}
	s.OnReady = ml.onReady
	return ml
}

func (ml *mailer) onReady(r *core.Ready) {
	if ml.check {
		if err := ml.s.Core.Check(ml.s.Now); err != nil {
			ml.t.Fatalf("at %s: %v", ml.s.Now.Sub(sim.Epoch), err)
		}
	}
	for _, c := range r.Completes {
		if !c.Killed {
			ml.report(c.Inum, true)
		}
	}
	for _, n := range r.DSNs {
		ml.report(n.Inum, false)
	}
}

const simHeader = "From: sender@example.org\nSubject: the original\n"

func (ml *mailer) report(inum int64, final bool) {
	m := ml.s.Msgs[inum]
	f := fileOf(m, ml.done[inum], ml.s.Now)
	res, err := dsn.Build(f, dsn.Original{Header: []byte(simHeader), Body: []byte("body\n")},
		dsn.Options{MTA: "mx.test", Now: ml.s.Now})
	if err != nil {
		ml.t.Fatal(err)
	}
	if len(res.Done) != len(m.Diags)-ml.done[inum] {
		ml.t.Fatalf("msg %d: %d d lines dealt with, %d pending", inum, len(res.Done), len(m.Diags)-ml.done[inum])
	}
	ml.done[inum] = len(m.Diags)
	for _, r := range res.Reports {
		ml.reports[inum] = append(ml.reports[inum], sent{at: ml.s.Now, report: r, final: final})
	}
}

// fileOf is the control file a simulated message stands for: sender
// sender@example.org, its recipients, its d lines (the first done of them
// already reported).
func fileOf(m *sim.Msg, done int, now time.Time) *ctlfile.File {
	f := &ctlfile.File{
		Name: m.Path, Inum: m.Inum, ID: m.Path, LogIdent: "<" + m.Path + "@sim>",
		ErrorAddr: "sender@example.org", Arrival: m.Arrival,
		Senders: []ctlfile.Sender{{Channel: "smtp", Host: "example.org", User: "sender@example.org", ErrorAddr: "sender@example.org"}},
	}
	for _, r := range m.Rcpts {
		n := ctlfile.Notify(r.Notify)
		if n == 0 {
			n = ctlfile.NotifyFailure
		}
		f.Rcpts = append(f.Rcpts, ctlfile.Rcpt{Offset: r.Offset, Status: ctlfile.Status(r.Status), Channel: r.Channel,
			Host: r.Host, User: r.User, HeaderOffset: -1, NOffset: -1, Notify: n})
	}
	for i, d := range m.Diags {
		st := ctlfile.Pending
		if i < done {
			st = ctlfile.Done
		}
		f.Diags = append(f.Diags, ctlfile.Diag{Offset: int64(1e6 + i), Status: st, RcptOffset: d.Offset,
			HeaderOffset: -1, NOffset: -1, Time: now.Unix(), Notary: d.Notary.String(), Text: d.Text})
	}
	return f
}

// dsnFields parses a report with net/mail and mime/multipart and returns
// its per-recipient fields by final recipient.
func dsnFields(t testing.TB, r dsn.Report) (mail.Header, map[string]textproto.MIMEHeader) {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(r.Message()))
	if err != nil {
		t.Fatalf("DSN does not parse: %v", err)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var parts [][]byte
	var types []string
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("DSN multipart: %v", err)
		}
		b, _ := io.ReadAll(p)
		parts = append(parts, b)
		types = append(types, p.Header.Get("Content-Type"))
	}
	if len(parts) != 3 || types[1] != "message/delivery-status" {
		t.Fatalf("DSN parts %v", types)
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(parts[1])))
	if _, err := tp.ReadMIMEHeader(); err != nil {
		t.Fatal(err)
	}
	out := map[string]textproto.MIMEHeader{}
	for {
		h, err := tp.ReadMIMEHeader()
		if len(h) > 0 {
			out[strings.TrimPrefix(h.Get("Final-Recipient"), "rfc822; ")] = h
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return msg.Header, out
}

const weekConfig = `
[[clause]]
select = "smtp/*"
command = "deferall -c smtp"
jobtimeout = "5m"
maxring = 10
`

const (
	expiry = 5 * 24 * time.Hour // the default
	day    = 24 * time.Hour
)

// refused answers like ZMailer's smtp on a refused connection, with its
// notary (zmailer-ta-observed O18); silent never answers (killed after
// jobtimeout).
func neverAnswers(j sim.Job) sim.Response {
	if j.Host == "silent.test" {
		return sim.Response{Hang: true}
	}
	st := make([]report.Status, len(j.Rcpts))
	for i := range st {
		st[i] = report.DeferAll
	}
	return sim.Response{Status: st, Delay: 200 * time.Millisecond, Text: "smtp; 500 (connect to " + j.Host + ": Connection refused)",
		Notary: report.Notary{Action: "failed", Status: "4.4.1 (TCP/IP-connection failure)",
			Diagnostic: "smtp; 500 (connect to " + j.Host + ": Connection refused)"}}
}

// weekOfMail queues 30 messages over the first 29 hours, each to two
// recipients at a destination that refuses connections and one at a
// destination that never answers; every fifth message's recipients say
// NOTIFY=NEVER.
func weekOfMail(t *testing.T, s *sim.Sim) {
	for i := 0; i < 30; i++ {
		if at := sim.Epoch.Add(time.Duration(i) * time.Hour); s.Now.Before(at) {
			s.Run(at.Sub(sim.Epoch))
			s.Now = at
		}
		var notify uint8
		if i%5 == 4 {
			notify = uint8(ctlfile.NotifyNever)
		}
		m := &sim.Msg{}
		for k, u := range []string{"a%d@down.test", "b%d@down.test", "c%d@silent.test"} {
			u = fmt.Sprintf(u, i)
			_, host, _ := strings.Cut(u, "@")
			m.Rcpts = append(m.Rcpts, &sim.Rcpt{Offset: int64(100 + 60*k), Channel: "smtp", Host: host, User: u, Notify: notify, Status: ' '})
		}
		s.Add(m)
	}
}

// checkWeek asserts what a week of a dead destination must give: every
// recipient expired once, on time; one DSN per message that asked for one,
// none for the others, with the right per-recipient fields.
func checkWeek(t *testing.T, s *sim.Sim, ml *mailer) {
	t.Helper()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%d recipients still pending after a week, e.g. %s", len(p), p[0])
	}
	final := map[string][]core.Outcome{}
	for _, o := range s.Outcomes {
		if o.Final() {
			final[fmt.Sprint(o.Inum, "/", o.Offset)] = append(final[fmt.Sprint(o.Inum, "/", o.Offset)], o)
		}
	}
	worst := map[string]time.Duration{}
	for _, m := range s.Msgs {
		for _, r := range m.Rcpts {
			os := final[fmt.Sprint(m.Inum, "/", r.Offset)]
			if len(os) != 1 || os[0].Status != "expired" {
				t.Fatalf("%s: final outcomes %+v, want one expiry", r.User, os)
			}
			// On time: not before arrival+expiry, and late by at most the
			// expiry sweep (1m here) plus, for a recipient whose agent
			// hangs at the deadline, the job timeout.
			late := os[0].Delay - expiry
			slack := 2 * time.Minute
			if r.Host == "silent.test" {
				slack += 5 * time.Minute
			}
			if late < 0 || late > slack {
				t.Fatalf("%s expired %s after its deadline (allowed 0..%s)", r.User, late, slack)
			}
			worst[r.Host] = max(worst[r.Host], late)
		}
	}
	t.Logf("%d messages; latest expiry after its deadline: %v", len(s.Msgs), worst)
	for inum, m := range s.Msgs {
		got := ml.reports[inum]
		never := m.Rcpts[0].Notify == uint8(ctlfile.NotifyNever)
		if never {
			if len(got) != 0 {
				t.Fatalf("msg %d (NOTIFY=NEVER): %d DSNs", inum, len(got))
			}
			continue
		}
		if len(got) != 1 || !got[0].final {
			t.Fatalf("msg %d: %d DSNs, want exactly one at completion", inum, len(got))
		}
		r := got[0].report
		if r.To != "sender@example.org" {
			t.Fatalf("msg %d: DSN to %s", inum, r.To)
		}
		hdr, rcpts := dsnFields(t, r)
		if !strings.Contains(hdr.Get("Subject"), "FAILED(3)") {
			t.Fatalf("msg %d: Subject %q", inum, hdr.Get("Subject"))
		}
		if len(rcpts) != 3 {
			t.Fatalf("msg %d: DSN reports %d recipients, want 3", inum, len(rcpts))
		}
		for _, rc := range m.Rcpts {
			f := rcpts[rc.User]
			if f == nil {
				t.Fatalf("msg %d: no Final-Recipient %s", inum, rc.User)
			}
			wantStatus, wantDiag := "4.4.1 (TCP/IP-connection failure)", "smtp; 500 (connect to down.test: Connection refused)"
			if rc.Host == "silent.test" {
				// No notary ever came back: the scheduler's own 5.4.7.
				wantStatus, wantDiag = "5.4.7 (delivery time expired)", "x-local; 500 (expired after 5d"
			}
			if f.Get("Action") != "failed" || f.Get("Status") != wantStatus || !strings.HasPrefix(f.Get("Diagnostic-Code"), wantDiag) {
				t.Fatalf("msg %d %s: Action %q Status %q Diagnostic-Code %q; want failed, %q, %q…",
					inum, rc.User, f.Get("Action"), f.Get("Status"), f.Get("Diagnostic-Code"), wantStatus, wantDiag)
			}
		}
	}
}

// TestWeekOfDeadDestination: a destination that refuses every connection
// and one that never answers, for a simulated week (fake clock), with the
// invariant check after every event that has an effect. (After every tick
// too, that is 700 000 checks: half a minute under -race; the randomized
// simulation below checks after every tick.)
func TestWeekOfDeadDestination(t *testing.T) {
	c := cfg(t, weekConfig)
	s := sim.New(c, neverAnswers, 1)
	ml := newMailer(t, s)
	ml.check = true
	weekOfMail(t, s)
	s.Run(8 * day)
	checkWeek(t, s, ml)
}

// TestRestartMidWeek restarts the scheduler on day 3 (a fresh core reads
// the files again, with their arrival times): expiry is still on time and
// nothing is reported twice.
func TestRestartMidWeek(t *testing.T) {
	c := cfg(t, weekConfig)
	s := sim.New(c, neverAnswers, 1)
	ml := newMailer(t, s)
	ml.check = true
	weekOfMail(t, s)
	s.Run(3 * day)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	before := s.Core.Messages()
	s.Restart(c, 2)
	if s.Core.Messages() != before || before != 30 {
		t.Fatalf("%d messages in the new core, %d before the restart, want 30", s.Core.Messages(), before)
	}
	s.Run(8 * day)
	checkWeek(t, s, ml)
}

// TestDelayWarning: with delay_warning_time, a recipient that asked for
// NOTIFY=DELAY gets one warning (Action: delayed) once the message is that
// old, and the failure report later; one that did not ask gets only the
// failure. A restart after the warning does not send it again.
func TestDelayWarning(t *testing.T) {
	c := cfg(t, weekConfig)
	c.Scheduler.DelayWarningTime.UnmarshalText([]byte("4h"))
	s := sim.New(c, neverAnswers, 1)
	s.Check = true
	ml := newMailer(t, s)
	m := &sim.Msg{Rcpts: []*sim.Rcpt{
		{Offset: 100, Channel: "smtp", Host: "down.test", User: "d@down.test", Status: ' ',
			Notify: uint8(ctlfile.NotifyDelay | ctlfile.NotifyFailure)},
		{Offset: 200, Channel: "smtp", Host: "down.test", User: "f@down.test", Status: ' '},
	}}
	s.Add(m)
	s.Run(5 * time.Hour)
	got := ml.reports[m.Inum]
	if len(got) != 1 || got[0].final {
		t.Fatalf("%d reports after 5h, want one delay warning", len(got))
	}
	if late := got[0].at.Sub(m.Arrival) - 4*time.Hour; late < 0 || late > 2*time.Minute {
		t.Fatalf("warning sent %s after delay_warning_time", late)
	}
	hdr, rcpts := dsnFields(t, got[0].report)
	w := rcpts["d@down.test"]
	if len(rcpts) != 1 || w == nil || w.Get("Action") != "delayed" || !strings.HasPrefix(w.Get("Status"), "4.4.1") ||
		!strings.Contains(hdr.Get("Subject"), "DELAYED(1)") {
		t.Fatalf("warning: Subject %q, recipients %v", hdr.Get("Subject"), rcpts)
	}
	s.Restart(c, 3)
	s.Run(8 * day)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	got = ml.reports[m.Inum]
	if len(got) != 2 || !got[1].final {
		t.Fatalf("%d reports in all, want the warning and the final one", len(got))
	}
	_, rcpts = dsnFields(t, got[1].report)
	if len(rcpts) != 2 || rcpts["d@down.test"].Get("Action") != "failed" || rcpts["f@down.test"].Get("Action") != "failed" {
		t.Fatalf("final report: %v", rcpts)
	}
}

// TestDeadDestinationIsNotRestartedByArrivals: after site failures declare
// a destination dead, new mail for it waits for the retry time, and the
// core says why; a thread held back only by maxring is not backing off.
func TestDeadDestinationIsNotRestartedByArrivals(t *testing.T) {
	c := cfg(t, `
[[clause]]
select = "smtp/*"
command = "deferall"
maxring = 1
interval = "10m"
retries = [1]
`)
	slowHost := "slow.test"
	s := sim.New(c, func(j sim.Job) sim.Response {
		if j.Host == slowHost {
			r := sim.Sink(j)
			r.Delay = time.Hour
			return r
		}
		return neverAnswers(j)
	}, 1)
	s.Check = true
	for i := 0; i < 5; i++ {
		s.Enqueue(fmt.Sprintf("smtp/down.test/u%d", i))
	}
	for s.Now.Sub(sim.Epoch) < time.Minute && s.Step() {
	}
	st, ok := s.Core.Thread(s.Now, "smtp", "down.test")
	if !ok || st.State != core.ThreadDead || !st.Backoff.After(s.Now) || !strings.HasPrefix(st.LastText, "deferall smtp; 500") {
		t.Fatalf("after refusals: %+v (found %v), want dead, backing off, with the agent's text", st, ok)
	}
	fed := len(s.JobLog)
	s.Enqueue("smtp/down.test/late")
	for s.Now.Before(st.Backoff) && s.Step() {
		if s.Now.Before(st.Backoff) && len(s.JobLog) != fed {
			t.Fatalf("a new arrival restarted the dead destination at %s, before %s", s.Now, st.Backoff)
		}
	}
	if st2, _ := s.Core.Thread(s.Now, "smtp", "down.test"); st2.Vertices != 6 {
		t.Fatalf("%d vertices queued, want 6", st2.Vertices)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}

	// maxring 1: with the one agent busy an hour at slow.test, another
	// destination waits for the limit, not for a back-off.
	s2 := sim.New(c, func(j sim.Job) sim.Response { r := sim.Sink(j); r.Delay = time.Hour; return r }, 1)
	s2.Check = true
	s2.Enqueue("smtp/slow.test/x")
	s2.Enqueue("smtp/other.test/y")
	for s2.Now.Sub(sim.Epoch) < time.Minute && s2.Step() {
	}
	st, _ = s2.Core.Thread(s2.Now, "smtp", "other.test")
	if st.State != core.ThreadBlocked || !st.Backoff.IsZero() || st.Pend != core.ReasonMaxRing {
		t.Fatalf("thread held by maxring: %+v, want blocked by maxring, not backing off", st)
	}
}

// TestLongRandomizedSimulation runs a randomized workload over a simulated
// fortnight — deliveries, deferrals, site failures, permanent failures,
// crashes, hangs, short expiry, delay warnings, NOTIFY of every kind, and a
// restart — with the core's invariant check after every event, then checks
// that every recipient ended exactly once and every report parses.
func TestLongRandomizedSimulation(t *testing.T) {
	c := cfg(t, `
[[clause]]
select = "smtp/*"
command = "random"
interval = "1m"
retries = [1, 2, 3, 5, 8, 13]
expiry = "6h"
expiry2 = "1h"
jobtimeout = "3m"
maxring = 8
maxthr = 4
initial_concurrency = 2
overfeed = 1
`)
	c.Scheduler.DelayWarningTime.UnmarshalText([]byte("2h"))
	rng := rand.New(rand.NewSource(11))
	behave := func(j sim.Job) sim.Response {
		r := sim.Response{Delay: time.Duration(rng.Intn(20000)) * time.Millisecond}
		h := j.Host
		switch x := rng.Intn(100); {
		case x < 3:
			r.Crash = true
		case x < 4:
			r.Hang = true
		case strings.HasPrefix(h, "dead"):
			// Down for the whole run.
			for range j.Rcpts {
				r.Status = append(r.Status, report.DeferAll)
			}
			r.Notary = report.Notary{Action: "failed", Status: "4.4.1", Diagnostic: "smtp; 500 (connect refused)"}
			return r
		case strings.HasPrefix(h, "flap") && x < 40:
			r.Retry = "+600"
			for range j.Rcpts {
				r.Status = append(r.Status, report.RetryAt)
			}
			return r
		}
		for range j.Rcpts {
			st := report.OK3
			switch y := rng.Intn(20); {
			case y < 4:
				st = report.Deferred
			case y < 5:
				st = report.Error
			case y < 6:
				st = report.OK
			}
			r.Status = append(r.Status, st)
		}
		return r
	}
	s := sim.New(c, behave, 5)
	s.Check = true
	ml := newMailer(t, s)
	notifies := []ctlfile.Notify{0, ctlfile.NotifyNever, ctlfile.NotifySuccess | ctlfile.NotifyFailure,
		ctlfile.NotifyDelay | ctlfile.NotifyFailure, ctlfile.NotifySuccess | ctlfile.NotifyDelay | ctlfile.NotifyFailure}
	hosts := []string{"a.test", "b.test", "c.test", "dead1.test", "flap1.test", "flap2.test", "e.test"}
	const msgs = 600
	restarted := false
	for i := 0; i < msgs; i++ {
		at := sim.Epoch.Add(time.Duration(i) * 2 * time.Minute)
		s.Run(at.Sub(sim.Epoch))
		if s.Now.Before(at) {
			s.Now = at
		}
		if !restarted && i == msgs/2 {
			s.Restart(c, 6)
			restarted = true
		}
		m := &sim.Msg{}
		for k := 0; k < 1+rng.Intn(4); k++ {
			h := hosts[rng.Intn(len(hosts))]
			m.Rcpts = append(m.Rcpts, &sim.Rcpt{Offset: int64(100 + 50*k), Channel: "smtp", Host: h,
				User: fmt.Sprintf("u%d.%d@%s", i, k, h), Notify: uint8(notifies[rng.Intn(len(notifies))]), Status: ' '})
		}
		s.Add(m)
	}
	s.Run(14 * day)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%d recipients pending after a fortnight, e.g. %s", len(p), p[0])
	}
	if len(s.Completed) != msgs {
		t.Fatalf("%d of %d messages completed", len(s.Completed), msgs)
	}
	finals := map[string]int{}
	for k, n := range s.Final() {
		finals[k] = n
	}
	statuses := map[string]int{}
	for _, o := range s.Outcomes {
		if o.Final() {
			statuses[o.Status]++
			// Expiry is never later than expiry+expiry2 (plus a sweep
			// period, a job timeout and an agent's service time).
			if o.Status == "expired" && o.Delay > 7*time.Hour+5*time.Minute {
				t.Fatalf("recipient %d/%d expired after %s", o.Inum, o.Offset, o.Delay)
			}
		}
	}
	n := 0
	for _, m := range s.Msgs {
		for _, r := range m.Rcpts {
			n++
			if n := finals[fmt.Sprint(m.Inum, "/", r.Offset)]; n != 1 {
				t.Fatalf("%s has %d final outcomes, want 1", r.User, n)
			}
		}
	}
	reports := 0
	var kinds []string
	for _, rs := range ml.reports {
		for _, r := range rs {
			reports++
			dsnFields(t, r.report)
			for a := range r.report.Actions {
				kinds = append(kinds, a)
			}
		}
	}
	sort.Strings(kinds)
	t.Logf("%d recipients: %v; %d DSNs; %d job lines; %d agents spawned; simulated %s",
		n, statuses, reports, len(s.JobLog), s.Core.Counters().Spawned, s.Now.Sub(sim.Epoch).Round(time.Minute))
	if statuses["expired"] == 0 || statuses["ok"]+statuses["ok3"] == 0 || statuses["error"] == 0 || reports == 0 {
		t.Fatalf("the workload did not exercise expiry, delivery, failure and DSNs: %v, %d DSNs", statuses, reports)
	}
}

package core_test

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"zsched/core"
	"zsched/report"
	"zsched/sim"
)

func hang(sim.Job) sim.Response { return sim.Response{Hang: true} }

func statuses(n int, st report.Status) []report.Status {
	out := make([]report.Status, n)
	for i := range out {
		out[i] = st
	}
	return out
}

// why returns the reason the first vertex of m waits.
func why(t *testing.T, s *sim.Sim, m *sim.Msg) core.Why {
	t.Helper()
	mv, err := s.Core.Message(s.Now, m.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(mv.Vertices) == 0 {
		t.Fatalf("message %s has no vertex in core", m.Path)
	}
	return mv.Vertices[0].Why
}

func TestWhyNamesTheLimitThatBinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		second string // the waiting message's recipient; the first goes to a.test
		want   core.Reason
		limit  int
	}{
		{"maxta", "maxta = 1\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"x\"\n", "smtp/b.test/u", core.ReasonMaxTA, 1},
		{"maxchannel", "[[clause]]\nselect = \"smtp/*\"\ncommand = \"x\"\nmaxchannel = 1\n", "smtp/b.test/u", core.ReasonMaxChannel, 1},
		{"maxring", "[[clause]]\nselect = \"smtp/*\"\ncommand = \"x\"\nmaxring = 1\n", "smtp/b.test/u", core.ReasonMaxRing, 1},
		{"window", "[[clause]]\nselect = \"smtp/*\"\ncommand = \"x\"\nmaxthr = 1\n", "smtp/a.test/v", core.ReasonWindow, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sim.New(cfg(t, tc.config), hang, 1)
			running := s.Enqueue("smtp/a.test/u")
			waiting := s.Enqueue(tc.second)
			run(t, s, 10*time.Second)
			if w := why(t, s, running); w.Reason != core.ReasonRunning {
				t.Fatalf("first message: %v, want running", w)
			}
			w := why(t, s, waiting)
			if w.Reason != tc.want || w.Limit != tc.limit {
				t.Fatalf("WHY = %v (%q, limit %d), want %v limit %d", w.Reason, w, w.Limit, tc.want, tc.limit)
			}
			if w.Reason == core.ReasonWindow && (w.Busy != 1 || w.Window != 1) {
				t.Fatalf("window reason says %d of %d busy, want 1 of 1", w.Busy, w.Window)
			}
			var blocked int
			for _, r := range s.Core.Rings(s.Now) {
				for _, th := range r.Threads {
					if th.State == core.ThreadBlocked {
						blocked++
						if th.Pend != tc.want {
							t.Fatalf("thread %s pend=%v, want %v", th.Host, th.Pend, tc.want)
						}
					}
				}
			}
			if tc.want != core.ReasonWindow && blocked != 1 {
				t.Fatalf("%d blocked threads in mailq, want 1", blocked)
			}
		})
	}
}

func TestWhyNamesRetryDeadHoldAndQueueOnly(t *testing.T) {
	const clauses = `
[[clause]]
select = "smtp/q.test"
command = "x"
queueonly = true
[[clause]]
select = "smtp/*"
command = "x"
interval = "1h"
retries = [1]
initial_concurrency = 1
failed_cohort_limit = 1
`
	s := sim.New(cfg(t, clauses), func(j sim.Job) sim.Response {
		switch j.Host {
		case "dead.test":
			return sim.Response{Status: statuses(len(j.Rcpts), report.DeferAll)}
		case "retry.test":
			return sim.Response{Status: statuses(len(j.Rcpts), report.Deferred)}
		}
		return sim.Response{Hang: true}
	}, 1)
	dead := s.Enqueue("smtp/dead.test/u")
	retry := s.Enqueue("smtp/retry.test/u")
	queued := s.Enqueue("smtp/q.test/u")
	run(t, s, 5*time.Second)
	// Not in core yet: the hold waits for the destination.
	s.Do(func(now time.Time) { s.Core.HoldThread(now, "smtp", "held.test") })
	heldThread := s.Enqueue("smtp/held.test/u")
	// A new message is fed at once when an agent can be had: hold its
	// destination while the message hold is put on, then release it.
	s.Do(func(now time.Time) { s.Core.HoldThread(now, "smtp", "free.test") })
	heldMsg := s.Enqueue("smtp/free.test/u")
	s.Do(func(now time.Time) {
		if err := s.Core.HoldMessage(now, heldMsg.Path); err != nil {
			t.Fatal(err)
		}
		s.Core.ReleaseThread(now, "smtp", "free.test")
	})
	run(t, s, 10*time.Second)

	for _, tc := range []struct {
		m    *sim.Msg
		want core.Reason
	}{
		{dead, core.ReasonDead},
		{retry, core.ReasonRetry},
		{queued, core.ReasonQueueOnly},
		{heldThread, core.ReasonHeldThread},
		{heldMsg, core.ReasonHeldMessage},
	} {
		w := why(t, s, tc.m)
		if w.Reason != tc.want {
			t.Errorf("%s: WHY = %v (%s), want %v", tc.m.Rcpts[0].Host, w.Reason, w, tc.want)
		}
		if (tc.want == core.ReasonDead || tc.want == core.ReasonRetry) && !w.Until.After(s.Now) {
			t.Errorf("%s: %v until %v, want a time after now %v", tc.m.Rcpts[0].Host, w.Reason, w.Until, s.Now)
		}
	}
	for _, j := range s.JobLog {
		if j.Host == "held.test" || j.Host == "free.test" || j.Host == "q.test" {
			t.Fatalf("a held or queueonly destination was fed: %+v", j)
		}
	}
}

func TestETRNStartsOnlyMatchingQueueOnlyThreads(t *testing.T) {
	s := sim.New(cfg(t, `
[[clause]]
select = "smtp/*"
command = "x"
queueonly = true
`), sim.Sink, 1)
	hosts := []string{"x.test", "sub.x.test", "deep.sub.x.test", "y.test", "notx.test", "x.test.example"}
	for _, h := range hosts {
		s.Enqueue("smtp/" + h + "/u")
	}
	run(t, s, time.Minute)
	if len(s.JobLog) != 0 {
		t.Fatalf("queueonly threads started without ETRN: %+v", s.JobLog)
	}
	fed := func() []string {
		var hs []string
		for _, j := range s.JobLog {
			hs = append(hs, j.Host)
		}
		sort.Strings(hs)
		return hs
	}
	var n int
	s.Do(func(now time.Time) { n = s.Core.ETRN(now, "SUB.x.test 192.0.2.1") })
	run(t, s, 2*time.Minute)
	if n != 1 || fmt.Sprint(fed()) != "[sub.x.test]" {
		t.Fatalf("ETRN sub.x.test started %d, fed %v; want exactly sub.x.test", n, fed())
	}
	s.Do(func(now time.Time) { n = s.Core.ETRN(now, "@x.test") })
	run(t, s, 3*time.Minute)
	if want := "[deep.sub.x.test sub.x.test x.test]"; n != 2 || fmt.Sprint(fed()) != want {
		t.Fatalf("ETRN @x.test started %d, fed %v; want 2 more: %s", n, fed(), want)
	}
	if got := s.Core.Messages(); got != 3 {
		t.Fatalf("%d messages left, want the 3 of y.test, notx.test, x.test.example", got)
	}
	s.Do(func(now time.Time) { n = s.Core.ETRN(now, "nothing.test") })
	if n != 0 {
		t.Fatalf("ETRN of an unknown host started %d threads", n)
	}
}

func TestETRNRunWaitsForTheNextETRNAfterDeferring(t *testing.T) {
	tries := 0
	s := sim.New(cfg(t, `
[[clause]]
select = "smtp/*"
command = "x"
queueonly = true
interval = "1m"
retries = [1]
`), func(j sim.Job) sim.Response {
		tries++
		if tries == 1 {
			return sim.Response{Status: statuses(len(j.Rcpts), report.Deferred)}
		}
		return sim.Sink(j)
	}, 1)
	s.Enqueue("smtp/x.test/u")
	s.Do(func(now time.Time) { s.Core.ETRN(now, "x.test") })
	run(t, s, time.Hour)
	if tries != 1 || s.Core.Messages() != 1 {
		t.Fatalf("%d attempts, %d messages: a deferral must wait for the next ETRN", tries, s.Core.Messages())
	}
	s.Do(func(now time.Time) { s.Core.ETRN(now, "x.test") })
	run(t, s, 2*time.Hour)
	if tries != 2 || s.Core.Messages() != 0 {
		t.Fatalf("%d attempts, %d messages after the second ETRN, want 2 and 0", tries, s.Core.Messages())
	}
}

func TestHoldAndReleaseLoseNothing(t *testing.T) {
	s := sim.New(cfg(t, smtp+"expiry = \"1h\"\nexpiry2 = \"1h\"\n"), sim.Sink, 1)
	s.Do(func(now time.Time) { s.Core.HoldThread(now, "smtp", "h.test") })
	s.Do(func(now time.Time) { s.Core.HoldThread(now, "smtp", "m.test") })
	a := s.Enqueue("smtp/h.test/u", "smtp/other.test/v")
	b := s.Enqueue("smtp/m.test/u")
	s.Do(func(now time.Time) {
		if err := s.Core.HoldMessage(now, b.Path); err != nil {
			t.Fatal(err)
		}
		s.Core.ReleaseThread(now, "smtp", "m.test") // the message hold remains
	})
	run(t, s, 10*time.Minute)
	if got := s.Pending(); fmt.Sprint(got) != fmt.Sprintf("[%s:u %s:u]", a.Path, b.Path) {
		t.Fatalf("pending %v, want only the held thread's and the held message's recipients", got)
	}
	s.Do(func(now time.Time) {
		s.Core.ReleaseThread(now, "smtp", "h.test")
		if err := s.Core.ReleaseMessage(now, b.Path); err != nil {
			t.Fatal(err)
		}
	})
	run(t, s, 20*time.Minute)
	if p := s.Pending(); len(p) != 0 {
		t.Fatalf("still pending after release: %v", p)
	}

	// A held message still expires.
	s.Do(func(now time.Time) { s.Core.HoldThread(now, "smtp", "m.test") })
	c := s.Enqueue("smtp/m.test/w")
	s.Do(func(now time.Time) {
		s.Core.HoldMessage(now, c.Path)
		s.Core.ReleaseThread(now, "smtp", "m.test")
	})
	run(t, s, 4*time.Hour)
	expired := false
	for _, o := range s.Outcomes {
		if o.Inum == c.Inum && o.Status == "expired" {
			expired = true
		}
	}
	if !expired || s.Core.Messages() != 0 {
		t.Fatalf("held message not expired (expired=%v, %d in core)", expired, s.Core.Messages())
	}
}

func TestKillDropsTheMessageAndIgnoresItsLateReports(t *testing.T) {
	s := sim.New(cfg(t, smtp), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = 10 * time.Second
		return r
	}, 1)
	fed := s.Enqueue("smtp/a.test/u")
	queued := s.Enqueue("smtp/b.test/u")
	s.Do(func(now time.Time) { s.Core.HoldMessage(now, queued.Path) })
	run(t, s, time.Second)
	var kills []core.Complete
	for _, m := range []*sim.Msg{fed, queued} {
		s.Do(func(now time.Time) {
			if err := s.Core.Kill(now, m.Path); err != nil {
				t.Fatal(err)
			}
		})
		if !s.Completed[m.Inum] {
			t.Fatalf("kill of %s asked for no file removal", m.Path)
		}
		kills = append(kills, core.Complete{Inum: m.Inum})
	}
	if err := s.Core.Kill(s.Now, fed.Path); !errors.Is(err, core.ErrNoMessage) {
		t.Fatalf("second kill: %v, want ErrNoMessage", err)
	}
	run(t, s, time.Minute)
	if g := s.Core.Counters().Garbage; g != 0 {
		t.Fatalf("the killed message's late reports counted as %d garbage lines", g)
	}
	if s.Core.Messages() != 0 || len(kills) != 2 {
		t.Fatalf("%d messages in core after kills", s.Core.Messages())
	}
	// The job that ran while its message was killed leaves no vertex
	// counted in its thread: the thread goes away.
	for _, r := range s.Core.Rings(s.Now) {
		for _, th := range r.Threads {
			t.Errorf("thread %s/%s still in core after its last message was killed: N=%d R=%d",
				th.Channel, th.Host, th.Vertices, th.Recipients)
		}
	}
}

func TestFlushRetriesNow(t *testing.T) {
	tries := map[string]int{}
	s := sim.New(cfg(t, `
[[clause]]
select = "smtp/*"
command = "x"
interval = "1h"
retries = [1]
`), func(j sim.Job) sim.Response {
		tries[j.Host]++
		return sim.Response{Status: statuses(len(j.Rcpts), report.Deferred)}
	}, 1)
	s.Enqueue("smtp/a.test/u")
	s.Enqueue("smtp/b.test/u")
	run(t, s, time.Minute)
	var n int
	var err error
	s.Do(func(now time.Time) { n, err = s.Core.Flush(now, "smtp/a.*") })
	run(t, s, 2*time.Minute)
	if err != nil || n != 1 || tries["a.test"] != 2 || tries["b.test"] != 1 {
		t.Fatalf("flush smtp/a.*: n=%d err=%v tries=%v; want a.test tried again at once, b.test not", n, err, tries)
	}
	if _, err := s.Core.Flush(s.Now, "smtp/[a"); err == nil {
		t.Fatal("flush with a malformed glob: no error")
	}
}

func TestReconfigureKeepsWorkWindowsAndFittingAgents(t *testing.T) {
	const before = `
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
maxring = 1
maxthr = 10
initial_concurrency = 1
`
	s := sim.New(cfg(t, before), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}, 1)
	// Grow a window by feedback first: a.test delivers 6 messages.
	for i := 0; i < 6; i++ {
		s.Enqueue("smtp/a.test/u" + fmt.Sprint(i))
	}
	for i := 0; i < 6; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i))
	}
	run(t, s, 3500*time.Millisecond)
	tv, ok := s.Core.Thread(s.Now, "smtp", "a.test")
	if !ok || tv.Window < 2 {
		t.Fatalf("a.test window %d (in core %v), want grown past 1 to tell it from a fresh one", tv.Window, ok)
	}
	if n := s.Core.Agents(); n != 1 {
		t.Fatalf("%d agents under maxring 1", n)
	}
	queued := s.Core.Gauges(s.Now, 0).Recipients

	// A clause inserted in front shifts every index; maxring goes to 3.
	after := cfg(t, `
[[clause]]
select = "local/*"
command = "mailbox"
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
maxring = 3
maxthr = 10
initial_concurrency = 1
`)
	var err error
	s.Do(func(now time.Time) { err = s.Core.Reconfigure(now, after) })
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Core.Gauges(s.Now, 0).Recipients; got != queued {
		t.Fatalf("%d recipients in core after reload, %d before", got, queued)
	}
	tv2, _ := s.Core.Thread(s.Now, "smtp", "a.test")
	if tv2.Window != tv.Window {
		t.Fatalf("window %d after reload, %d before", tv2.Window, tv.Window)
	}
	if n := s.Core.Agents(); n != 3 {
		t.Fatalf("%d agents right after raising maxring to 3, want 3", n)
	}
	ended := s.Core.Counters().AgentsEnded
	run(t, s, time.Minute)
	if p := s.Pending(); len(p) != 0 {
		t.Fatalf("pending after the reload's drain: %v", p)
	}
	for k, n := range s.Final() {
		if n != 1 {
			t.Fatalf("recipient %s has %d final outcomes", k, n)
		}
	}
	if s.Core.Counters().AgentsEnded != ended {
		t.Fatal("an agent whose command did not change was ended by the reload")
	}
}

func TestReconfigureRetiresAgentsWhoseCommandChanged(t *testing.T) {
	s := sim.New(cfg(t, smtp), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = 2 * time.Second
		return r
	}, 1)
	for i := 0; i < 4; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i))
	}
	run(t, s, time.Second)
	busy := s.Core.Agents()
	if busy == 0 {
		t.Fatal("no agent busy before the reload")
	}
	var err error
	s.Do(func(now time.Time) {
		err = s.Core.Reconfigure(now, cfg(t, strings.Replace(smtp, "sink -c smtp", "sink -c smtp -v", 1)))
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, s, time.Minute)
	if p := s.Pending(); len(p) != 0 {
		t.Fatalf("pending: %v", p)
	}
	if ended := s.Core.Counters().AgentsEnded; ended < int64(busy) {
		t.Fatalf("%d agents ended, want the %d that ran the old command", ended, busy)
	}
}

func TestReconfigureRefusesToStrandQueuedMail(t *testing.T) {
	s := sim.New(cfg(t, smtp), hang, 1)
	s.Enqueue("smtp/a.test/u")
	run(t, s, time.Second)
	before := fmt.Sprintf("%+v", s.Core.Rings(s.Now))
	var err error
	s.Do(func(now time.Time) {
		err = s.Core.Reconfigure(now, cfg(t, "[[clause]]\nselect = \"local/*\"\ncommand = \"x\"\n"))
	})
	if !errors.Is(err, core.ErrReload) || !strings.Contains(err.Error(), "smtp/a.test") {
		t.Fatalf("reload without a clause for queued mail: %v, want ErrReload naming smtp/a.test", err)
	}
	if after := fmt.Sprintf("%+v", s.Core.Rings(s.Now)); after != before {
		t.Fatalf("a refused reload changed the core:\n%s\n%s", before, after)
	}
}

func TestReconfigureLoweredMaxRingShrinksTheRing(t *testing.T) {
	s := sim.New(cfg(t, smtp), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}, 1)
	for i := 0; i < 20; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i))
	}
	run(t, s, 500*time.Millisecond)
	if s.Core.Agents() < 5 {
		t.Fatalf("%d agents, want many under maxring 10", s.Core.Agents())
	}
	var err error
	s.Do(func(now time.Time) {
		err = s.Core.Reconfigure(now, cfg(t, strings.Replace(smtp, "maxring = 10", "maxring = 2", 1)))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Check = true
	for s.Err() == nil && s.Now.Before(sim.Epoch.Add(5*time.Second)) && s.Step() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	working := 0
	for _, a := range s.Core.AgentViews() {
		if a.State != "ending" {
			working++
		}
	}
	if working > 2 {
		t.Fatalf("%d agents still working 4s after maxring went down to 2", working)
	}
	run(t, s, time.Minute)
	if p := s.Pending(); len(p) != 0 {
		t.Fatalf("pending: %v", p)
	}
}

func TestShapeCountsRecipientsByAge(t *testing.T) {
	s := sim.New(cfg(t, smtp), hang, 1)
	s.Enqueue("smtp/a.test/1", "smtp/a.test/2", "smtp/b.test/3")
	s.Now = s.Now.Add(7 * time.Minute)
	s.Enqueue("smtp/a.test/4")
	rows := s.Core.Shape(s.Now, []time.Duration{5 * time.Minute, 10 * time.Minute}, 10)
	got := fmt.Sprint(rows)
	want := "[{TOTAL 4 [1 3 0]} {a.test 3 [1 2 0]} {b.test 1 [0 1 0]}]"
	if got != want {
		t.Fatalf("shape %s, want %s", got, want)
	}
}

func TestReconfigureKeepsIdleAgents(t *testing.T) {
	s := sim.New(cfg(t, smtp), sim.Sink, 1)
	for i := 0; i < 3; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i))
	}
	run(t, s, 10*time.Second)
	idle := 0
	for _, a := range s.Core.AgentViews() {
		if a.State == "idle" {
			idle++
		}
	}
	if idle == 0 {
		t.Fatal("no idle agent before the reload")
	}
	spawned := s.Core.Counters().Spawned
	var err error
	s.Do(func(now time.Time) {
		err = s.Core.Reconfigure(now, cfg(t, "[[clause]]\nselect = \"local/*\"\ncommand = \"mailbox\"\n"+smtp))
	})
	if err != nil {
		t.Fatal(err)
	}
	after := 0
	for _, a := range s.Core.AgentViews() {
		if a.State == "idle" {
			after++
		}
	}
	if after != idle {
		t.Fatalf("%d idle agents after the reload, %d before", after, idle)
	}
	s.Enqueue("smtp/h9.test/u")
	run(t, s, 20*time.Second)
	if got := s.Core.Counters().Spawned; got != spawned {
		t.Fatalf("%d agents started after the reload: an idle one should have taken the job", got-spawned)
	}
	if p := s.Pending(); len(p) != 0 {
		t.Fatalf("pending: %v", p)
	}
}

// TestMessageLookupForms finds a message for WHY by its control file's
// path, its name and its inode number, and answers at once for one that
// is not in core, whatever form its id has.
func TestMessageLookupForms(t *testing.T) {
	s := sim.New(cfg(t, smtp), hang, 1)
	s.Add(&sim.Msg{Inum: 4242, Path: "Q/R/4242", Rcpts: []*sim.Rcpt{{Channel: "smtp", Host: "a.test", User: "u@a.test", Offset: 100, Status: ' '}}})
	for _, id := range []string{"Q/R/4242", "4242", " 4242 "} {
		if mv, err := s.Core.Message(s.Now, id); err != nil || mv.Path != "Q/R/4242" {
			t.Errorf("WHY %q: %v, %v", id, mv.Path, err)
		}
	}
	for _, id := range []string{"4243", "Q/R/4243", "R/4242", "nosuch", "Q/R/"} {
		if _, err := s.Core.Message(s.Now, id); !errors.Is(err, core.ErrNoMessage) {
			t.Errorf("WHY %q: %v, want ErrNoMessage", id, err)
		}
	}
}

// TestReconfigureMovesThreadsToTheirNewRings reloads a configuration that
// splits one ring in two while both its threads have work queued: each
// thread must be ranked, served and checked in the ring of its new key, not
// in the one it was in before (the core keeps a thread's ring on the thread).
func TestReconfigureMovesThreadsToTheirNewRings(t *testing.T) {
	const before = `
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
maxring = 1
`
	s := sim.New(cfg(t, before), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}, 1)
	for i := range 4 {
		s.Enqueue(fmt.Sprintf("smtp/a.test/u%d", i))
		s.Enqueue(fmt.Sprintf("smtp/b.test/u%d", i))
	}
	run(t, s, 1500*time.Millisecond)
	after := cfg(t, `
[[clause]]
select = "smtp/b.test"
command = "sink -c smtp"
maxring = 1

[[clause]]
select = "smtp/*"
command = "sink -c smtp"
maxring = 1
`)
	var err error
	s.Do(func(now time.Time) { err = s.Core.Reconfigure(now, after) })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Core.Check(s.Now); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	if n := len(s.Core.Rings(s.Now)); n != 2 {
		t.Fatalf("%d rings after the reload, want 2", n)
	}
	run(t, s, time.Minute)
	if p := s.Pending(); len(p) != 0 {
		t.Fatalf("pending after the reload's drain: %v", p)
	}
}

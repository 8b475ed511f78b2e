package core_test

import (
	"strings"
	"testing"
	"time"

	"zsched/core"
	"zsched/report"
	"zsched/sim"
)

// slowSink delivers every recipient after 10 s: jobs stay in flight long
// enough to be seen.
func slowSink(j sim.Job) sim.Response {
	st := make([]report.Status, len(j.Rcpts))
	for i := range st {
		st[i] = report.OK3
	}
	return sim.Response{Status: st, Delay: 10 * time.Second}
}

// TestBorrowedSessionsShown: with feed = "message", one agent attached to
// one destination takes its message's recipient on the other as a
// borrowed job. The other destination's window (1) is then full with no
// agent of its own: WHY says so in sessions and counts the borrowed job,
// the thread view, the agent view and the gauges count it apart.
func TestBorrowedSessionsShown(t *testing.T) {
	cfg, err := parseConfig(`
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
feed = "message"
maxring = 1
overfeed = 0
maxthr = 1
slow_start = false
`)
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(cfg, slowSink, 1)
	s.Check = true
	s.Enqueue("smtp/a.test/u", "smtp/b.test/u")
	waiting := s.Enqueue("smtp/b.test/v")
	var tv core.ThreadView
	found := false
	for !found {
		if !s.Step() {
			t.Fatal("the queue drained and no destination ever held a borrowed session")
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		tv, found = s.Core.Thread(s.Now, "smtp", "b.test")
		found = found && tv.Borrowed > 0
	}
	if tv.Busy != 1 || tv.Borrowed != 1 || len(tv.Agents) != 0 {
		t.Errorf("b.test: busy %d, borrowed %d, agents %v; want 1 session, a borrowed job, no agent", tv.Busy, tv.Borrowed, tv.Agents)
	}
	var inRings int
	for _, r := range s.Core.Rings(s.Now) {
		for _, x := range r.Threads {
			if x.Host == "b.test" {
				inRings = x.Borrowed
			}
		}
	}
	if inRings != 1 {
		t.Errorf("Rings: b.test borrowed %d, want 1", inRings)
	}
	avs := s.Core.AgentViews()
	if len(avs) != 1 || avs[0].Borrowed != 1 || avs[0].Host != "a.test" {
		t.Errorf("agents %+v, want one on a.test with one borrowed job", avs)
	}
	g := s.Core.Gauges(s.Now, 10)
	if g.Borrowed != 1 {
		t.Errorf("gauges: %d borrowed sessions, want 1", g.Borrowed)
	}
	for _, w := range g.Busiest {
		if w.Host == "b.test" && (w.Busy != 1 || w.Borrowed != 1) {
			t.Errorf("busiest: b.test busy %d borrowed %d, want 1 and 1", w.Busy, w.Borrowed)
		}
	}
	mv, err := s.Core.Message(s.Now, waiting.Path)
	if err != nil {
		t.Fatal(err)
	}
	why := mv.Vertices[0].Why
	const want = "destination concurrency window full: 1 of 1 sessions busy, 1 of them jobs borrowed by agents of other destinations"
	if why.Reason != core.ReasonWindow || why.String() != want {
		t.Errorf("WHY b.test/v: %v %q, want %q", why.Reason, why.String(), want)
	}
	if strings.Contains(why.String(), "agents busy") {
		t.Errorf("WHY counts a borrowed job as an agent: %q", why.String())
	}
	s.Run(time.Hour)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if g := s.Core.Gauges(s.Now, 10); g.Borrowed != 0 {
		t.Errorf("after the drain: %d borrowed sessions, want 0", g.Borrowed)
	}
}

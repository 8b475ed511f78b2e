package daemon

import (
	"strings"
	"testing"
)

// TestBorrowedSessionsInViews: with feed = "message", an agent attached
// to a.test (hanging on its jobs) is fed its message's recipient on b.test
// as well: a session of b.test that no agent of b.test holds. Every view
// an operator has counts it apart: the JSON (busy, borrowed, no pid), the
// thread report's line, SHOW COUNTERS, /metrics, and WHY for the next
// message to b.test, whose window (1) that borrowed job fills.
func TestBorrowedSessionsInViews(t *testing.T) {
	agents := bins.AgentsFor(t)
	e := startControlled(t, agents, `metrics_listen = "127.0.0.1:0"`, `
[[clause]]
select = "smtp/*"
command = ["{hang}", "-c", "smtp"]
feed = "message"
maxring = 1
overfeed = 1
maxthr = 1
slow_start = false
`)
	first := e.enqueue("smtp/a.test/u1@a.test", "smtp/b.test/u2@b.test")
	var q Queue
	var tb QueueThread
	e.waitFor("b.test's session borrowed by the agent of a.test", func() bool {
		q = e.queue()
		tb, _ = q.thread("b.test")
		return tb.Borrowed == 1
	})
	ta, _ := q.thread("a.test")
	if tb.Busy != 1 || len(tb.Pids) != 0 || ta.Busy != 1 || ta.Borrowed != 0 || len(ta.Pids) != 1 {
		t.Fatalf("a.test %+v\nb.test %+v\nwant b.test's one session a borrowed job and a.test's its agent", ta, tb)
	}
	if len(q.Agents) != 1 || q.Agents[0].Jobs != 2 || q.Agents[0].Borrowed != 1 {
		t.Fatalf("agents %+v, want one with 2 jobs, 1 borrowed", q.Agents)
	}
	whys := e.why(first)
	if len(whys) != 2 || !strings.HasPrefix(whys[1], "running: being delivered by agent ") ||
		!strings.Contains(whys[1], ", attached to a.test, on a session of this destination it borrowed (pid ") ||
		strings.Contains(whys[0], "borrowed") {
		t.Errorf("WHY of the message: %q, want b.test's recipient running on a session its agent of a.test borrowed", whys)
	}
	// `scheduler queue` says the same of the in-flight recipient.
	listing := strings.Join(e.ok("SHOW QUEUE MESSAGES").Lines, "\n")
	if !strings.Contains(listing, "u2@b.test\tin flight\tattempts=1\t(being delivered by pid ") ||
		!strings.Contains(listing, ", attached to a.test, on a session of this destination it borrowed)") {
		t.Errorf("SHOW QUEUE MESSAGES:\n%s\nwant u2@b.test in flight on a session its agent of a.test borrowed", listing)
	}
	waiting := e.enqueue("smtp/b.test/u3@b.test")
	got := e.waitWhy(waiting, "window")
	if want := "window: destination concurrency window full: 1 of 1 sessions busy, 1 of them jobs borrowed by agents of other destinations"; got != want {
		t.Errorf("WHY %q, want %q", got, want)
	}
	line := ""
	for _, l := range e.ok("SHOW QUEUE THREADS").Lines {
		if strings.Contains(l, "smtp/b.test/") {
			line = l
		}
	}
	if !strings.Contains(line, " busy=1 borrowed=1 ") || strings.Contains(line, "P={") {
		t.Errorf("thread report's b.test line %q: want busy=1 borrowed=1 and no agent", line)
	}
	counters := strings.Join(e.ok("SHOW COUNTERS").Lines, "\n")
	if !strings.Contains(counters, "\nsessions_borrowed 1\n") {
		t.Errorf("SHOW COUNTERS without sessions_borrowed 1:\n%s", counters)
	}
	m := scrape(t, "http://"+e.d.MetricsAddr()+"/metrics")
	for name, want := range map[string]float64{
		"zsched_sessions_borrowed":                                  1,
		`zsched_destination_borrowed{channel="smtp",host="b.test"}`: 1,
		`zsched_destination_borrowed{channel="smtp",host="a.test"}`: 0,
		`zsched_destination_busy{channel="smtp",host="b.test"}`:     1,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}

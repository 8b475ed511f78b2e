package core_test

import (
	"fmt"
	"math/rand"
	"os/exec"
	"strings"
	"testing"
	"time"

	"zsched/config"
	"zsched/report"
	"zsched/sim"
)

func cfg(t testing.TB, doc string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n"+doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

const smtp = `
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
interval = "1m"
retries = [1, 2, 4]
maxring = 10
maxthr = 3
initial_concurrency = 2
`

func run(t *testing.T, s *sim.Sim, until time.Duration) {
	t.Helper()
	s.Check = true
	s.Run(until)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestDrainThousandsOfDestinations(t *testing.T) {
	s := sim.New(cfg(t, smtp), sim.Sink, 1)
	const msgs, hosts = 3000, 2000
	for i := 0; i < msgs; i++ {
		s.Enqueue(
			fmt.Sprintf("smtp/h%d.test/a%d", i%hosts, i),
			fmt.Sprintf("smtp/h%d.test/b%d", (i*7)%hosts, i),
			fmt.Sprintf("smtp/h%d.test/c%d", (i*7)%hosts, i))
	}
	s.Run(time.Hour)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%d recipients never delivered, e.g. %v", len(p), p[0])
	}
	if len(s.Completed) != msgs {
		t.Fatalf("completed %d of %d messages", len(s.Completed), msgs)
	}
	for k, n := range s.Final() {
		if n != 1 {
			t.Fatalf("recipient %s has %d final outcomes", k, n)
		}
	}
	if got := len(s.Final()); got != msgs*3 {
		t.Fatalf("%d final outcomes, want %d", got, msgs*3)
	}
	if s.PeakAgents > 10 {
		t.Fatalf("peak %d agents over maxring 10", s.PeakAgents)
	}
}

func TestInvariantsHoldAfterEveryEvent(t *testing.T) {
	// A mixed, randomized workload with the invariant check after every
	// event: sinks, deferrals, site failures, crashes and hangs.
	c := cfg(t, smtp+`jobtimeout = "5m"
`)
	rng := rand.New(rand.NewSource(7))
	behave := func(j sim.Job) sim.Response {
		r := sim.Response{Delay: time.Duration(rng.Intn(3000)) * time.Millisecond}
		switch x := rng.Intn(100); {
		case x < 5:
			r.Crash = true
		case x < 7:
			r.Hang = true
		case x < 15 && strings.HasPrefix(j.Host, "bad"):
			for range j.Rcpts {
				r.Status = append(r.Status, report.DeferAll)
			}
			return r
		}
		for range j.Rcpts {
			st := report.OK3
			if rng.Intn(10) == 0 {
				st = report.Deferred
			}
			r.Status = append(r.Status, st)
		}
		return r
	}
	s := sim.New(c, behave, 3)
	s.Check = true
	for i := 0; i < 400; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u%d", i%37, i), fmt.Sprintf("smtp/bad%d.test/v%d", i%5, i))
		if i%20 == 0 {
			s.Run(sim.Epoch.Sub(sim.Epoch) + s.Now.Sub(sim.Epoch) + 30*time.Second)
		}
	}
	s.Run(48 * time.Hour)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%d recipients left pending, e.g. %s", len(p), p[0])
	}
}

func TestLimitsAreRespected(t *testing.T) {
	c := cfg(t, `
[[clause]]
select = "smtp/*"
command = "sink"
maxring = 4
maxthr = 2
initial_concurrency = 2
`)
	s := sim.New(c, func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}, 1)
	for i := 0; i < 200; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u%d", i%3, i))
	}
	run(t, s, time.Hour)
	if s.PeakAgents != 4 {
		t.Fatalf("peak agents %d, want maxring 4", s.PeakAgents)
	}
	for h, n := range s.PeakBusy {
		if n > 2 {
			t.Fatalf("host %s had %d agents at once, window is 2", h, n)
		}
	}
}

func TestTransientDeferralFollowsRetrySchedule(t *testing.T) {
	tries := 0
	s := sim.New(cfg(t, smtp), func(j sim.Job) sim.Response {
		tries++
		st := report.Deferred
		if tries == 4 {
			st = report.OK3
		}
		return sim.Response{Status: []report.Status{st}}
	}, 1)
	s.Enqueue("smtp/a.test/x")
	run(t, s, 24*time.Hour)
	var at []time.Duration
	for _, j := range s.JobLog {
		at = append(at, j.At.Sub(sim.Epoch))
	}
	// retries = [1 2 4] × 1m, no skew: 0, +1m, +2m, +4m.
	want := []time.Duration{0, time.Minute, 3 * time.Minute, 7 * time.Minute}
	if fmt.Sprint(at) != fmt.Sprint(want) {
		t.Fatalf("attempts at %v, want %v", at, want)
	}
}

func TestSiteFailureBacksOffTheWholeThread(t *testing.T) {
	failing := true
	s := sim.New(cfg(t, smtp), func(j sim.Job) sim.Response {
		if failing {
			// As smtp does on a refused connection: retryat for all but
			// the first recipient, which gets deferall (zmailer-ta-observed O18).
			st := []report.Status{report.RetryAt}
			for range j.Rcpts[1:] {
				st = append(st, report.DeferAll)
			}
			return sim.Response{Status: st, Retry: "+300"}
		}
		return sim.Sink(j)
	}, 1)
	for i := 0; i < 10; i++ {
		s.Enqueue(fmt.Sprintf("smtp/down.test/u%d", i))
	}
	s.Check = true
	for s.Now.Sub(sim.Epoch) < 30*time.Second && s.Step() {
	}
	fed := len(s.JobLog)
	// A new arrival must not restart a thread backing off.
	s.Enqueue("smtp/down.test/late")
	for s.Now.Sub(sim.Epoch) < 2*time.Minute && s.Step() {
	}
	if len(s.JobLog) != fed {
		t.Fatalf("thread fed %d more jobs while backing off", len(s.JobLog)-fed)
	}
	// The window is 2: at most 2 jobs went out before the failure stopped feeding.
	if fed > 2 {
		t.Fatalf("%d jobs fed to a failing site, want at most the window (2)", fed)
	}
	failing = false
	run(t, s, time.Hour)
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("pending after recovery: %v", p)
	}
	if first := s.JobLog[fed].At.Sub(sim.Epoch); first < 300*time.Second {
		t.Fatalf("retried at %v, before retryat +300", first)
	}
	for _, o := range s.Outcomes {
		if o.Status == "deferall" && o.Next.Sub(sim.Epoch) < 300*time.Second {
			t.Fatalf("outcome %+v: next retry before retryat +300", o)
		}
	}
}

func TestCrashedAgentLosesNothing(t *testing.T) {
	n := 0
	s := sim.New(cfg(t, smtp), func(j sim.Job) sim.Response {
		n++
		r := sim.Sink(j)
		if n%3 == 0 {
			r.Status = r.Status[:len(r.Status)/2]
			r.Crash = true
		}
		return r
	}, 1)
	for i := 0; i < 60; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/a%d", i%4, i), fmt.Sprintf("smtp/h%d.test/b%d", i%4, i))
	}
	run(t, s, 24*time.Hour)
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%d lost, e.g. %s", len(p), p[0])
	}
	for k, c := range s.Final() {
		if c != 1 {
			t.Fatalf("%s: %d final outcomes", k, c)
		}
	}
}

func TestHungAgentIsKilledAfterJobTimeout(t *testing.T) {
	hang := true
	s := sim.New(cfg(t, smtp+`jobtimeout = "2m"
`), func(j sim.Job) sim.Response {
		if hang {
			hang = false
			return sim.Response{Hang: true}
		}
		return sim.Sink(j)
	}, 1)
	s.Enqueue("smtp/a.test/x")
	run(t, s, time.Hour)
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("pending: %v", p)
	}
	if k := s.Core.Counters().Killed; k != 1 {
		t.Fatalf("killed %d agents, want 1", k)
	}
	if d := s.JobLog[1].At.Sub(s.JobLog[0].At); d < 2*time.Minute {
		t.Fatalf("job refed after %v, before the 2m job timeout", d)
	}
}

func TestIdleAgentsAreReusedThenReaped(t *testing.T) {
	s := sim.New(cfg(t, smtp+`idlemax = "5m"
`), sim.Sink, 1)
	s.Enqueue("smtp/a.test/x")
	s.Advance(time.Minute)
	s.Enqueue("smtp/a.test/y")
	s.Advance(2 * time.Minute)
	if sp := s.Core.Counters().Spawned; sp != 1 {
		t.Fatalf("spawned %d agents, want the idle one reused", sp)
	}
	s.Advance(time.Hour)
	if s.Core.Agents() != 0 {
		t.Fatalf("%d agents alive after idlemax", s.Core.Agents())
	}
}

func TestOverfeedKeepsLinesOutstanding(t *testing.T) {
	s := sim.New(cfg(t, `
[[clause]]
select = "smtp/*"
command = "sink"
maxring = 1
maxthr = 1
initial_concurrency = 1
overfeed = 3
`), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}, 1)
	for i := 0; i < 10; i++ {
		s.Enqueue(fmt.Sprintf("smtp/a.test/u%d", i))
	}
	run(t, s, time.Hour)
	// With overfeed 3, four lines go out at once before the first answer.
	if len(s.JobLog) < 4 || !s.JobLog[3].At.Equal(s.JobLog[0].At) {
		t.Fatalf("first four job lines not written together: %v", s.JobLog[:4])
	}
}

func TestUnmatchedChannelWaitsAndIsNotLost(t *testing.T) {
	s := sim.New(cfg(t, smtp), sim.Sink, 1)
	s.Enqueue("smtp/a.test/x", "uucp/b.test/y")
	run(t, s, time.Hour)
	if got := s.Pending(); len(got) != 1 || !strings.HasSuffix(got[0], ":y") {
		t.Fatalf("pending %v, want only the unroutable recipient", got)
	}
	if len(s.Completed) != 0 {
		t.Fatal("message completed with an unroutable recipient pending")
	}
}

// TestCoreDoesNoIO keeps the deciding packages free of I/O and the wall
// clock (shared/STYLE.md).
func TestCoreDoesNoIO(t *testing.T) {
	pkgs := []string{"zsched/vertex", "zsched/thread", "zsched/ring", "zsched/core", "zsched/report", "zsched/sim", "zsched/admission", "zsched/statefile", "zsched/mailq"}
	out, err := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}}: {{join .Imports \" \"}} | {{join .Deps \" \"}}"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, rest, _ := strings.Cut(line, ": ")
		imports, deps, _ := strings.Cut(rest, " | ")
		for _, d := range strings.Fields(deps) {
			switch d {
			case "os/exec", "net", "zsched/agent", "zsched/ctlfile", "zsched/daemon":
				t.Errorf("%s depends on %s", name, d)
			}
		}
		for _, i := range strings.Fields(imports) {
			if i == "os" || i == "syscall" {
				t.Errorf("%s imports %s", name, i)
			}
		}
	}
	src, err := exec.Command("grep", "-rnE", `time\.(Now|Sleep|After|Tick|Since)\(|rand\.(Intn|Int|Float64|Shuffle|Perm|Seed)\(`,
		"../vertex", "../thread", "../ring", "../core", "../report", "../admission", "../statefile", "../mailq", "--include=*.go", "--exclude=*_test.go").Output()
	if err == nil && len(src) > 0 {
		t.Errorf("wall clock or global rand in the core:\n%s", src)
	}
}

// TestOnlyRingSetsVertexJobs: a vertex's ring job is package ring's
// back-pointer (vertex.Vertex.SetJob); the compiler cannot keep the other
// packages from calling the exported setter, this test does.
func TestOnlyRingSetsVertexJobs(t *testing.T) {
	out, err := exec.Command("grep", "-rn", "--include=*.go", "--exclude=*_test.go", `\.SetJob(`, "..").Output()
	if err != nil && len(out) > 0 {
		t.Fatalf("grep: %v", err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !strings.HasPrefix(l, "../ring/") && !strings.HasPrefix(l, "../vertex/") {
			t.Errorf("only package ring sets a vertex's job: %s", l)
		}
	}
}

func TestDispatchLatencyCountsTheWaitForAnAgent(t *testing.T) {
	s := sim.New(cfg(t, `
[[clause]]
select = "smtp/*"
command = "sink"
maxring = 1
`), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = 10 * time.Second
		return r
	}, 1)
	for i := 0; i < 4; i++ {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i))
	}
	run(t, s, time.Hour)
	l := s.Core.Latency()
	// One agent serves four due vertices 10 s apart: waits of 0, 10, 20, 30 s.
	if l.Count() != 4 || l.Mean() != 15*time.Second {
		t.Fatalf("%d dispatches, mean %v; want 4 and 15s", l.Count(), l.Mean())
	}
	if p := l.Quantile(1); p < 30*time.Second || p > 36*time.Second {
		t.Fatalf("max latency bucket %v, want about 30s", p)
	}
	if p := l.Quantile(0.25); p > time.Microsecond {
		t.Fatalf("p25 %v, want the first, immediate dispatch", p)
	}
}

package core_test

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"zsched/core"
	"zsched/sim"
)

// affinityRun drains 300 messages × 4 recipients, each recipient on another
// of 20 destinations (bench's workload, smaller), through agents that take
// a second a recipient, under feed = feed. It fails the test if a
// destination ever has more sessions (agents attached and borrowed jobs)
// than its window, and returns each agent's job lines' messages in order.
func affinityRun(t *testing.T, feed string) map[int][]string {
	t.Helper()
	cfg, err := parseConfig(fmt.Sprintf(`
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
feed = %q
maxring = 4
overfeed = 3
maxthr = 2
initial_concurrency = 2
slow_start = false
`, feed))
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(cfg, func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}, 1)
	s.Check = true
	over := 0
	s.OnReady = func(*core.Ready) {
		for _, w := range s.Core.Gauges(s.Now, 1000).Busiest {
			if w.Busy > w.Window {
				if over++; over <= 5 {
					t.Errorf("%s at %s: %s/%s has %d sessions, window %d", feed, sim.At(s.Now), w.Channel, w.Host, w.Busy, w.Window)
				}
			}
		}
	}
	const msgs, rcpts, domains = 300, 4, 100
	for i := range msgs {
		var to []string
		for k := range rcpts {
			to = append(to, fmt.Sprintf("smtp/d%d.test/u%d", (i+(domains/4)*k)%domains, k))
		}
		s.Enqueue(to...)
	}
	s.Run(24 * time.Hour)
	if err := s.Err(); err != nil {
		t.Fatalf("%s: %v", feed, err)
	}
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%s: %d recipients left, e.g. %s", feed, len(p), p[0])
	}
	lines := make(map[int][]string)
	for _, j := range s.JobLog {
		lines[j.Agent] = append(lines[j.Agent], j.Path)
	}
	return lines
}

// runs returns the number of job lines and of runs of one message among
// them, over all agents, and the messages whose lines to one agent are
// split over several runs.
func runs(lines map[int][]string) (jobs, n, split int) {
	for _, ls := range lines {
		seen := make(map[string]bool)
		for i, p := range ls {
			jobs++
			if i > 0 && ls[i-1] == p {
				continue
			}
			n++
			if seen[p] {
				split++
			}
			seen[p] = true
		}
	}
	return jobs, n, split
}

// With feed = "message" an agent's job lines come in runs of one message,
// nearly all a message's recipients (4) long, and no destination takes more
// sessions than its window; fed from its thread, an agent's consecutive
// jobs are different messages.
func TestFeedMessageRuns(t *testing.T) {
	jobs, n, split := runs(affinityRun(t, "message"))
	mean := float64(jobs) / float64(n)
	t.Logf(`feed = "message": %d job lines in %d runs of one message (mean %.2f), %d messages split`, jobs, n, mean, split)
	if mean < 3.5 {
		t.Errorf(`feed = "message": mean run %.2f job lines, want at least 3.5 of 4`, mean)
	}
	if split > n/20 {
		t.Errorf(`feed = "message": %d of %d runs continue a message the agent had before`, split, n)
	}

	jobs, n, _ = runs(affinityRun(t, "thread"))
	mean = float64(jobs) / float64(n)
	t.Logf(`feed = "thread": %d job lines in %d runs (mean %.2f)`, jobs, n, mean)
	if mean > 1.1 {
		t.Errorf(`feed = "thread": mean run %.2f job lines: the default feed changed`, mean)
	}
}

// TestFeedMessageUnderFaults drives feed = "message" through agents that
// deliver, defer, fail the site, crash and hang, with the core's invariant
// check (every thread's sessions: its agents and the jobs borrowed from
// it) after every event, and sees every session given back at the end.
func TestFeedMessageUnderFaults(t *testing.T) {
	cfg, err := parseConfig(`
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
feed = "message"
maxring = 3
overfeed = 4
maxthr = 3
interval = "1m"
retries = [1, 2]
jobtimeout = "2m"
`)
	if err != nil {
		t.Fatal(err)
	}
	for seed := int64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewSource(seed))
		s := sim.New(cfg, sim.Troubled(rng, sim.Odds{Defer: 10, SiteFail: 8, Crash: 3, Hang: 2}), seed)
		s.Check = true
		for i := range 120 {
			var to []string
			for k := range 1 + i%4 {
				to = append(to, fmt.Sprintf("smtp/d%d.test/u%d", (i+3*k)%8, k))
			}
			s.Enqueue(to...)
		}
		s.Run(6 * time.Hour)
		if err := s.Err(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if p := s.Pending(); len(p) > 0 {
			t.Errorf("seed %d: %d recipients left, e.g. %s", seed, len(p), p[0])
		}
		for _, w := range s.Core.Gauges(s.Now, 100).Busiest {
			if w.Busy != 0 {
				t.Errorf("seed %d: %s/%s still counts %d sessions", seed, w.Channel, w.Host, w.Busy)
			}
		}
	}
}

// A message to more destinations than feedPeer looks at in one call is
// fed whole to one agent with room for it, in one run.
func TestFeedMessageManyDestinations(t *testing.T) {
	cfg, err := parseConfig(`
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
feed = "message"
maxring = 1
overfeed = 300
slow_start = false
`)
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(cfg, sim.Sink, 1)
	s.Check = true
	var to []string
	for d := range 200 {
		to = append(to, fmt.Sprintf("smtp/d%d.test/u", d))
	}
	s.Enqueue(to...)
	s.Enqueue("smtp/d0.test/v", "smtp/d1.test/v")
	s.Run(time.Hour)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	jobs, n, split := runs(map[int][]string{0: pathsOf(s.JobLog)})
	if jobs != 202 || n != 2 || split != 0 {
		t.Errorf("%d job lines in %d runs of one message (%d split), want 202 in 2", jobs, n, split)
	}
}

func pathsOf(log []sim.JobLine) []string {
	var ps []string
	for _, j := range log {
		ps = append(ps, j.Path)
	}
	return ps
}

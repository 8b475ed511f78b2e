package core_test

import (
	"fmt"
	"testing"
	"time"

	"zsched/config"
	"zsched/core"
	"zsched/report"
	"zsched/sim"
	"zsched/thread"
)

const feedbackClause = `
[[clause]]
select = "smtp/*"
command = "sink"
interval = "10m"
retries = [1, 2, 3]
maxring = 20
maxthr = 20
initial_concurrency = 5
`

func feedbackConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n"+feedbackClause+extra))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refuse answers a job as a server that hangs up with 421 at the greeting.
func refuse(j sim.Job) sim.Response {
	st := make([]report.Status, len(j.Rcpts))
	for i := range st {
		st[i] = report.DeferAll
	}
	return sim.Response{Status: st, Text: "421 too busy"}
}

func dest(s *sim.Sim, host string) (core.Destination, bool) {
	for _, d := range s.Core.Destinations(s.Now) {
		if d.Host == host {
			return d, true
		}
	}
	return core.Destination{}, false
}

// checkAllDelivered asserts nothing was lost: every recipient delivered,
// with exactly one final outcome.
func checkAllDelivered(t *testing.T, s *sim.Sim, rcpts int) {
	t.Helper()
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%d recipients never delivered, e.g. %s", len(p), p[0])
	}
	f := s.Final()
	if len(f) != rcpts {
		t.Fatalf("%d recipients with a final outcome, want %d", len(f), rcpts)
	}
	for k, n := range f {
		if n != 1 {
			t.Fatalf("recipient %s has %d final outcomes", k, n)
		}
	}
}

func TestDeadDestinationWaitsForItsRetryTimeThenRevives(t *testing.T) {
	up := sim.Epoch.Add(25 * time.Minute) // the site refuses everything before this
	var s *sim.Sim
	s = sim.New(feedbackConfig(t, ""), func(j sim.Job) sim.Response {
		if s.Now.Before(up) {
			return refuse(j)
		}
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}, 1)
	s.Check = true
	const msgs = 40
	for i := 0; i < msgs; i++ {
		s.Enqueue(fmt.Sprintf("smtp/down.test/u%d", i), fmt.Sprintf("smtp/down.test/v%d", i))
	}

	// Each death: the jobs fed just before it, then none until DeadUntil,
	// when the whole initial window (not a single probe) is tried again.
	var deaths []core.Destination
	fedAt := func(at time.Time) int {
		n := 0
		for _, j := range s.JobLog {
			if j.At.Equal(at) {
				n++
			}
		}
		return n
	}
	for s.Now.Before(up) && s.Step() {
		d, ok := dest(s, "down.test")
		if !ok || d.Window.Concurrency != 0 {
			continue
		}
		if len(deaths) > 0 && deaths[len(deaths)-1].DeadUntil.Equal(d.DeadUntil) {
			continue
		}
		deaths = append(deaths, d)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(deaths) < 2 {
		t.Fatalf("destination died %d times while refusing for 25 minutes, want it dead, retried, dead again", len(deaths))
	}
	for i, d := range deaths {
		died := d.Updated
		var lastBefore, firstAfter time.Time
		for _, j := range s.JobLog {
			if !j.At.After(died) {
				lastBefore = j.At
			} else if firstAfter.IsZero() {
				firstAfter = j.At
			}
		}
		if !lastBefore.Equal(died) {
			t.Fatalf("death %d at %v: last job fed at %v", i, died.Sub(sim.Epoch), lastBefore.Sub(sim.Epoch))
		}
		if !d.DeadUntil.After(died) {
			t.Fatalf("death %d: dead until %v, not after its death at %v", i, d.DeadUntil, died)
		}
		if !firstAfter.IsZero() && firstAfter.Before(d.DeadUntil) {
			t.Fatalf("death %d: a job fed at %v, before the retry time %v", i, firstAfter.Sub(sim.Epoch), d.DeadUntil.Sub(sim.Epoch))
		}
		if i+1 < len(deaths) {
			if !firstAfter.Equal(d.DeadUntil) {
				t.Fatalf("death %d: first job after it at %v, want at the retry time %v", i, firstAfter.Sub(sim.Epoch), d.DeadUntil.Sub(sim.Epoch))
			}
			if n := fedAt(d.DeadUntil); n < 5 {
				t.Fatalf("at the retry time %d jobs were fed, want the initial window of 5", n)
			}
		}
		// One pseudo-cohort of failures, give or take the agents in
		// flight: never more than two windows' worth of jobs per death.
		if n := fedAt(lastBefore); n > 10 {
			t.Fatalf("death %d: %d jobs fed to a refusing site", i, n)
		}
	}
	if later := deaths[1].DeadUntil.Sub(deaths[1].Updated); later <= deaths[0].DeadUntil.Sub(deaths[0].Updated) {
		t.Fatalf("second death backs off %v, not longer than the first (%v)", later, deaths[0].DeadUntil.Sub(deaths[0].Updated))
	}

	s.Run(24 * time.Hour)
	checkAllDelivered(t, s, 2*msgs)
	if d, ok := dest(s, "down.test"); ok && d.Window.Concurrency == 0 {
		t.Fatalf("destination still dead after delivering: %+v", d)
	}
}

func TestInFlightSuccessRevivesADeadDestination(t *testing.T) {
	// The first job is a slow success; every other job before 30 s is
	// refused, which kills the destination. The slow one's success at 1 m
	// revives it long before its 10 m retry time.
	var s *sim.Sim
	// Without slow start: the slow job and the refused ones in flight at once.
	s = sim.New(feedbackConfig(t, "slow_start = false"), func(j sim.Job) sim.Response {
		if j.Msg.Inum == 1001 {
			r := sim.Sink(j)
			r.Delay = time.Minute
			return r
		}
		if s.Now.Before(sim.Epoch.Add(30 * time.Second)) {
			return refuse(j)
		}
		return sim.Sink(j)
	}, 1)
	s.Check = true
	for i := 0; i < 20; i++ {
		s.Enqueue(fmt.Sprintf("smtp/flaky.test/u%d", i))
	}
	died := false
	for s.Now.Before(sim.Epoch.Add(time.Minute)) && s.Step() {
		if d, ok := dest(s, "flaky.test"); ok && d.Window.Concurrency == 0 {
			died = true
		}
	}
	if !died {
		t.Fatal("the destination never died")
	}
	s.Run(time.Minute + time.Second)
	d, _ := dest(s, "flaky.test")
	if d.Window.Concurrency == 0 {
		t.Fatal("a success did not revive the dead destination")
	}
	revivedFeed := 0
	for _, j := range s.JobLog {
		if j.At.Equal(sim.Epoch.Add(time.Minute)) {
			revivedFeed++
		}
	}
	if revivedFeed == 0 {
		t.Fatal("nothing fed when the success revived the destination")
	}
	s.Run(24 * time.Hour)
	checkAllDelivered(t, s, 20)
}

func TestSiteFailureShrinksTheWindowWithoutStopping(t *testing.T) {
	// A server that takes 2 sessions and refuses the rest: the window comes
	// down to about 2 and delivery goes on; the destination never dies and
	// no recipient waits for a thread back-off.
	const limit = 2
	var s *sim.Sim
	var ends []time.Time
	s = sim.New(feedbackConfig(t, ""), func(j sim.Job) sim.Response {
		open := ends[:0]
		for _, e := range ends {
			if e.After(s.Now) {
				open = append(open, e)
			}
		}
		ends = open
		if len(ends) >= limit {
			return refuse(j)
		}
		d := time.Second + time.Duration(len(s.JobLog)%7)*time.Millisecond
		ends = append(ends, s.Now.Add(d))
		r := sim.Sink(j)
		r.Delay = d
		return r
	}, 1)
	s.Check = true
	for i := 0; i < 200; i++ {
		s.Enqueue(fmt.Sprintf("smtp/small.test/u%d", i))
	}
	var windows []int
	for s.Now.Before(sim.Epoch.Add(5*time.Minute)) && s.Step() {
		if d, ok := dest(s, "small.test"); ok {
			windows = append(windows, d.Window.Concurrency)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	// Two sessions of about a second: every recipient has had its first
	// attempt well within five minutes, and most were delivered by it (the
	// refused ones wait for their own retry time, as Postfix defers them).
	first := map[int64]bool{}
	delivered := 0
	for _, o := range s.Outcomes {
		first[o.Inum] = true
		if o.Status == "ok3" {
			delivered++
		}
	}
	if len(first) != 200 || delivered < 120 {
		t.Fatalf("in 5 minutes %d of 200 recipients attempted, %d delivered", len(first), delivered)
	}
	if d, _ := dest(s, "small.test"); d.DeadUntil.After(sim.Epoch) {
		t.Fatalf("the destination was declared dead: %+v", d)
	}
	for _, w := range windows[len(windows)/2:] {
		if w == 0 || w > limit+2 {
			t.Fatalf("window %d in the steady state against a %d-session server (all %v)", w, limit, windows[len(windows)/2:])
		}
	}
	s.Run(24 * time.Hour)
	checkAllDelivered(t, s, 200)
}

func TestLearnedWindowOutlivesItsThread(t *testing.T) {
	s := sim.New(feedbackConfig(t, "slow_start = false"), sim.Sink, 1)
	s.Check = true
	// 1/N from 5: five successes make 6.
	for i := 0; i < 5; i++ {
		s.Enqueue(fmt.Sprintf("smtp/warm.test/u%d", i))
		s.Run(s.Now.Sub(sim.Epoch) + time.Second)
	}
	d, ok := dest(s, "warm.test")
	if !ok || d.Window.Concurrency != 6 {
		t.Fatalf("after 5 deliveries the learned state is %+v (known %v), want window 6", d, ok)
	}
	if s.Core.Messages() != 0 {
		t.Fatal("queue not empty")
	}
	// The thread is gone; its window is not. A new burst runs 6 wide.
	s.Behavior = func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		return r
	}
	s.Now = s.Now.Add(time.Minute)
	burst := s.Now
	for i := 0; i < 30; i++ {
		s.Enqueue(fmt.Sprintf("smtp/warm.test/b%d", i))
	}
	s.Run(s.Now.Sub(sim.Epoch) + time.Hour)
	checkAllDelivered(t, s, 35)
	started := 0
	for _, j := range s.JobLog {
		if j.At.Equal(burst) {
			started++
		}
	}
	if started != 6 {
		t.Fatalf("new burst started %d deliveries at once, want the learned window 6", started)
	}
	d, ok = dest(s, "warm.test")
	if !ok {
		t.Fatal("learned state lost when the burst's thread went away")
	}
	// An hour after its last use the state is forgotten.
	s.Now = d.Updated.Add(61 * time.Minute)
	if d, ok := dest(s, "warm.test"); ok {
		t.Fatalf("state kept %v after its last use: %+v", s.Now.Sub(d.Updated), d)
	}
}

func TestRestoredDeadDestinationWaits(t *testing.T) {
	s := sim.New(feedbackConfig(t, ""), sim.Sink, 1)
	s.Check = true
	until := sim.Epoch.Add(7 * time.Minute)
	n := s.Core.Learn(s.Now, []core.Destination{
		{Channel: "smtp", Host: "dead.test", Window: thread.WindowState{}, DeadUntil: until, Updated: s.Now},
		{Channel: "smtp", Host: "old.test", Window: thread.WindowState{Concurrency: 9}, Updated: s.Now.Add(-3 * time.Hour)},
	})
	if n != 1 {
		t.Fatalf("restored %d destinations, want 1 (the other is stale)", n)
	}
	for i := 0; i < 10; i++ {
		s.Enqueue(fmt.Sprintf("smtp/dead.test/u%d", i))
	}
	s.Run(24 * time.Hour)
	checkAllDelivered(t, s, 10)
	if first := s.JobLog[0].At; !first.Equal(until) {
		t.Fatalf("first job to a destination restored dead until %v fed at %v", until.Sub(sim.Epoch), first.Sub(sim.Epoch))
	}
}

package core_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"zsched/sim"
	"zsched/window"
)

// TestLocalBookDecidesAsOwnWindows: a core whose windows live in a
// window.Local book (every answer at once) schedules exactly as one that
// keeps them in its threads: the same job lines at the same times, the
// same outcomes, the same learned windows. The workloads cover 1/N feedback
// and a learned ceiling against a limiter, and a destination that dies,
// waits for its retry time and revives.
func TestLocalBookDecidesAsOwnWindows(t *testing.T) {
	down := func(s *sim.Sim) sim.Behavior {
		up := sim.Epoch.Add(25 * time.Minute)
		return func(j sim.Job) sim.Response {
			if s.Now.Before(up) {
				return refuse(j)
			}
			r := sim.Sink(j)
			r.Delay = time.Second
			return r
		}
	}
	for _, tc := range []struct {
		name     string
		behavior func(*sim.Sim) sim.Behavior
		host     string
	}{
		{"limiter", limited5, "lim.test"},
		{"dead and revived", down, "down.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(book bool) *sim.Sim {
				s := sim.New(feedbackConfig(t, ""), nil, 1)
				if book {
					s.Core.UseBook(window.NewLocal())
				}
				s.Behavior = tc.behavior(s)
				s.Check = true
				for i := 0; i < 200; i++ {
					s.Enqueue(fmt.Sprintf("smtp/%s/u%d", tc.host, i))
				}
				s.Run(24 * time.Hour)
				checkAllDelivered(t, s, 200)
				return s
			}
			own, booked := run(false), run(true)
			if len(own.JobLog) != len(booked.JobLog) {
				t.Fatalf("%d job lines with its own windows, %d with a local book", len(own.JobLog), len(booked.JobLog))
			}
			for i := range own.JobLog {
				if own.JobLog[i] != booked.JobLog[i] {
					t.Fatalf("job line %d: %+v with its own windows, %+v with a local book", i, own.JobLog[i], booked.JobLog[i])
				}
			}
			if a, b := own.Core.Destinations(own.Now), booked.Core.Destinations(booked.Now); !reflect.DeepEqual(a, b) {
				t.Fatalf("learned state:\n own  %+v\n book %+v", a, b)
			}
			if own.PeakBusy[tc.host] != booked.PeakBusy[tc.host] {
				t.Fatalf("peak sessions %d own, %d booked", own.PeakBusy[tc.host], booked.PeakBusy[tc.host])
			}
		})
	}
}

// TestOutboxAnswersLater: with a book that answers later (an Outbox in
// front of a Local, as the daemon puts one in front of Redis), nothing
// starts before the grant, every session holds a lease, and the queue
// drains with the window respected.
func TestOutboxAnswersLater(t *testing.T) {
	s := sim.New(feedbackConfig(t, ""), nil, 1)
	s.Behavior = limited5(s)
	out := &window.Outbox{}
	local := window.NewLocal()
	s.Core.UseBook(out)
	s.Check = true
	for i := 0; i < 100; i++ {
		s.Enqueue(fmt.Sprintf("smtp/lim.test/u%d", i))
	}
	if len(s.JobLog) != 0 {
		t.Fatalf("%d jobs fed before the book answered", len(s.JobLog))
	}
	reqs := out.Take()
	if len(reqs) != 1 || reqs[0].Op != window.Acquire {
		t.Fatalf("requests before any answer: %+v, want one acquire", reqs)
	}
	pending := reqs
	// The book's answers come back after each step, as the daemon hands
	// them back after each turn of its loop.
	for steps := 0; steps < 1_000_000; steps++ {
		if len(pending) > 0 {
			s.Do(func(now time.Time) { s.Core.Window(now, local.Do(now, pending)) })
		}
		pending = out.Take()
		if len(pending) > 0 {
			continue
		}
		if !s.Step() {
			break
		}
		pending = out.Take()
	}
	checkAllDelivered(t, s, 100)
	if peak := s.PeakBusy["lim.test"]; peak > 6 {
		t.Fatalf("peak sessions %d, want at most the limit of 5 and one probe", peak)
	}
	if _, ok := local.Record(window.Dest{Channel: "smtp", Host: "lim.test"}); !ok {
		t.Fatal("the book never heard of the destination")
	}
}

// TestBookHoldsJobsWhileARefusalIsUnanswered: with a book that answers
// later, no agent takes a new job on a destination while a site failure
// reported on it is unanswered: the window the core last saw is the one
// the refusal proved too wide, and a job fed against it is refused in
// turn, a late refusal that would unlearn the ceiling the first one
// taught. Here the store answers a failure only after ten more steps of
// the simulation; the queue still drains, within the limit and a probe.
func TestBookHoldsJobsWhileARefusalIsUnanswered(t *testing.T) {
	s := sim.New(feedbackConfig(t, ""), nil, 1)
	s.Behavior = limited5(s)
	out := &window.Outbox{}
	local := window.NewLocal()
	s.Core.UseBook(out)
	s.Check = true
	for i := 0; i < 300; i++ {
		s.Enqueue(fmt.Sprintf("smtp/lim.test/u%d", i))
	}
	failed := func(reqs []window.Request) bool {
		for _, r := range reqs {
			if r.Op == window.Report && r.Failed {
				return true
			}
		}
		return false
	}
	var pending []window.Request
	held, refusals := 0, 0 // held: steps left before the store answers
	for steps := 0; steps < 1_000_000; steps++ {
		if held == 0 && len(pending) > 0 {
			s.Do(func(now time.Time) { s.Core.Window(now, local.Do(now, pending)) })
			pending = out.Take()
			continue
		}
		fed := len(s.JobLog)
		if !s.Step() {
			if len(pending) > 0 {
				held = 0 // nothing else happens: the store answers now
				continue
			}
			break
		}
		reqs := out.Take()
		if held == 0 && failed(reqs) {
			held = 10
			refusals++
		}
		if held > 0 && len(s.JobLog) > fed {
			t.Fatalf("step %d: %d job(s) fed while a site failure was unanswered: %+v",
				steps, len(s.JobLog)-fed, s.JobLog[fed:])
		}
		held = max(held-1, 0)
		pending = append(pending, reqs...)
	}
	checkAllDelivered(t, s, 300)
	if peak := s.PeakBusy["lim.test"]; peak > 6 {
		t.Fatalf("peak sessions %d, want at most the limit of 5 and one probe", peak)
	}
	if refusals == 0 {
		t.Fatal("no site failure: nothing tested")
	}
	t.Logf("%d answers of failures held", refusals)
}

// TestWhyNamesTheClusterNodesSessions: a message waiting for the shared
// window says whose sessions fill it, node by node, as the book counted
// them.
func TestWhyNamesTheClusterNodesSessions(t *testing.T) {
	cfg := feedbackConfig(t, "slow_start = false") // the initial window of 5 at once
	s := sim.New(cfg, nil, 1)
	s.Behavior = limited5(s)
	board := window.NewBoard(30 * time.Second)
	other := board.Node("mx2")
	d := window.Dest{Channel: "smtp", Host: "lim.test"}
	p := window.ParamsOf(&cfg.Clauses[0])
	for i := 0; i < 5; i++ { // the initial window of 5, all mx2's
		if evs := other.Do(s.Now, []window.Request{{Op: window.Acquire, Dest: d, Params: p}}); evs[0].Kind != window.Granted {
			t.Fatalf("mx2's session %d: %+v", i, evs[0])
		}
	}
	s.Core.UseBook(board.Node("mx1"))
	s.Enqueue("smtp/lim.test/u0")
	vs := s.Core.ThreadVertices(s.Now, "smtp", "lim.test")
	if len(vs) != 1 {
		t.Fatalf("%d vertices on lim.test, want 1", len(vs))
	}
	want := "the cluster's shared window is full: 5 of 5 sessions busy on 2 nodes (0 on this node; by node: mx2 5)"
	if got := vs[0].Why.String(); got != want {
		t.Fatalf("why:\n got  %s\n want %s", got, want)
	}
}

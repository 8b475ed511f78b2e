package redisbook

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"zsched/cluster"
	"zsched/config"
	"zsched/internal/redistest"
	"zsched/sim"
	"zsched/window"
)

// loopBook is a Redis book as the daemon holds it, for a simulated node:
// the core's requests go to the store at once, and the answers come back
// to the core as a later event (core.Window), after the step that asked,
// as the daemon's loop hands them over. So that a run does not depend on
// the store's speed, Do waits for the answers to its requests (one per
// Acquire and per Report; Release has none) before the step goes on; the
// cluster takes them, and any Free the store sent, through Do with no
// request after every step.
type loopBook struct {
	t     testing.TB
	b     *Book
	clock *clock
	held  []window.Event
}

func (s *loopBook) Do(now time.Time, reqs []window.Request) []window.Event {
	s.t.Helper()
	s.clock.Set(now)
	want := 0
	for _, r := range reqs {
		if r.Op == window.Acquire || r.Op == window.Report {
			want++
		}
	}
	s.b.Do(now, reqs)
	deadline := time.After(guard)
	for want > 0 {
		select {
		case evs := <-s.b.Events():
			for _, ev := range evs {
				if ev.State.Fallback {
					s.t.Fatalf("%s fell back to local windows: %s", s.b.cfg.Node, s.b.Status())
				}
				if ev.Kind != window.Free {
					want--
				}
			}
			s.held = append(s.held, evs...)
		case <-deadline:
			s.t.Fatalf("%s: no answer within %v", s.b.cfg.Node, guard)
		}
	}
	if len(reqs) > 0 {
		return nil
	}
	for {
		select {
		case evs := <-s.b.Events():
			s.held = append(s.held, evs...)
		default:
			evs := s.held
			s.held = nil
			return evs
		}
	}
}

// TestBorrowedJobsShareTheWindow: two simulated nodes with feed =
// "message" (their cores, queues and agents in the simulator, on one fake
// clock) share their destinations' windows of 2 sessions through a
// private redis-server. Agents borrow sessions on their messages' other
// destinations, each with a lease of its own: the sessions of both nodes
// on a destination (agents and borrowed jobs) never exceed the shared
// window, and once the queues drain (jobs ended, sites failed, agents
// crashed and killed at jobtimeout on the way) the store holds no lease
// of either node.
func TestBorrowedJobsShareTheWindow(t *testing.T) {
	srv := redistest.New(t)
	cfg, err := config.Parse("t.toml", []byte(`[scheduler]
postoffice = "/nonexistent"
`+sim.TroubledClause))
	if err != nil {
		t.Fatal(err)
	}
	const shared, dests = 2, 6
	rng := rand.New(rand.NewSource(1))
	ns := []*sim.Sim{sim.New(cfg, sim.Troubled(rng, sim.TroubleOdds()), 1), sim.New(cfg, sim.Troubled(rng, sim.TroubleOdds()), 2)}
	books := make([]*loopBook, len(ns))
	wbooks := make([]window.Book, len(ns))
	for i := range ns {
		clk := newClock(sim.Epoch)
		// A lease far longer than the run: the simulated clock runs ahead
		// of the renewals, which go by the wall clock.
		b, err := New(cluster.Config{Redis: srv.URL(0), Node: fmt.Sprint("n", i), Lease: 1000 * time.Hour, Prefix: "t:"},
			Options{Clock: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		waitFor(t, func() bool { return b.Status().Mode == cluster.Shared }, "node to join the store")
		books[i] = &loopBook{t: t, b: b, clock: clk}
		wbooks[i] = books[i]
	}
	c := sim.NewCluster(ns)
	c.Share(wbooks, 0)
	for k, s := range ns {
		s.Check = true // every borrowed job holds a lease, none twice (core.Check)
		for i := range 80 {
			var to []string
			for j := range 1 + i%4 {
				to = append(to, fmt.Sprintf("smtp/d%d.test/n%du%d.%d", (i+2*j)%dests, k, i, j))
			}
			s.Enqueue(to...)
		}
	}
	borrowed, peak := 0, 0
	killed := map[string]bool{} // messages killed while a borrowed job ran
	// Drained: every message done with in both cores (a hung agent's
	// recipients count as delivered in the simulator before its kill).
	drained := func() bool { return ns[0].Core.Messages()+ns[1].Core.Messages() == 0 }
	for step := 0; !drained(); step++ {
		if step%7 == 0 && len(killed) < 6 {
			if _, err := ns[step%2].KillBorrowed(killed); err != nil {
				t.Fatal(err)
			}
		}
		if !c.Step() {
			// Nothing is due anywhere: a node waits for a Free the store
			// has yet to deliver.
			waitFree(t, c, books)
		}
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		sessions := map[string]int{}
		for _, s := range ns {
			g := s.Core.Gauges(c.Now, 1000)
			borrowed = max(borrowed, g.Borrowed)
			for _, w := range g.Busiest {
				sessions[w.Host] += w.Busy
			}
		}
		for h, n := range sessions {
			peak = max(peak, n)
			if n > shared {
				t.Fatalf("%v: %d sessions on %s across the nodes, over the shared window of %d", c.Now.Sub(sim.Epoch), n, h, shared)
			}
		}
		if c.Now.Sub(sim.Epoch) > 100*time.Hour {
			t.Fatal("still running after 100 simulated hours")
		}
	}
	for i, s := range ns {
		if p := s.PendingExcept(killed); len(p) > 0 {
			t.Errorf("node %d left %d recipients, e.g. %s", i, len(p), p[0])
		}
	}
	kills := ns[0].Core.Counters().Killed + ns[1].Core.Counters().Killed
	t.Logf("drained at %v: up to %d sessions on a destination across the nodes, up to %d borrowed at once, %d agents killed, %d messages killed while a borrowed job ran",
		c.Now.Sub(sim.Epoch), peak, borrowed, kills, len(killed))
	if borrowed == 0 || kills == 0 || len(killed) == 0 {
		t.Fatalf("a path went untried: %d borrowed, %d agents killed, %d messages killed", borrowed, kills, len(killed))
	}
	// The releases of the last sessions reach the store after the last
	// job ends; the nodes take the events the books send meanwhile (a
	// book's worker waits until its events are taken).
	deadline := time.Now().Add(guard)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for books[0].b.Status().Leases+books[1].b.Status().Leases > 0 {
		if time.Now().After(deadline) {
			for i, s := range ns {
				for _, r := range s.Core.Rings(c.Now) {
					for _, th := range r.Threads {
						t.Logf("node %d: %s busy %d borrowed %d cluster %+v state %v", i, th.Host, th.Busy, th.Borrowed, th.Cluster, th.State)
					}
				}
				for l, h := range books[i].b.held {
					t.Logf("node %d holds lease %v on %v", i, l, h.dest)
				}
				t.Logf("agents %+v", s.Core.AgentViews())
			}
			t.Fatalf("leases still held after %v: %s; %s", guard, books[0].b.Status(), books[1].b.Status())
		}
		for i, b := range books {
			if evs := b.Do(c.Now, nil); len(evs) > 0 {
				s := c.Nodes[i]
				s.Do(func(now time.Time) { s.Core.Window(now, evs) })
			}
		}
		<-tick.C // polling the books' status, bounded by the guard
	}
	for i, s := range ns {
		if g := s.Core.Gauges(c.Now, 1000); g.Borrowed != 0 {
			t.Errorf("node %d: %d borrowed sessions after the drain", i, g.Borrowed)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	for d := range dests {
		key := books[0].b.key(window.Dest{Channel: "smtp", Host: fmt.Sprintf("d%d.test", d)}, "l")
		if n, err := rdb.ZCard(context.Background(), key).Result(); err != nil || n != 0 {
			t.Errorf("%s: %d leases left in the store (%v)", key, n, err)
		}
	}
}

// waitFree blocks until a book has an event (a Free the store sent late)
// and hands it to its node.
func waitFree(t *testing.T, c *sim.Cluster, books []*loopBook) {
	t.Helper()
	cases := make([]<-chan []window.Event, len(books))
	for i, b := range books {
		cases[i] = b.b.Events()
	}
	deadline := time.After(guard)
	var evs []window.Event
	i := -1
	select {
	case evs = <-cases[0]:
		i = 0
	case evs = <-cases[1]:
		i = 1
	case <-deadline:
		t.Fatalf("the cluster stopped with recipients left and no event within %v", guard)
	}
	s := c.Nodes[i]
	s.Do(func(now time.Time) { s.Core.Window(now, evs) })
}

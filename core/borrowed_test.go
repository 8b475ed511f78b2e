package core_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"zsched/core"
	"zsched/report"
	"zsched/sim"
	"zsched/window"
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
	first := s.Enqueue("smtp/a.test/u", "smtp/b.test/u")
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
	fv, err := s.Core.Message(s.Now, first.Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range fv.Vertices {
		if v.Host == "b.test" {
			const want = "being delivered by agent 1, attached to a.test, on a session of this destination it borrowed"
			if got := v.Why.String(); got != want {
				t.Errorf("WHY b.test/u: %q, want %q", got, want)
			}
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

// TestBorrowedJobsHoldLeases: two nodes with feed = "message" share their
// destinations' windows (2 sessions) on one board. Each job an agent
// borrows on another destination holds a lease of its own: after every
// event, each node holds exactly one lease per session in progress on a
// destination (its agents and its borrowed jobs), so no path leaves one
// behind (job end, site failure, crash, jobtimeout kill), and the
// sessions of both nodes on a destination never exceed the shared window.
// Every lease is back once the queues drain.
func TestBorrowedJobsHoldLeases(t *testing.T) {
	cfg, err := parseConfig(sim.TroubledClause)
	if err != nil {
		t.Fatal(err)
	}
	const shared = 2
	for seed := int64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ns := []*sim.Sim{sim.New(cfg, sim.Troubled(rng, sim.TroubleOdds()), seed), sim.New(cfg, sim.Troubled(rng, sim.TroubleOdds()), seed+100)}
		c := sim.NewCluster(ns)
		board := window.NewBoard(30 * time.Second)
		nodes := []*window.Node{board.Node("mx1"), board.Node("mx2")}
		c.Share([]window.Book{nodes[0], nodes[1]}, 10*time.Second)
		for k, s := range ns {
			s.Check = true
			for i := range 80 {
				var to []string
				for j := range 1 + i%4 {
					to = append(to, fmt.Sprintf("smtp/d%d.test/n%du%d.%d", (i+2*j)%6, k, i, j))
				}
				s.Enqueue(to...)
			}
		}
		borrowed, kills := 0, int64(0)
		killed := map[string]bool{} // messages killed while a borrowed job ran
		for step := 0; c.Step(); step++ {
			if err := c.Err(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if step%7 == 0 && len(killed) < 6 {
				if _, err := ns[step%2].KillBorrowed(killed); err != nil {
					t.Fatal(err)
				}
			}
			sessions := map[string]int{}
			for i, s := range ns {
				g := s.Core.Gauges(c.Now, 1000)
				borrowed = max(borrowed, g.Borrowed)
				for _, w := range g.Busiest {
					sessions[w.Host] += w.Busy
					st, _ := nodes[i].State(window.Dest{Channel: w.Channel, Host: w.Host}, c.Now)
					if st.Mine != w.Busy {
						t.Fatalf("seed %d, %v: node %d holds %d leases on %s for %d sessions (%d borrowed)",
							seed, c.Now.Sub(sim.Epoch), i, st.Mine, w.Host, w.Busy, w.Borrowed)
					}
				}
			}
			for h, n := range sessions {
				if n > shared {
					t.Fatalf("seed %d, %v: %d sessions on %s across the nodes, over the shared window of %d", seed, c.Now.Sub(sim.Epoch), n, h, shared)
				}
			}
			if c.Now.Sub(sim.Epoch) > 24*time.Hour {
				t.Fatalf("seed %d: still running after a day", seed)
			}
		}
		for i, s := range ns {
			if p := s.PendingExcept(killed); len(p) > 0 {
				t.Errorf("seed %d: node %d left %d recipients, e.g. %s", seed, i, len(p), p[0])
			}
			kills += s.Core.Counters().Killed
			for d := range 6 {
				if st, ok := nodes[i].State(window.Dest{Channel: "smtp", Host: fmt.Sprintf("d%d.test", d)}, c.Now); ok && st.Mine != 0 {
					t.Errorf("seed %d: node %d still holds %d leases on d%d.test", seed, i, st.Mine, d)
				}
			}
		}
		t.Logf("seed %d: drained at %v; up to %d borrowed sessions at once, %d agents killed, %d messages killed while a borrowed job ran",
			seed, c.Now.Sub(sim.Epoch), borrowed, kills, len(killed))
		if borrowed == 0 || kills == 0 || len(killed) == 0 {
			t.Errorf("seed %d: a path went untried: %d borrowed, %d agents killed, %d messages killed", seed, borrowed, kills, len(killed))
		}
	}
}

// TestWhyClusterCountsBorrowed: the cluster's full window, with this
// node's sessions partly borrowed jobs, says how many.
func TestWhyClusterCountsBorrowed(t *testing.T) {
	w := core.Why{Reason: core.ReasonCluster, Cluster: &core.ClusterView{Window: 3, Leases: 3, Mine: 2, Nodes: 2, Borrowed: 1,
		ByNode: []window.NodeLeases{{Node: "mx1", Leases: 2}, {Node: "mx2", Leases: 1}}}}
	const want = "the cluster's shared window is full: 3 of 3 sessions busy on 2 nodes (2 on this node, 1 of them jobs borrowed by agents of other destinations; by node: mx1 2, mx2 1)"
	if got := w.String(); got != want {
		t.Errorf("WHY %q, want %q", got, want)
	}
	w.Cluster.Borrowed = 0
	if got := w.String(); strings.Contains(got, "borrowed") {
		t.Errorf("WHY without borrowed jobs %q", got)
	}
}

// lateBook answers as a Redis book does: later. It hands its node's
// requests to a board node at once but holds the answers (and the Free
// events the board leaves for it) until the test delivers them.
type lateBook struct {
	node *window.Node
	held []window.Event
}

func (b *lateBook) Do(now time.Time, reqs []window.Request) []window.Event {
	b.held = append(b.held, b.node.Do(now, reqs)...)
	return nil
}

func (b *lateBook) take() []window.Event {
	evs := b.held
	b.held = nil
	return evs
}

// TestBorrowedLeasesAnsweredLate: TestBorrowedJobsHoldLeases with books
// that answer at the next event of the cluster, after the simulated clock
// moved on, as a node's requests to Redis are answered on the loop's next
// turn. A lease asked for a borrowed job comes when the agent may have
// been fed other work: it is offered to that agent first, else to the
// ring. The sessions of both nodes on a destination never exceed the
// shared window (the board counts every lease, granted ones no agent took
// yet included), the core's invariants hold after every event (a late
// answer saying dead until a time already past included), jobs are
// borrowed, and every lease is back at the end.
func TestBorrowedLeasesAnsweredLate(t *testing.T) {
	cfg, err := parseConfig(sim.TroubledClause)
	if err != nil {
		t.Fatal(err)
	}
	const shared, dests = 2, 6
	for seed := int64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ns := []*sim.Sim{sim.New(cfg, sim.Troubled(rng, sim.TroubleOdds()), seed), sim.New(cfg, sim.Troubled(rng, sim.TroubleOdds()), seed+100)}
		c := sim.NewCluster(ns)
		board := window.NewBoard(time.Hour)
		books := []*lateBook{{node: board.Node("mx1")}, {node: board.Node("mx2")}}
		c.Share([]window.Book{books[0], books[1]}, 10*time.Minute)
		for k, s := range ns {
			s.Check = true
			for i := range 80 {
				var to []string
				for j := range 1 + i%4 {
					to = append(to, fmt.Sprintf("smtp/d%d.test/n%du%d.%d", (i+2*j)%dests, k, i, j))
				}
				s.Enqueue(to...)
			}
		}
		borrowed := 0
		for ns[0].Core.Messages()+ns[1].Core.Messages() > 0 {
			late := [][]window.Event{books[0].take(), books[1].take()}
			stepped := c.Step()
			delivered := false
			for i, evs := range late {
				if len(evs) > 0 {
					s := ns[i]
					s.Do(func(now time.Time) { s.Core.Window(now, evs) })
					delivered = true
				}
			}
			if !stepped && !delivered && len(books[0].held)+len(books[1].held) == 0 {
				t.Fatalf("seed %d: the cluster stopped with messages left", seed)
			}
			if err := c.Err(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
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
				st, _ := books[0].node.State(window.Dest{Channel: "smtp", Host: h}, c.Now)
				if n > shared || n > st.Leases {
					t.Fatalf("seed %d, %v: %d sessions on %s across the nodes, %d leases, shared window %d", seed, c.Now.Sub(sim.Epoch), n, h, st.Leases, shared)
				}
			}
			if c.Now.Sub(sim.Epoch) > 24*time.Hour {
				t.Fatalf("seed %d: still running after a day", seed)
			}
		}
		// The last releases' Free events, if any.
		for i, b := range books {
			if evs := b.take(); len(evs) > 0 {
				s := ns[i]
				s.Do(func(now time.Time) { s.Core.Window(now, evs) })
			}
		}
		for d := range dests {
			if st, ok := books[0].node.State(window.Dest{Channel: "smtp", Host: fmt.Sprintf("d%d.test", d)}, c.Now); ok && st.Leases != 0 {
				t.Errorf("seed %d: %d leases left on d%d.test", seed, st.Leases, d)
			}
		}
		t.Logf("seed %d: drained at %v, up to %d borrowed sessions at once", seed, c.Now.Sub(sim.Epoch), borrowed)
		if borrowed == 0 {
			t.Errorf("seed %d: no job was ever borrowed", seed)
		}
	}
}

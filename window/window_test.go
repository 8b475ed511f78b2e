package window_test

import (
	"fmt"
	"math/rand"
	"os/exec"
	"strings"
	"testing"
	"time"

	"zsched/config"
	"zsched/thread"
	"zsched/window"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var dest = window.Dest{Channel: "smtp", Host: "limited.test"}

// params returns the clause defaults (Postfix's 1/N, initial 5, limit 20,
// cohort limit 1, learned ceiling) with the given changes.
func params(t testing.TB, toml string) window.Params {
	t.Helper()
	cfg, err := config.Parse("t.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n[[clause]]\nselect = \"*/*\"\ncommand = \"x\"\n"+toml))
	if err != nil {
		t.Fatal(err)
	}
	return window.ParamsOf(&cfg.Clauses[0])
}

// ref is the core as it runs today (core/feedback.go, core/agents.go):
// one thread.Window, the thread's busy count and back-off. A book must
// decide and compute exactly as it does.
type ref struct {
	w       thread.Window
	busy    int
	backoff time.Time
}

func (r *ref) acquire(now time.Time) bool {
	if r.w.Dead() && !now.Before(r.backoff) { // reviveDue
		r.w.Revive(r.busy)
		r.backoff = time.Time{}
	}
	if r.w.Dead() || r.busy >= r.w.Limit() { // Wants: Busy < Window.Limit()
		return false
	}
	r.busy++
	return true
}

func (r *ref) report(failed bool, until, now time.Time) {
	if failed {
		if r.w.Failed(now) {
			r.backoff = until
		}
		return
	}
	before := r.w.Limit()
	r.w.Succeeded(r.busy, now)
	if before == 0 {
		r.backoff = time.Time{}
	}
}

// step is one random thing a node's core does.
type step struct {
	node    int
	op      window.Op
	failed  bool
	advance time.Duration
	pick    int // which of the node's leases a Release ends
}

// steps draws n steps for nodes nodes: mostly acquires and reports, so
// that windows move, with failures in bursts, as a limiter or an outage
// makes them.
func steps(rng *rand.Rand, n, nodes int) []step {
	var ss []step
	failing := false
	for i := 0; i < n; i++ {
		if rng.Intn(40) == 0 {
			failing = !failing
		}
		s := step{node: rng.Intn(nodes), advance: time.Duration(rng.Intn(3000)) * time.Millisecond, pick: rng.Int()}
		switch k := rng.Intn(10); {
		case k < 4:
			s.op = window.Acquire
		case k < 6:
			s.op = window.Release
		default:
			s.op = window.Report
			s.failed = rng.Intn(10) == 0 || failing && rng.Intn(3) > 0
		}
		if rng.Intn(200) == 0 {
			s.advance = 2 * time.Hour // past the ceiling's TTL and any back-off
		}
		ss = append(ss, s)
	}
	return ss
}

// paramSets are the feedback styles and ceiling settings the properties
// run under.
var paramSets = []string{
	"",
	"learned_ceiling = false",
	"positive_feedback = \"1/sqrt_concurrency\"\nnegative_feedback = \"1/sqrt_concurrency\"",
	"positive_feedback = \"1\"\nnegative_feedback = \"1\"\nfailed_cohort_limit = 2",
	"failed_cohort_limit = 0\nmaxthr = 7\ninitial_concurrency = 2",
	"ceiling_probe_factor = 3\nceiling_ttl = \"10m\"",
	"slow_start = false",
	"positive_feedback = \"1\"\ninitial_concurrency = 9\nfailed_cohort_limit = 2",
}

// TestLocalIsTheCoresWindow drives Local and the core's own window with
// the same random sequences: every decision and every window equal.
func TestLocalIsTheCoresWindow(t *testing.T) {
	for pi, ps := range paramSets {
		p := params(t, ps)
		for seed := int64(1); seed <= 8; seed++ {
			t.Run(fmt.Sprintf("params%d/seed%d", pi, seed), func(t *testing.T) {
				rng := rand.New(rand.NewSource(seed))
				l := window.NewLocal()
				r := &ref{w: thread.NewWindow(clause(t, ps))}
				var leases []window.Lease
				now := epoch
				for i, s := range steps(rng, 2000, 1) {
					now = now.Add(s.advance)
					until := now.Add(time.Hour)
					switch s.op {
					case window.Acquire:
						evs := l.Do(now, []window.Request{{Op: window.Acquire, Dest: dest, Params: p}})
						want := r.acquire(now)
						if len(evs) != 1 || (evs[0].Kind == window.Granted) != want {
							t.Fatalf("step %d: acquire answered %+v, the core would grant: %v", i, evs, want)
						}
						if want {
							leases = append(leases, evs[0].Lease)
						}
					case window.Release:
						if len(leases) == 0 {
							continue
						}
						k := s.pick % len(leases)
						l.Do(now, []window.Request{{Op: window.Release, Lease: leases[k]}})
						leases = append(leases[:k], leases[k+1:]...)
						r.busy--
					case window.Report:
						evs := l.Do(now, []window.Request{{Op: window.Report, Dest: dest, Params: p, Failed: s.failed, DeadUntil: until}})
						r.report(s.failed, until, now)
						if len(evs) == 0 || evs[0].Kind != window.Changed {
							t.Fatalf("step %d: report answered %+v", i, evs)
						}
					}
					rec, _ := l.Record(dest)
					if rec.Window != r.w {
						t.Fatalf("step %d (%+v): local window\n%+v\nthe core's\n%+v", i, s, rec.Window, r.w)
					}
				}
			})
		}
	}
}

func clause(t testing.TB, toml string) *config.Clause {
	t.Helper()
	cfg, err := config.Parse("t.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n[[clause]]\nselect = \"*/*\"\ncommand = \"x\"\n"+toml))
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.Clauses[0]
}

// TestBoardIsOneWindow drives a Board from several nodes and one
// thread.Window with the global session count (the core's window, as if
// one scheduler ran every node's agents) through the same sequences: the
// shared window is that one window at every step, and every grant is the
// one it would make.
func TestBoardIsOneWindow(t *testing.T) {
	for pi, ps := range paramSets {
		p := params(t, ps)
		for _, nodes := range []int{1, 3, 10} {
			for seed := int64(1); seed <= 4; seed++ {
				t.Run(fmt.Sprintf("params%d/nodes%d/seed%d", pi, nodes, seed), func(t *testing.T) {
					rng := rand.New(rand.NewSource(seed))
					b := window.NewBoard(24 * time.Hour) // no lease expires here
					ns := make([]*window.Node, nodes)
					leases := make([][]window.Lease, nodes)
					for i := range ns {
						ns[i] = b.Node(fmt.Sprintf("n%d", i))
					}
					r := &ref{w: thread.NewWindow(clause(t, ps))}
					now := epoch
					seen := make(map[int]bool) // nodes that asked: live for the whole run
					for i, s := range steps(rng, 2000, nodes) {
						now = now.Add(s.advance)
						until := now.Add(time.Hour)
						n := ns[s.node]
						if s.op != window.Release || len(leases[s.node]) > 0 {
							seen[s.node] = true
						}
						r.w.Nodes = len(seen)
						switch s.op {
						case window.Acquire:
							evs := n.Do(now, []window.Request{{Op: window.Acquire, Dest: dest, Params: p}})
							want := r.acquire(now)
							if len(evs) == 0 || (evs[0].Kind == window.Granted) != want {
								t.Fatalf("step %d: acquire answered %+v, one window would grant: %v", i, evs, want)
							}
							if want {
								leases[s.node] = append(leases[s.node], evs[0].Lease)
							}
						case window.Release:
							ls := leases[s.node]
							if len(ls) == 0 {
								continue
							}
							k := s.pick % len(ls)
							n.Do(now, []window.Request{{Op: window.Release, Lease: ls[k]}})
							leases[s.node] = append(ls[:k], ls[k+1:]...)
							r.busy--
						case window.Report:
							n.Do(now, []window.Request{{Op: window.Report, Dest: dest, Params: p, Failed: s.failed, DeadUntil: until}})
							r.report(s.failed, until, now)
						}
						st, _ := n.State(dest, now)
						if st.Window != r.w.State() || st.Leases != r.busy {
							t.Fatalf("step %d (%+v): shared window %+v with %d leases\none window %+v with %d busy",
								i, s, st.Window, st.Leases, r.w.State(), r.busy)
						}
					}
				})
			}
		}
	}
}

// TestBoardPromptRefusalPerNode: on a board, a refusal after as many
// deliveries above the ceiling as two per live node is still prompt (each
// node's new session takes its own round trip and agent start while the
// others' deliveries are judged), so it confirms the ceiling; one more
// and it does not. A window of one node keeps the bound of 2.
func TestBoardPromptRefusalPerNode(t *testing.T) {
	p := params(t, "initial_concurrency = 9\nslow_start = false")
	for _, tc := range []struct {
		nodes, clean int
		confirmed    bool
	}{{3, 6, true}, {3, 7, false}, {1, 2, true}, {1, 3, false}} {
		t.Run(fmt.Sprintf("nodes%d/clean%d", tc.nodes, tc.clean), func(t *testing.T) {
			b := window.NewBoard(time.Hour)
			ns := make([]*window.Node, tc.nodes)
			for i := range ns {
				ns[i] = b.Node(fmt.Sprintf("n%d", i))
			}
			now := epoch
			report := func(n *window.Node, failed bool) window.State {
				now = now.Add(time.Millisecond)
				evs := n.Do(now, []window.Request{{Op: window.Report, Dest: dest, Params: p, Failed: failed,
					DeadUntil: now.Add(time.Minute)}})
				return evs[0].State
			}
			// Every node live: each takes a session.
			for _, n := range ns {
				n.Do(now, []window.Request{{Op: window.Acquire, Dest: dest, Params: p}})
			}
			// A refusal at 9: ceiling 8, one strike; the window drops to 8.
			st := report(ns[0], true)
			if st.Window.Ceiling != 8 || st.Window.Strikes != 1 || st.Limit() != 8 {
				t.Fatalf("after the first refusal: %+v", st.Window)
			}
			// A pseudo-cohort at the ceiling without failure (settled),
			// then successes until the window steps past it to 9.
			for i := 0; st.Limit() == 8; i++ {
				st = report(ns[i%tc.nodes], false)
			}
			// tc.clean deliveries judged above the ceiling, then a
			// refusal at 9.
			for i := 0; i < tc.clean; i++ {
				st = report(ns[i%tc.nodes], false)
			}
			if st.Limit() != 9 || st.Window.Ceiling != 8 {
				t.Fatalf("the window left 9 before the refusal: %+v", st.Window)
			}
			st = report(ns[tc.clean%tc.nodes], true)
			if got := st.Window.Strikes == 2; got != tc.confirmed || st.Window.Ceiling != 8 {
				t.Fatalf("%d nodes, refusal after %d clean deliveries: ceiling %d strikes %d, want confirmed %v",
					tc.nodes, tc.clean, st.Window.Ceiling, st.Window.Strikes, tc.confirmed)
			}
		})
	}
}

// TestBoardLeasesExpire: a node that dies holding sessions frees them when
// its leases run out, not before; a node that renews keeps its own.
func TestBoardLeasesExpire(t *testing.T) {
	p := params(t, "slow_start = false")
	b := window.NewBoard(30 * time.Second)
	a, c := b.Node("a"), b.Node("c")
	acq := []window.Request{{Op: window.Acquire, Dest: dest, Params: p}}
	for i := 0; i < 5; i++ {
		if evs := a.Do(epoch, acq); evs[0].Kind != window.Granted {
			t.Fatalf("a's session %d: %+v", i, evs[0])
		}
	}
	// c renews its liveness, a falls silent at epoch: a is dead.
	evs := c.Do(epoch.Add(time.Second), acq)
	if evs[0].Kind != window.Denied || evs[0].Reason != window.Full || !evs[0].Retry.Equal(epoch.Add(30*time.Second)) {
		t.Fatalf("c, window full of a's sessions: %+v, want denied until a's leases expire at +30s", evs[0])
	}
	if evs := c.Do(epoch.Add(30*time.Second-time.Millisecond), acq); evs[0].Kind != window.Denied {
		t.Fatalf("c a moment before a's leases expire: %+v", evs[0])
	}
	evs = c.Do(epoch.Add(30*time.Second), acq)
	if evs[0].Kind != window.Granted || evs[0].State.Leases != 1 || evs[0].State.Nodes != 1 {
		t.Fatalf("c once a's leases expired: %+v, want granted, 1 lease, 1 live node", evs[0])
	}

	// A node that renews keeps its sessions past the first lease time.
	b = window.NewBoard(30 * time.Second)
	a, c = b.Node("a"), b.Node("c")
	for i := 0; i < 5; i++ {
		a.Do(epoch, acq)
	}
	for at := 10 * time.Second; at <= 2*time.Minute; at += 10 * time.Second {
		a.Renew(epoch.Add(at))
	}
	if evs := c.Do(epoch.Add(2*time.Minute), acq); evs[0].Kind != window.Denied || evs[0].State.Nodes != 2 {
		t.Fatalf("c while a renews: %+v, want denied, 2 live nodes", evs[0])
	}
}

// TestBoardFreeGoesToTheDenied: a release on one node tells the nodes it
// denied, and only once.
func TestBoardFreeGoesToTheDenied(t *testing.T) {
	p := params(t, "initial_concurrency = 2\nslow_start = false")
	b := window.NewBoard(30 * time.Second)
	a, c, d := b.Node("a"), b.Node("c"), b.Node("d")
	acq := []window.Request{{Op: window.Acquire, Dest: dest, Params: p}}
	g1 := a.Do(epoch, acq)[0]
	a.Do(epoch, acq)
	if evs := c.Do(epoch, acq); evs[0].Kind != window.Denied {
		t.Fatalf("c: %+v", evs)
	}
	if evs := d.Do(epoch, nil); len(evs) != 0 {
		t.Fatalf("d asked nothing, got %+v", evs)
	}
	a.Do(epoch.Add(time.Second), []window.Request{{Op: window.Release, Lease: g1.Lease}})
	evs := c.Do(epoch.Add(time.Second), nil)
	if len(evs) != 1 || evs[0].Kind != window.Free || evs[0].Dest != dest || evs[0].State.Leases != 1 {
		t.Fatalf("c after a's release: %+v, want one Free with 1 lease left", evs)
	}
	if evs := c.Do(epoch.Add(time.Second), nil); len(evs) != 0 {
		t.Fatalf("c again: %+v", evs)
	}
	if evs := d.Do(epoch.Add(time.Second), nil); len(evs) != 0 {
		t.Fatalf("d was never denied, got %+v", evs)
	}
}

// TestBoardDeadDestination: one node's failures declare the destination
// dead for every node until the dead-until time it gave; then it revives
// to its initial window (or the sessions still running).
func TestBoardDeadDestination(t *testing.T) {
	p := params(t, "initial_concurrency = 1") // one failure at window 1 is a whole cohort
	b := window.NewBoard(time.Hour)
	a, c := b.Node("a"), b.Node("c")
	acq := []window.Request{{Op: window.Acquire, Dest: dest, Params: p}}
	g := a.Do(epoch, acq)[0]
	until := epoch.Add(10 * time.Minute)
	ev := a.Do(epoch, []window.Request{{Op: window.Report, Dest: dest, Params: p, Failed: true, DeadUntil: until},
		{Op: window.Release, Lease: g.Lease}})[0]
	if ev.Kind != window.Changed || !ev.Died || ev.From != 1 || !ev.State.Dead() || !ev.State.DeadUntil.Equal(until) {
		t.Fatalf("report: %+v, want died from 1, dead until +10m", ev)
	}
	ev = c.Do(epoch.Add(time.Minute), acq)[0]
	if ev.Kind != window.Denied || ev.Reason != window.Dead || !ev.Retry.Equal(until) {
		t.Fatalf("c while dead: %+v", ev)
	}
	ev = c.Do(until, acq)[0]
	if ev.Kind != window.Granted || !ev.Revived || ev.State.Limit() != 1 {
		t.Fatalf("c at dead-until: %+v, want granted, revived to 1", ev)
	}
}

// TestParamsApplyClampsLikeRestore: a reload that lowers maxthr or turns
// learned_ceiling off reaches the shared window at the next request.
func TestParamsApplyClampsLikeRestore(t *testing.T) {
	w := params(t, "").New()
	w.Concurrency, w.Ceiling, w.Strikes, w.CeilingAt = 15, 12, 2, epoch
	params(t, "maxthr = 10").Apply(&w)
	if w.Concurrency != 10 || w.Ceiling != 10 || w.Max != 10 {
		t.Fatalf("after maxthr 10: %+v", w)
	}
	params(t, "maxthr = 10\nlearned_ceiling = false").Apply(&w)
	if w.Ceiling != 0 || w.Strikes != 0 || !w.CeilingAt.IsZero() {
		t.Fatalf("after learned_ceiling off: %+v", w)
	}
}

// TestWindowDoesNoIO keeps the package as pure as the core that will
// import it (shared/STYLE.md).
func TestWindowDoesNoIO(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}} | {{join .Deps \" \"}}", "zsched/window").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports, deps, _ := strings.Cut(strings.TrimSpace(string(out)), " | ")
	for _, d := range strings.Fields(deps) {
		switch d {
		case "os/exec", "net", "zsched/agent", "github.com/redis/go-redis/v9":
			t.Errorf("window depends on %s", d)
		}
	}
	for _, i := range strings.Fields(imports) {
		if i == "os" || i == "syscall" || i == "sync" {
			t.Errorf("window imports %s", i)
		}
	}
	src, _ := exec.Command("grep", "-rnE", `time\.(Now|Sleep|After|Tick|Since)\(|rand\.|go func`,
		".", "--include=*.go", "--exclude=*_test.go").Output()
	if len(src) > 0 {
		t.Errorf("clock, randomness or goroutines in window:\n%s", src)
	}
}

// TestDeniedLearnOfDeath: a node denied because the window was full is
// told (Free) when the destination dies, so that it asks again and learns
// the dead-until time, instead of waiting for a session to free that
// never will (the lab's model stalled on it).
func TestDeniedLearnOfDeath(t *testing.T) {
	p := params(t, "initial_concurrency = 1")
	until := epoch.Add(time.Minute)
	for _, name := range []string{"local", "board"} {
		l := window.NewLocal()
		tc := struct {
			name          string
			asker, failer window.Book
		}{name, l, l}
		if name == "board" {
			b := window.NewBoard(time.Hour)
			tc.asker, tc.failer = b.Node("asker"), b.Node("failer")
		}
		acq := []window.Request{{Op: window.Acquire, Dest: dest, Params: p}}
		tc.failer.Do(epoch, acq)
		if ev := tc.asker.Do(epoch, acq)[0]; ev.Kind != window.Denied || ev.Reason != window.Full {
			t.Fatalf("%s: %+v", tc.name, ev)
		}
		evs := tc.failer.Do(epoch, []window.Request{{Op: window.Report, Dest: dest, Params: p, Failed: true, DeadUntil: until}})
		evs = append(evs, tc.asker.Do(epoch, nil)...)
		free := false
		for _, ev := range evs {
			free = free || ev.Kind == window.Free
		}
		if !free {
			t.Fatalf("%s: the destination died and the denied node heard nothing: %+v", tc.name, evs)
		}
		if ev := tc.asker.Do(epoch, acq)[0]; ev.Kind != window.Denied || ev.Reason != window.Dead || !ev.Retry.Equal(until) {
			t.Fatalf("%s: asking again: %+v; want dead until %v", tc.name, ev, until)
		}
	}
}

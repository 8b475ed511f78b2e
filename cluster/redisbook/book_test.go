package redisbook

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"zsched/cluster"
	"zsched/internal/redistest"
	"zsched/thread"
	"zsched/window"
)

var testDest = window.Dest{Channel: "smtp", Host: "limited.test"}

// clock is a test's time: requests carry it, renewals read it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// logWriter routes a book's log to t.Log, counting the fallback lines.
type logWriter struct {
	t     testing.TB
	falls *atomic.Int64
}

func (w logWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "falling back") {
		w.falls.Add(1)
	}
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// node is one book under test, with the events it delivered not yet read.
type node struct {
	t     testing.TB
	b     *Book
	falls atomic.Int64 // fallback lines logged
	mu    sync.Mutex
	evs   []window.Event
	got   chan struct{}
	done  chan struct{}
}

func newNode(t testing.TB, url, name string, lease time.Duration, now func() time.Time) *node {
	t.Helper()
	cfg := cluster.Config{Redis: url, Node: name, Lease: lease, Prefix: "t:"}
	n := &node{t: t, got: make(chan struct{}, 1), done: make(chan struct{})}
	b, err := New(cfg, Options{Log: hclog.New(&hclog.LoggerOptions{Name: name, Output: logWriter{t, &n.falls}, Level: hclog.Info}),
		Clock: now})
	if err != nil {
		t.Fatal(err)
	}
	n.b = b
	go func() {
		for {
			select {
			case evs := <-b.Events():
				n.mu.Lock()
				n.evs = append(n.evs, evs...)
				n.mu.Unlock()
				select {
				case n.got <- struct{}{}:
				default:
				}
			case <-n.done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		b.Close()
		close(n.done)
	})
	return n
}

// shared waits until every node has joined the store: each counts the
// others from then on.
func shared(t testing.TB, ns ...*node) {
	t.Helper()
	for _, n := range ns {
		waitFor(t, func() bool { return n.b.Status().Mode == cluster.Shared }, n.b.cfg.Node+" to join")
	}
}

// guard bounds every wait: a failure guard, never a synchronisation.
const guard = 20 * time.Second

// next returns the next event of kind k (any kind if 0), skipping Free
// events unless asked for; it fails the test after guard.
func (n *node) next(k window.Kind) window.Event {
	n.t.Helper()
	deadline := time.After(guard)
	for {
		n.mu.Lock()
		for i, ev := range n.evs {
			if ev.Kind == k || k == 0 && ev.Kind != window.Free {
				n.evs = append(n.evs[:i], n.evs[i+1:]...)
				n.mu.Unlock()
				return ev
			}
		}
		n.mu.Unlock()
		select {
		case <-n.got:
		case <-deadline:
			n.t.Fatalf("no %v event within %v", k, guard)
		}
	}
}

func (n *node) ask(now time.Time, r window.Request) window.Event {
	n.t.Helper()
	n.b.Do(now, []window.Request{r})
	return n.next(0)
}

func (n *node) acquire(now time.Time, p window.Params) window.Event {
	n.t.Helper()
	return n.ask(now, window.Request{Op: window.Acquire, Dest: testDest, Params: p})
}

// release ends a lease and waits until the book has carried it out.
func (n *node) release(now time.Time, l window.Lease) {
	n.t.Helper()
	want := n.b.Status().Leases - 1
	n.b.Do(now, []window.Request{{Op: window.Release, Lease: l}})
	waitFor(n.t, func() bool { return n.b.Status().Leases == want }, "the release to be carried out")
}

func waitFor(t testing.TB, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", guard, what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the guard
	}
}

// ref is the core's own window with the cluster's session count: what
// one scheduler running every node's agents would decide.
type ref struct {
	w       thread.Window
	busy    int
	backoff time.Time
}

func (r *ref) acquire(now time.Time) bool {
	if r.w.Dead() && !now.Before(r.backoff) {
		r.w.Revive(r.busy)
		r.backoff = time.Time{}
	}
	if r.w.Dead() || r.busy >= r.w.Limit() {
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

// TestBookIsOneWindow: three nodes' books on one Redis, driven by a random
// sequence of acquires, releases and reports from any node, decide and
// compute exactly as one thread.Window with the cluster's session count
// and its nodes.
func TestBookIsOneWindow(t *testing.T) {
	srv := redistest.New(t)
	for pi, ps := range []string{"", "positive_feedback = \"1/sqrt_concurrency\"\nfailed_cohort_limit = 2", "initial_concurrency = 2\nmaxthr = 6\nslow_start = false"} {
		t.Run(fmt.Sprint("params", pi), func(t *testing.T) {
			p := clauseParams(t, ps)
			clk := newClock(epoch)
			url := srv.URL(pi + 1)
			ns := []*node{newNode(t, url, "a", 24*time.Hour, clk.Now), newNode(t, url, "b", 24*time.Hour, clk.Now),
				newNode(t, url, "c", 24*time.Hour, clk.Now)}
			shared(t, ns...)
			leases := make([][]window.Lease, len(ns))
			r := &ref{w: p.New()}
			r.w.Nodes = len(ns) // every node joined (shared above) and stays live
			rng := rand.New(rand.NewSource(int64(pi) + 1))
			now := epoch
			failing := false
			for i := 0; i < 400; i++ {
				now = now.Add(time.Duration(rng.Intn(3000)) * time.Millisecond)
				clk.Set(now)
				if rng.Intn(30) == 0 {
					failing = !failing
				}
				k := rng.Intn(len(ns))
				n := ns[k]
				switch op := rng.Intn(10); {
				case op < 4:
					ev := n.acquire(now, p)
					want := r.acquire(now)
					if (ev.Kind == window.Granted) != want || ev.State.Fallback {
						t.Fatalf("step %d: node %d acquire answered %+v; one window grants: %v", i, k, ev, want)
					}
					if want {
						leases[k] = append(leases[k], ev.Lease)
					}
				case op < 6:
					if len(leases[k]) == 0 {
						continue
					}
					j := rng.Intn(len(leases[k]))
					n.release(now, leases[k][j])
					leases[k] = append(leases[k][:j], leases[k][j+1:]...)
					r.busy--
				default:
					fail := rng.Intn(10) == 0 || failing && rng.Intn(3) > 0
					until := now.Add(time.Minute)
					ev := n.ask(now, window.Request{Op: window.Report, Dest: testDest, Params: p, Failed: fail, DeadUntil: until})
					r.report(fail, until, now)
					if ev.Kind != window.Changed || ev.State.Window != r.w.State() || ev.State.Leases != r.busy ||
						ev.State.Mine != len(leases[k]) || ev.State.Nodes != 3 {
						t.Fatalf("step %d: node %d report answered %+v\none window: %+v, %d busy, %d mine",
							i, k, ev, r.w.State(), r.busy, len(leases[k]))
					}
				}
			}
		})
	}
}

// TestMain runs the helper node of TestLeasesExpireWhenANodeIsKilled when
// asked to.
func TestMain(m *testing.M) {
	if spec := os.Getenv("ZSCHED_REDISBOOK_HELPER"); spec != "" {
		helper(spec)
		return
	}
	// go-redis logs dial failures through its own process-wide logger;
	// the tests kill servers on purpose. (The daemon's main routes it.)
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// helper is a node that takes sessions and never lets go: "url node
// nowms n lease".
func helper(spec string) {
	f := strings.Fields(spec)
	ms, _ := strconv.ParseInt(f[2], 10, 64)
	k, _ := strconv.Atoi(f[3])
	lease, _ := time.ParseDuration(f[4])
	now := time.UnixMilli(ms)
	b, err := New(cluster.Config{Redis: f[0], Node: f[1], Lease: lease, Prefix: "t:"}, Options{Clock: func() time.Time { return now }})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	p := window.Params{Max: 20, Initial: 5, CohortLimit: 1, ProbeFactor: 10}
	reqs := make([]window.Request, k)
	for i := range reqs {
		reqs[i] = window.Request{Op: window.Acquire, Dest: testDest, Params: p}
	}
	b.Do(now, reqs)
	granted := 0
	for granted < k {
		for _, ev := range <-b.Events() {
			if ev.Kind != window.Granted || ev.State.Fallback {
				fmt.Println("error", ev.Kind, ev.State.Fallback)
				os.Exit(1)
			}
			granted++
		}
	}
	fmt.Println("held", granted)
	select {} // until killed
}

// TestLeasesExpireWhenANodeIsKilled: a node process SIGKILLed while it
// holds the whole window frees it when its leases expire — not a moment
// before — and drops out of the live nodes.
func TestLeasesExpireWhenANodeIsKilled(t *testing.T) {
	srv := redistest.New(t)
	const lease = 3 * time.Second
	p := window.Params{Max: 20, Initial: 5, CohortLimit: 1, ProbeFactor: 10}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("ZSCHED_REDISBOOK_HELPER=%s dead %d 5 %v", srv.URL(0), epoch.UnixMilli(), lease))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if strings.TrimSpace(line) != "held 5" {
		t.Fatalf("helper said %q", line)
	}

	clk := newClock(epoch)
	c := newNode(t, srv.URL(0), "alive", lease, clk.Now)
	at := epoch.Add(time.Second)
	ev := c.acquire(at, p)
	if ev.Kind != window.Denied || ev.Reason != window.Full || !ev.Retry.Equal(epoch.Add(lease)) || ev.State.Nodes != 2 {
		t.Fatalf("while the killed node's leases live: %+v; want denied until %v, 2 nodes", ev, epoch.Add(lease))
	}
	clk.Set(epoch.Add(lease - time.Millisecond))
	if ev := c.acquire(epoch.Add(lease-time.Millisecond), p); ev.Kind != window.Denied {
		t.Fatalf("a millisecond before they expire: %+v", ev)
	}
	clk.Set(epoch.Add(lease))
	ev = c.acquire(epoch.Add(lease), p)
	if ev.Kind != window.Granted || ev.State.Leases != 1 || ev.State.Nodes != 1 {
		t.Fatalf("once they expired: %+v; want granted, 1 lease, 1 live node", ev)
	}
}

// TestRedisKilledAndRestarted: with the store gone, a node answers from a
// fallback window capped at its share of the last shared window, says so
// in its status, and loses nothing; once the store is back (empty, as a
// Redis without persistence restarts) it seeds the last shared state,
// registers its running sessions, drops the one it ended meanwhile, tells
// the sessions it denied to ask again, and shares again.
func TestRedisKilledAndRestarted(t *testing.T) {
	srv := redistest.New(t)
	p := clauseParams(t, "initial_concurrency = 6\nslow_start = false")
	clk := newClock(epoch)
	a := newNode(t, srv.URL(0), "a", 30*time.Second, clk.Now)
	b := newNode(t, srv.URL(0), "b", 30*time.Second, clk.Now)
	c := newNode(t, srv.URL(0), "c", 30*time.Second, clk.Now)
	shared(t, a, b, c)
	first := a.acquire(epoch, p)
	b.acquire(epoch, p)
	ev := c.acquire(epoch, p)
	if first.Kind != window.Granted || ev.Kind != window.Granted || ev.State.Nodes != 3 || ev.State.Limit() != 6 {
		t.Fatalf("before: %+v", ev)
	}

	srv.Kill()
	now := epoch.Add(time.Second)
	clk.Set(now)
	// a holds 1 session; its share of the window of 6 among 3 nodes is 2.
	ev = a.acquire(now, p)
	if ev.Kind != window.Granted || !ev.State.Fallback || ev.State.Limit() != 2 || ev.State.Mine != 2 {
		t.Fatalf("first acquire without the store: %+v; want granted by a fallback window of 2", ev)
	}
	kept := ev.Lease
	ev = a.acquire(now, p)
	if ev.Kind != window.Denied || ev.Reason != window.Full || !ev.State.Fallback {
		t.Fatalf("second: %+v; want denied, the fallback window full", ev)
	}
	st := a.b.Status()
	if st.Mode != cluster.Fallback || st.Err == "" || st.Fallbacks != 1 || !strings.Contains(st.String(), "cluster: fallback") {
		t.Fatalf("status %+v (%s)", st, st)
	}
	ev = a.ask(now, window.Request{Op: window.Report, Dest: testDest, Params: p})
	if ev.Kind != window.Changed || !ev.State.Fallback {
		t.Fatalf("report without the store: %+v", ev)
	}
	a.release(now, first.Lease) // the store still counts it: stale
	if st := a.b.Status(); st.Fallbacks != 1 || a.falls.Load() != 1 {
		t.Fatalf("%d fallbacks, %d logged; want one of each for one outage", st.Fallbacks, a.falls.Load())
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.b.Status().Mode == cluster.Shared }, "node a to reconnect")
	if ev := a.next(window.Free); ev.Dest != testDest {
		t.Fatalf("free after reconnecting: %+v", ev)
	}
	if st := a.b.Status(); st.Reconnects != 1 || st.Err != "" || st.Leases != 1 {
		t.Fatalf("status after reconnecting: %+v", st)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	ctx := context.Background()
	if c, err := rdb.HGet(ctx, "t:{smtp/limited.test}:w", "c").Result(); err != nil || c != "6" {
		t.Fatalf("seeded window %q, %v; want the last shared window, 6", c, err)
	}
	members, err := rdb.ZRange(ctx, "t:{smtp/limited.test}:l", 0, -1).Result()
	if err != nil || len(members) != 1 || members[0] != a.b.memberOf(kept) {
		t.Fatalf("leases in the store %q, %v; want only the session a still runs", members, err)
	}
	clk.Set(now.Add(time.Second))
	ev = a.acquire(now.Add(time.Second), p)
	if ev.Kind != window.Granted || ev.State.Fallback || ev.State.Leases != 2 || ev.State.Limit() != 6 {
		t.Fatalf("acquire after reconnecting: %+v; want granted from the shared window", ev)
	}
}

// TestScriptsReloadedWhenTheServerLostThem: after SCRIPT FLUSH (or a
// restart that other clients' traffic noticed first) EVALSHA fails with
// NOSCRIPT; the book loads the scripts again and carries on, without
// falling back.
func TestScriptsReloadedWhenTheServerLostThem(t *testing.T) {
	srv := redistest.New(t)
	p := clauseParams(t, "slow_start = false")
	a := newNode(t, srv.URL(0), "a", 30*time.Second, newClock(epoch).Now)
	if ev := a.acquire(epoch, p); ev.Kind != window.Granted || ev.State.Fallback {
		t.Fatalf("first: %+v", ev)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if ev := a.acquire(epoch, p); ev.Kind != window.Granted || ev.State.Fallback || ev.State.Leases != 2 {
		t.Fatalf("after SCRIPT FLUSH: %+v", ev)
	}
	if st := a.b.Status(); st.Mode != cluster.Shared || st.Fallbacks != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// TestSessionsNeverExceedTheWindow: nodes on their own goroutines take,
// hold and end sessions as fast as they can; the sessions they count as
// running never exceed the shared window.
func TestSessionsNeverExceedTheWindow(t *testing.T) {
	srv := redistest.New(t)
	p := clauseParams(t, "maxthr = 3") // success cannot take the window past 3
	const nodes, sessions = 4, 150
	var running, peak, denied atomic.Int64
	var wg sync.WaitGroup
	ns := make([]*node, nodes)
	for i := range ns {
		ns[i] = newNode(t, srv.URL(0), fmt.Sprint("n", i), 30*time.Second, nil)
	}
	errs := make(chan error, nodes)
	for i := range ns {
		wg.Add(1)
		go func(n *node) {
			defer wg.Done()
			for done := 0; done < sessions; {
				n.b.Do(time.Now(), []window.Request{{Op: window.Acquire, Dest: testDest, Params: p}})
				ev := n.nextNoFatal(0)
				switch {
				case ev == nil:
					errs <- fmt.Errorf("%s: no answer", n.b.cfg.Node)
					return
				case ev.State.Fallback:
					errs <- fmt.Errorf("%s: fell back: %s", n.b.cfg.Node, n.b.Status())
					return
				case ev.Kind == window.Denied:
					denied.Add(1)
					n.nextNoFatal(window.Free) // a session ended somewhere
					continue
				}
				r := running.Add(1)
				for m := peak.Load(); r > m && !peak.CompareAndSwap(m, r); m = peak.Load() {
				}
				n.b.Do(time.Now(), []window.Request{{Op: window.Report, Dest: testDest, Params: p}})
				n.nextNoFatal(window.Changed)
				running.Add(-1) // before the store hears of the release
				n.b.Do(time.Now(), []window.Request{{Op: window.Release, Lease: ev.Lease}})
				done++
			}
		}(ns[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d sessions, peak %d running, %d denials", nodes*sessions, peak.Load(), denied.Load())
	if peak.Load() > 3 {
		t.Fatalf("%d sessions ran at once with a shared window of 3", peak.Load())
	}
	if denied.Load() == 0 {
		t.Fatalf("no acquire was ever denied: the nodes did not contend")
	}
}

// nextNoFatal is next for goroutines other than the test's: nil after
// the guard.
func (n *node) nextNoFatal(k window.Kind) *window.Event {
	deadline := time.After(guard)
	for {
		n.mu.Lock()
		for i, ev := range n.evs {
			if ev.Kind == k || k == 0 && ev.Kind != window.Free {
				n.evs = append(n.evs[:i], n.evs[i+1:]...)
				n.mu.Unlock()
				return &ev
			}
		}
		n.mu.Unlock()
		select {
		case <-n.got:
		case <-deadline:
			return nil
		}
	}
}

// TestPasswordFile: a store that wants a password is reached with the one
// in password_file; a wrong one leaves the node in fallback, saying why.
func TestPasswordFile(t *testing.T) {
	redistest.Require(t)
	srv, err := redistest.Start(t.TempDir(), 0, "--requirepass", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	os.WriteFile(bad, []byte("wrong\n"), 0o600)
	p := clauseParams(t, "")
	for _, tc := range []struct {
		file     string
		fallback bool
	}{{good, false}, {bad, true}} {
		cfg := cluster.Config{Redis: srv.URL(0), PasswordFile: tc.file, Node: "n", Lease: 30 * time.Second, Prefix: "t:"}
		b, err := New(cfg, Options{Log: hclog.New(&hclog.LoggerOptions{Output: io.Discard})})
		if err != nil {
			t.Fatal(err)
		}
		b.Do(epoch, []window.Request{{Op: window.Acquire, Dest: testDest, Params: p}})
		evs := <-b.Events()
		st := b.Status()
		b.Close()
		if len(evs) != 1 || evs[0].Kind != window.Granted || evs[0].State.Fallback != tc.fallback {
			t.Fatalf("%s: %+v", filepath.Base(tc.file), evs)
		}
		if tc.fallback && !strings.Contains(st.Err, "WRONGPASS") {
			t.Fatalf("%s: status %+v; want the server's refusal", filepath.Base(tc.file), st)
		}
	}
}

// TestFreeAcrossNodes: a node denied on a full window hears (Free, through
// the store's channel) when another node's session ends, and when another
// node's failure kills the destination — then asking again tells it until
// when.
func TestFreeAcrossNodes(t *testing.T) {
	srv := redistest.New(t)
	p := clauseParams(t, "initial_concurrency = 1")
	clk := newClock(epoch)
	a := newNode(t, srv.URL(0), "a", 30*time.Second, clk.Now)
	b := newNode(t, srv.URL(0), "b", 30*time.Second, clk.Now)
	shared(t, a, b)
	g := a.acquire(epoch, p)
	if ev := b.acquire(epoch, p); ev.Kind != window.Denied || ev.Reason != window.Full {
		t.Fatalf("b: %+v", ev)
	}
	a.release(epoch, g.Lease)
	if ev := b.next(window.Free); ev.Dest != testDest {
		t.Fatalf("b after a's release: %+v", ev)
	}

	a.acquire(epoch, p)
	if ev := b.acquire(epoch, p); ev.Kind != window.Denied {
		t.Fatalf("b again: %+v", ev)
	}
	until := epoch.Add(time.Minute)
	if ev := a.ask(epoch, window.Request{Op: window.Report, Dest: testDest, Params: p, Failed: true, DeadUntil: until}); !ev.Died {
		t.Fatalf("a's failure at window 1: %+v", ev)
	}
	b.next(window.Free)
	if ev := b.acquire(epoch, p); ev.Kind != window.Denied || ev.Reason != window.Dead || !ev.Retry.Equal(until) {
		t.Fatalf("b asking after the death: %+v; want dead until %v", ev, until)
	}
}

// TestPruneForgetsIdleDestinations: the book's memory follows the
// destinations in use, not every one it ever saw.
func TestPruneForgetsIdleDestinations(t *testing.T) {
	b := &Book{dests: make(map[window.Dest]*dest)}
	idle, busy, waiting, recent := window.Dest{Channel: "smtp", Host: "idle"}, window.Dest{Channel: "smtp", Host: "busy"},
		window.Dest{Channel: "smtp", Host: "waiting"}, window.Dest{Channel: "smtp", Host: "recent"}
	b.dest(idle, epoch)
	b.dest(busy, epoch).busy = 1
	b.dest(waiting, epoch).waiting = true
	b.dest(recent, epoch.Add(forget))
	b.prune(epoch.Add(forget + time.Second))
	if _, ok := b.dests[idle]; ok || len(b.dests) != 3 || len(b.order) != 3 || b.order[0] != busy || b.order[2] != recent {
		t.Fatalf("after prune: %v", b.order)
	}
}

// TestFallbackStartsFromTheStateFile: a node that starts while the store
// is down answers from fallback windows that start from what its state
// file remembered (Restore: the last shared window it saw), not from the
// clause's initial window; once the store is back, empty, the remembered
// window is what it seeds there.
func TestFallbackStartsFromTheStateFile(t *testing.T) {
	srv := redistest.New(t)
	srv.Kill()
	p := clauseParams(t, "") // initial 5, maxthr 20
	clk := newClock(epoch)
	a := newNode(t, srv.URL(0), "a", 30*time.Second, clk.Now)
	waitFor(t, func() bool { return a.b.Status().Mode == cluster.Fallback }, "node a to fall back")
	a.b.Restore([]Remembered{{Dest: testDest, Window: thread.WindowState{Concurrency: 8, Ceiling: 8, Strikes: 2,
		CeilingAt: epoch}}})
	for i := 0; i < 8; i++ {
		if ev := a.acquire(epoch, p); ev.Kind != window.Granted || !ev.State.Fallback || ev.State.Limit() != 8 {
			t.Fatalf("acquire %d without the store: %+v; want granted by the remembered window of 8", i, ev)
		}
	}
	if ev := a.acquire(epoch, p); ev.Kind != window.Denied || ev.Reason != window.Full {
		t.Fatalf("acquire 9: %+v; want denied, the remembered window full", ev)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.b.Status().Mode == cluster.Shared }, "node a to reach the store")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	if c, err := rdb.HGet(context.Background(), "t:{smtp/limited.test}:w", "c").Result(); err != nil || c != "8" {
		t.Fatalf("seeded window %q, %v; want the remembered one, 8", c, err)
	}
}

// TestLeasesByNode: the store's answers count the live sessions node by
// node, names in order, for mailq and WHY; the board (the simulator's
// twin) counts alike.
func TestLeasesByNode(t *testing.T) {
	srv := redistest.New(t)
	p := clauseParams(t, "slow_start = false")
	clk := newClock(epoch)
	a := newNode(t, srv.URL(0), "mx2", 30*time.Second, clk.Now)
	b := newNode(t, srv.URL(0), "mx1", 30*time.Second, clk.Now)
	shared(t, a, b)
	board := window.NewBoard(30 * time.Second)
	ba, bb := board.Node("mx2"), board.Node("mx1")
	acq := []window.Request{{Op: window.Acquire, Dest: testDest, Params: p}}
	a.acquire(epoch, p)
	ba.Do(epoch, acq)
	a.acquire(epoch, p)
	ba.Do(epoch, acq)
	ev := b.acquire(epoch, p)
	bev := bb.Do(epoch, acq)[0]
	want := []window.NodeLeases{{Node: "mx1", Leases: 1}, {Node: "mx2", Leases: 2}}
	if !reflect.DeepEqual(ev.State.ByNode, want) || !reflect.DeepEqual(bev.State.ByNode, want) {
		t.Fatalf("sessions by node: store %+v, board %+v; want %+v", ev.State.ByNode, bev.State.ByNode, want)
	}
	ev = a.ask(epoch, window.Request{Op: window.Report, Dest: testDest, Params: p})
	if !reflect.DeepEqual(ev.State.ByNode, want) {
		t.Fatalf("sessions by node in a report's answer: %+v; want %+v", ev.State.ByNode, want)
	}
}

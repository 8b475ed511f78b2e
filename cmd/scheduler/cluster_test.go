package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"zsched/ctlfile"
	"zsched/internal/redistest"
)

// The cluster tests run real scheduler nodes, each with its own
// postoffice, sharing one destination's window through a private
// redis-server; the destination is testagents/limited with its session
// slots in one directory for every node's agents, so its limit holds
// across the cluster. They poll conditions with generous deadlines (a
// failure guard only) and never sleep to synchronise.

const clusterLease = "3s" // the shortest a [cluster] allows: a killed node's sessions come free quickly

// clusterNode is one scheduler node of a test cluster.
type clusterNode struct {
	name string
	p    *postoffice
	cmd  *exec.Cmd
	log  *lineLog
	done <-chan error
}

// clusterSite is the destination the nodes share and what they deliver to it.
type clusterSite struct {
	t       *testing.T
	redis   *redistest.Server
	slots   string // the limiter's slot directory, shared by every agent
	deliver string // the limiter's delivery log, shared
	nodes   []*clusterNode
	want    map[string]bool // every recipient queued, as "user"
}

// newClusterSite starts a private redis-server and writes n nodes'
// configurations: one clause for smtp/* behind limited with limit k.
func newClusterSite(t *testing.T, n, k int) *clusterSite {
	return newSite(t, n, k, true)
}

// newSite is newClusterSite, without [cluster] unless shared: each node
// then has its own windows.
func newSite(t *testing.T, n, k int, shared bool) *clusterSite {
	t.Helper()
	srv := redistest.New(t)
	dir := t.TempDir()
	cs := &clusterSite{t: t, redis: srv, slots: filepath.Join(dir, "slots"), deliver: filepath.Join(dir, "deliveries.log"),
		want: map[string]bool{}}
	if err := os.Mkdir(cs.slots, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		p := newPostoffice(t, "")
		name := fmt.Sprintf("n%d", i)
		p.rewrite(fmt.Sprintf(`[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp", "-slots", %q, "-k", "%d", "-d", "20ms", "-log", %q]
interval = "1s"
retries = [1]
maxring = 10
maxthr = 10
initial_concurrency = 5

[cluster]
redis = %q
node = %q
lease = %q
`, p.agent("limited"), cs.slots, k, cs.deliver, srv.URL(0), name, clusterLease))
		if !shared {
			b, _ := os.ReadFile(p.config)
			head, _, _ := strings.Cut(string(b), "[cluster]")
			os.WriteFile(p.config, []byte(head), 0o644)
		}
		cs.nodes = append(cs.nodes, &clusterNode{name: name, p: p})
	}
	return cs
}

// enqueue queues msgs one-recipient messages to lim.test on node i.
func (cs *clusterSite) enqueue(i, msgs int) {
	cs.t.Helper()
	nd := cs.nodes[i]
	spool := &ctlfile.Spool{Root: filepath.Join(nd.p.dir, "po"), NoSync: true}
	for m := 0; m < msgs; m++ {
		u := fmt.Sprintf("%s.u%d@lim.test", nd.name, m)
		msg := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: cluster\n"), Body: []byte("x\n"),
			Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "lim.test", User: u}}}
		if _, err := spool.Enqueue(msg); err != nil {
			cs.t.Fatal(err)
		}
		cs.want[u] = true
	}
}

func (nd *clusterNode) start() {
	nd.cmd, nd.log, nd.done = nd.p.start("run")
}

// stop ends a node with SIGTERM and waits for it.
func (nd *clusterNode) stop(t *testing.T) {
	t.Helper()
	if err := nd.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitExit(t, nd.done, nd.log, time.Minute)
}

// kill SIGKILLs a node: no shutdown, no lease released; its agents see
// their input close and exit.
func (nd *clusterNode) kill(t *testing.T) {
	t.Helper()
	nd.cmd.Process.Kill()
	<-nd.done
}

// mailq is the node's `scheduler mailq`, "" when it does not answer.
func (nd *clusterNode) mailq() string {
	out, err := nd.p.scheduler("mailq").Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// delivered counts each recipient's deliveries in the limiter's log.
func (cs *clusterSite) delivered() map[string]int {
	got := map[string]int{}
	f, err := os.Open(cs.deliver)
	if err != nil {
		return got
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, user, ok := strings.Cut(sc.Text(), " "); ok {
			got[user]++
		}
	}
	return got
}

// allDelivered reports whether every queued recipient was delivered and
// every node's spool is empty.
func (cs *clusterSite) allDelivered() bool {
	got := cs.delivered()
	for u := range cs.want {
		if got[u] == 0 {
			return false
		}
	}
	for _, nd := range cs.nodes {
		if n := spoolFiles(filepath.Join(nd.p.dir, "po")); n > 0 {
			return false
		}
	}
	return true
}

func spoolFiles(po string) int {
	n := 0
	for _, sub := range []string{"transport", "queue"} {
		filepath.WalkDir(filepath.Join(po, sub), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				n++
			}
			return nil
		})
	}
	return n
}

// check asserts nothing was lost and at most dups recipients were
// delivered twice (those in flight at a kill).
func (cs *clusterSite) check(dups int) {
	cs.t.Helper()
	got := cs.delivered()
	twice := 0
	for u := range cs.want {
		switch n := got[u]; {
		case n == 0:
			cs.t.Fatalf("recipient %s never delivered", u)
		case n > 1:
			twice++
		}
	}
	if len(got) != len(cs.want) {
		cs.t.Fatalf("%d recipients delivered, %d queued", len(got), len(cs.want))
	}
	if twice > dups {
		cs.t.Fatalf("%d recipients delivered more than once, want at most %d (in flight at a kill)", twice, dups)
	}
}

// refusals counts the limiter's refusals (deferall outcomes) in every
// node's log so far.
func (cs *clusterSite) refusals() int {
	n := 0
	for _, nd := range cs.nodes {
		for _, o := range parseOutcomes(nd.log.String()) {
			if o.status == "deferall" {
				n++
			}
		}
	}
	return n
}

// waitLong polls cond until it holds; the deadline is a failure guard for
// a loaded machine, never a measure.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// TestClusterSharesOneWindow: three nodes, 150 messages each, against one
// destination that takes 5 sessions. With their windows shared through
// Redis the nodes behave as one scheduler: few refusals (each node alone
// would open its initial window of 5, three times the limit, at once),
// everything delivered once, mailq showing the cluster's view.
func TestClusterSharesOneWindow(t *testing.T) {
	const perNode, limit = 150, 5
	cs := newClusterSite(t, 3, limit)
	for i := range cs.nodes {
		cs.enqueue(i, perNode)
	}
	for _, nd := range cs.nodes {
		nd.start()
	}
	var view string
	waitLong(t, "a node's mailq showing the shared window", func() bool {
		view = cs.nodes[0].mailq()
		return strings.Contains(view, "cluster: shared (node n1, 3 nodes)") && strings.Contains(view, " nodes=3 ")
	})
	t.Logf("mailq on n1 mid-run:\n%s", view)
	waitLong(t, "every recipient delivered and every spool empty", cs.allDelivered)
	for _, nd := range cs.nodes {
		nd.stop(t)
	}
	cs.check(0)
	// Local windows start 3 × 5 sessions against 5 and keep probing past
	// the limit on every node; the shared window starts at 5 and probes
	// once for the cluster.
	// Refusals are measured, not judged here: how many depends on the
	// machine's load (README, "Running several nodes", and `lab cluster
	// -real`: about 10 shared, about 40 with local windows at 5 sessions).
	t.Logf("%d refusals for %d messages", cs.refusals(), perNode*3)
	// The window lived in the store, learned from every node's reports;
	// shutdown released every lease.
	rdb := redis.NewClient(&redis.Options{Addr: cs.redis.Addr})
	defer rdb.Close()
	ctx := context.Background()
	w, err := rdb.HGetAll(ctx, "zsched:{smtp/lim.test}:w").Result()
	if err != nil || w["c"] == "" || w["ceil"] == "" || w["ceil"] == "0" {
		t.Fatalf("the shared window in the store: %v (%v), want one with a learned ceiling", w, err)
	}
	if n, err := rdb.ZCard(ctx, "zsched:{smtp/lim.test}:l").Result(); err != nil || n != 0 {
		t.Fatalf("leases left in the store after every node stopped: %d (%v)", n, err)
	}
}

// TestClusterNodeKilled: one of three nodes is SIGKILLed mid-run. Its
// leases stay in the store until they expire; the others go on and
// finish their queues; restarted, it drains its own spool. Nothing is
// lost, and no more is delivered twice than was in flight at the kill.
func TestClusterNodeKilled(t *testing.T) {
	const perNode, limit = 150, 5
	cs := newClusterSite(t, 3, limit)
	for i := range cs.nodes {
		cs.enqueue(i, perNode)
	}
	for _, nd := range cs.nodes {
		nd.start()
	}
	rdb := redis.NewClient(&redis.Options{Addr: cs.redis.Addr})
	defer rdb.Close()
	ctx := context.Background()
	leases := func(node string) (live, all int) {
		zs, err := rdb.ZRangeWithScores(ctx, "zsched:{smtp/lim.test}:l", 0, -1).Result()
		if err != nil {
			return -1, -1
		}
		now := float64(time.Now().UnixMilli())
		for _, z := range zs {
			if m, _ := z.Member.(string); strings.HasPrefix(m, node+":") {
				all++
				if z.Score > now {
					live++
				}
			}
		}
		return live, all
	}
	victim := cs.nodes[0]
	waitLong(t, "the victim holding a lease mid-run", func() bool {
		live, _ := leases(victim.name)
		return live > 0 && len(cs.delivered()) >= perNode/2
	})
	victim.kill(t)
	before := cs.delivered()
	// Its leases are not renewed: they expire (a lease after their last
	// renewal at most), and the store counts them no more.
	waitLong(t, "the killed node's leases to expire", func() bool {
		live, _ := leases(victim.name)
		return live == 0
	})
	// The others go on and finish their own queues.
	waitLong(t, "the surviving nodes to deliver their queues", func() bool {
		got := cs.delivered()
		for u := range cs.want {
			if !strings.HasPrefix(u, victim.name+".") && got[u] == 0 {
				return false
			}
		}
		return true
	})
	left := 0
	for u := range cs.want {
		if strings.HasPrefix(u, victim.name+".") && before[u] == 0 {
			left++
		}
	}
	t.Logf("killed %s with %d of its recipients undelivered", victim.name, left)
	if left == 0 {
		t.Fatal("the victim had delivered its whole queue before the kill: nothing tested")
	}
	// Restarted, it drains its own spool.
	victim.start()
	waitLong(t, "every recipient delivered and every spool empty", cs.allDelivered)
	for _, nd := range cs.nodes {
		nd.stop(t)
	}
	// At most the jobs its agents held at the kill: maxthr per node.
	cs.check(10)
}

// TestClusterRedisDown: redis-server is killed mid-run and started again.
// The nodes fall back to local windows (mailq says "cluster: fallback"),
// go on delivering, come back to the store when it is up again ("cluster:
// shared") and drain; nothing is lost.
func TestClusterRedisDown(t *testing.T) {
	const perNode, limit = 200, 5
	cs := newClusterSite(t, 2, limit)
	for i := range cs.nodes {
		cs.enqueue(i, perNode)
	}
	for _, nd := range cs.nodes {
		nd.start()
	}
	waitLong(t, "both nodes on the shared store", func() bool {
		for _, nd := range cs.nodes {
			if !strings.Contains(nd.mailq(), "cluster: shared") {
				return false
			}
		}
		return true
	})
	waitLong(t, "deliveries under way", func() bool { return len(cs.delivered()) >= perNode/4 })
	cs.redis.Kill()
	var view string
	waitLong(t, "a node in fallback", func() bool {
		view = cs.nodes[0].mailq()
		return strings.Contains(view, "cluster: fallback since")
	})
	t.Logf("mailq on n1 with the store down:\n%s", view)
	at := len(cs.delivered())
	waitLong(t, "deliveries going on in fallback", func() bool { return len(cs.delivered()) > at })
	if err := cs.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "both nodes back on the shared store", func() bool {
		for _, nd := range cs.nodes {
			if !strings.Contains(nd.mailq(), "cluster: shared") {
				return false
			}
		}
		return true
	})
	waitLong(t, "every recipient delivered and every spool empty", cs.allDelivered)
	for _, nd := range cs.nodes {
		nd.stop(t)
	}
	cs.check(0)
}

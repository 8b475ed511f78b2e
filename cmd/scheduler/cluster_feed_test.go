package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestClusterFeedMessage: two real nodes with feed = "message" (refused
// with [cluster] before borrowed jobs took leases) share the windows of
// a.lim.test and b.lim.test (1 session each) through a private
// redis-server; every message has a recipient on both, so an agent may
// borrow a session of the other destination for its message's other
// recipient, with a lease of its own, when the shared window has room.
// The destinations sit behind one limiter of 2 sessions
// (testagents/limited: one slot directory for every agent of both nodes),
// as many as the two shared windows allow together: none is refused,
// everything is delivered once, and once the queues drain the store holds
// no lease while the nodes still run. This run does not tell whether a
// borrowed job without a lease would overrun a window (a full window keeps
// the borrowing node's thread asking, which borrows nothing either way);
// the simulated nodes over Redis do (cluster/redisbook's
// TestBorrowedJobsShareTheWindow).
func TestClusterFeedMessage(t *testing.T) {
	const perNode = 60
	cs := newClusterSite(t, 2, 2)
	for _, nd := range cs.nodes {
		b, err := os.ReadFile(nd.p.config)
		if err != nil {
			t.Fatal(err)
		}
		conf := strings.Replace(string(b), "maxthr = 10\ninitial_concurrency = 5\n",
			"maxthr = 1\nslow_start = false\nfeed = \"message\"\noverfeed = 1\n", 1)
		if conf == string(b) {
			t.Fatal("the site's clause changed: this test's edit of it no longer applies")
		}
		if err := os.WriteFile(nd.p.config, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, nd := range cs.nodes {
		nd.start()
	}
	// Mail only once both nodes share the store: until a node reaches it,
	// it runs on fallback windows of its own.
	for _, nd := range cs.nodes {
		waitLong(t, nd.name+" sharing the store", func() bool {
			return strings.Contains(nd.mailq(), "cluster: shared (node "+nd.name+",")
		})
	}
	for i, nd := range cs.nodes {
		for m := range perNode {
			a := fmt.Sprintf("%s.m%d.a@a.lim.test", nd.name, m)
			b := fmt.Sprintf("%s.m%d.b@b.lim.test", nd.name, m)
			args := []string{"enqueue", "-from", "s@example.org", "smtp/a.lim.test/" + a, "smtp/b.lim.test/" + b}
			if out, err := nd.p.scheduler(args...).CombinedOutput(); err != nil {
				t.Fatalf("node %d: enqueue: %v\n%s", i, err, out)
			}
			cs.want[a], cs.want[b] = true, true
		}
	}
	waitLong(t, "every recipient delivered and every spool empty", cs.allDelivered)
	rdb := redis.NewClient(&redis.Options{Addr: cs.redis.Addr})
	defer rdb.Close()
	ctx := context.Background()
	for _, h := range []string{"a.lim.test", "b.lim.test"} {
		key := "zsched:{smtp/" + h + "}:l"
		waitLong(t, "the leases of "+h+" released", func() bool {
			n, err := rdb.ZCard(ctx, key).Result()
			return err == nil && n == 0
		})
	}
	for _, nd := range cs.nodes {
		nd.stop(t)
	}
	cs.check(0)
	t.Logf("%d recipients delivered, %d refused", len(cs.want), cs.refusals())
	if n := cs.refusals(); n != 0 {
		t.Errorf("%d sessions refused by the limiter of 2: the nodes ran more than the shared windows allow", n)
	}
}

package redisbook

import (
	"context"
	_ "embed"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"zsched/internal/redistest"
	"zsched/window"
)

// reportBeforeSlowStart is the report script of the release before slow
// start (commit da56024^, verbatim): no state field st, ARGV 1–13
// settings, 14 "1" for a site failure, 15 its dead-until time, 16 the Free
// channel prefix, 17 the destination; KEYS state, leases, waiting, nodes.
var reportBeforeSlowStart = redis.NewScript(reportBeforeSlowStartLua)

//go:embed testdata/report-before-slow-start.lua
var reportBeforeSlowStartLua string

// oldNode is a node of the release before slow start on the store: it
// beats only in the nodes key, and judges with its own script.
type oldNode struct {
	rdb  *redis.Client
	name string
}

func (o oldNode) register(t *testing.T, now time.Time, lease time.Duration) {
	t.Helper()
	if err := o.rdb.ZAdd(context.Background(), "t:nodes", redis.Z{Score: float64(now.Add(lease).UnixMilli()), Member: o.name}).Err(); err != nil {
		t.Fatal(err)
	}
}

// fail reports a site failure on testDest as the older release does.
func (o oldNode) fail(t *testing.T, now time.Time, p window.Params, lease time.Duration) reply {
	t.Helper()
	b := &Book{}
	b.cfg.Lease, b.cfg.Node = lease, o.name
	args := b.args(now.UnixMilli(), p)[:13] // no slow_start
	args = append(args, "1", now.Add(time.Minute).UnixMilli(), "t:free:", testDest.String())
	keys := []string{"t:{" + testDest.String() + "}:w", "t:{" + testDest.String() + "}:l", "t:{" + testDest.String() + "}:q", "t:nodes"}
	res, err := reportBeforeSlowStart.Run(context.Background(), o.rdb, keys, args...).Slice()
	if err != nil || len(res) != 18 {
		t.Fatalf("the older release's report: %v (%d fields)", err, len(res))
	}
	// Its reply is this release's without st (field 19).
	cmd := redis.NewCmd(context.Background())
	cmd.SetVal(append(res, "0"))
	r, err := parse(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestMixedReleasesNoSlowStartWithAnOlderNode: while a node of the
// release before slow start shares the store, a window this release opens
// is not in slow start (the older node would take its one session for a
// window feedback governs, and its first failure there for a whole
// pseudo-cohort: dead at the default failed_cohort_limit of 1); the older
// node's failure is a fifth of a cohort, as between older nodes; a slow
// start under way when the older node came ends at the initial window.
// Once it is gone, new windows start slow again.
func TestMixedReleasesNoSlowStartWithAnOlderNode(t *testing.T) {
	srv := redistest.New(t)
	const lease = 30 * time.Second
	p := clauseParams(t, "") // slow_start, initial 5, failed_cohort_limit 1
	clk := newClock(epoch)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	a := newNode(t, srv.URL(0), "new", lease, clk.Now)
	shared(t, a)
	if ev := a.acquire(epoch, p); !ev.State.Window.Starting || ev.State.Limit() != 1 {
		t.Fatalf("acquire with this release alone: %+v; want the slow start's one session", ev)
	}
	old := oldNode{rdb: rdb, name: "old"}
	old.register(t, epoch, lease)
	// The slow start under way ends where the older release opens every
	// window; one opened now does not start slow.
	if ev := a.acquire(epoch, p); ev.State.Window.Starting || ev.State.Limit() != 5 {
		t.Fatalf("acquire once an older node is live: %+v; want the initial window of 5, no slow start", ev)
	}
	if err := rdb.Del(context.Background(), "t:{"+testDest.String()+"}:w").Err(); err != nil {
		t.Fatal(err)
	}
	ev := a.acquire(epoch, p)
	if ev.Kind != window.Granted || ev.State.Window.Starting || ev.State.Limit() != 5 {
		t.Fatalf("acquire beside an older node: %+v; want granted by the initial window of 5, no slow start", ev)
	}
	if r := old.fail(t, epoch, p, lease); r.died || r.w.Concurrency == 0 {
		t.Fatalf("the older node's first failure killed the destination: %+v", r)
	}
	// The older node gone (its lease over, or it left): slow start again.
	if err := rdb.ZRem(context.Background(), "t:nodes", "old").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(context.Background(), "t:{"+testDest.String()+"}:w").Err(); err != nil {
		t.Fatal(err)
	}
	if ev := a.acquire(epoch, p); !ev.State.Window.Starting || ev.State.Limit() != 1 {
		t.Fatalf("acquire with this release alone: %+v; want the slow start's one session", ev)
	}
}

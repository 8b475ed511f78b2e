package redisbook

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"zsched/config"
	"zsched/internal/redistest"
	"zsched/thread"
	"zsched/window"
)

var epoch = time.UnixMilli(1767323045000) // whole milliseconds, as the store keeps them

// judge runs the scripts' own Succeeded/Failed on one key with any busy
// count and any number of nodes (report takes the live leases and nodes;
// this reaches every value, as the core's feedback can).
var judge = redis.NewScript(prelude + `
local p = params()
local w = load(KEYS[1], p)
apply(w, p)
local died = 0
if ARGV[15] == '1' then
  if failed(w, p, p.now, tonumber(ARGV[17])) then died = 1 end
else
  succeeded(w, p, tonumber(ARGV[16]), p.now)
end
save(KEYS[1], w, p.now)
return reply('changed', 0, 0, 0, died, 0, 0, w)
`)

func clauseParams(t testing.TB, toml string) window.Params {
	t.Helper()
	cfg, err := config.Parse("t.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n[[clause]]\nselect = \"*/*\"\ncommand = \"x\"\n"+toml))
	if err != nil {
		t.Fatal(err)
	}
	return window.ParamsOf(&cfg.Clauses[0])
}

// paramSets: every feedback style, with and without the learned ceiling
// and dead-destination detection, odd limits and fractions.
var paramSets = []string{
	"",
	"learned_ceiling = false",
	"positive_feedback = \"1/sqrt_concurrency\"\nnegative_feedback = \"1/sqrt_concurrency\"",
	"positive_feedback = \"1\"\nnegative_feedback = \"1\"\nfailed_cohort_limit = 2",
	"positive_feedback = \"0.3/concurrency\"\nnegative_feedback = \"0.7/sqrt_concurrency\"\nfailed_cohort_limit = 3",
	"positive_feedback = \"1/7\"\nnegative_feedback = \"1/3\"\nfailed_cohort_limit = 0\nmaxthr = 37\ninitial_concurrency = 3",
	"ceiling_probe_factor = 3\nceiling_ttl = \"10m\"",
	"ceiling_probe_factor = 7\nceiling_ttl = \"90s\"\nmaxthr = 11",
	"slow_start = false",
	"positive_feedback = \"1\"\ninitial_concurrency = 9\nfailed_cohort_limit = 2",
}

func sameWindow(a, b thread.Window) bool {
	bits := func(x float64) uint64 {
		if x == 0 {
			return 0 // -0 and +0 compute alike
		}
		return math.Float64bits(x)
	}
	return a.Concurrency == b.Concurrency && bits(a.Success) == bits(b.Success) && bits(a.Failure) == bits(b.Failure) &&
		bits(a.FailCohorts) == bits(b.FailCohorts) && a.Ceiling == b.Ceiling && a.Strikes == b.Strikes &&
		a.Calm == b.Calm && a.Clean == b.Clean && a.CeilingAt.Equal(b.CeilingAt) && a.Starting == b.Starting
}

// TestLuaArithmeticIsThreadWindow drives the scripts' feedback and
// thread.Window with the same long random sequences (failures in bursts,
// any busy count, time jumps past the ceiling's TTL) and compares every
// field, floats bit for bit, after every step.
func TestLuaArithmeticIsThreadWindow(t *testing.T) {
	srv := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	ctx := context.Background()
	b := &Book{}
	b.cfg.Lease, b.cfg.Node = 30*time.Second, "test"
	steps := 0
	for pi, ps := range paramSets {
		p := clauseParams(t, ps)
		for seed := int64(1); seed <= 4; seed++ {
			rng := rand.New(rand.NewSource(seed))
			key := fmt.Sprintf("t:%d:%d", pi, seed)
			// The store's state depends on the requests only, so a whole
			// sequence goes in one pipeline and the answers are
			// compared afterwards, step by step.
			type step struct {
				fail  bool
				busy  int
				nodes int
				now   time.Time
			}
			var ss []step
			now := epoch
			failing := false
			for i := 0; i < 1000; i++ {
				now = now.Add(time.Duration(rng.Intn(5000)) * time.Millisecond)
				if rng.Intn(300) == 0 {
					now = now.Add(2 * time.Hour)
				}
				if rng.Intn(30) == 0 {
					failing = !failing
				}
				ss = append(ss, step{fail: rng.Intn(12) == 0 || failing && rng.Intn(3) > 0, busy: rng.Intn(p.Max + 4),
					nodes: rng.Intn(5), now: now})
			}
			if err := judge.Load(ctx, rdb).Err(); err != nil {
				t.Fatal(err)
			}
			pipe := rdb.Pipeline()
			cmds := make([]*redis.Cmd, len(ss))
			for i, s := range ss {
				fail := "0"
				if s.fail {
					fail = "1"
				}
				cmds[i] = judge.EvalSha(ctx, pipe, []string{key}, append(b.args(s.now.UnixMilli(), p), fail, s.busy, s.nodes)...)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			w := p.New()
			for i, s := range ss {
				rep, err := parse(cmds[i])
				if err != nil {
					t.Fatal(err)
				}
				var died bool
				w.Nodes = s.nodes
				if s.fail {
					died = w.Failed(s.now)
				} else {
					w.Succeeded(s.busy, s.now)
				}
				got := rep.w
				p.Apply(&got)
				if !sameWindow(got, w) || rep.died != died {
					t.Fatalf("params %d seed %d step %d (%+v): Lua\n%+v died %v\nGo\n%+v died %v",
						pi, seed, i, s, got, rep.died, w, died)
				}
				steps++
			}
		}
	}
	t.Logf("%d steps compared", steps)
}

// TestLuaSixthsMakeOneStep: the roundoff that makes six feedbacks of 1/6
// one step in Go does the same in Lua (without it the sum is
// 0.9999999999999999 and the window would not move).
func TestLuaSixthsMakeOneStep(t *testing.T) {
	srv := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, DisableIdentity: true})
	defer rdb.Close()
	p := clauseParams(t, "initial_concurrency = 6\nlearned_ceiling = false\nslow_start = false")
	b := &Book{}
	b.cfg.Lease, b.cfg.Node = 30*time.Second, "test"
	var rep reply
	for i := 0; i < 6; i++ {
		var err error
		rep, err = parse(judge.Run(context.Background(), rdb, []string{"sixths"}, append(b.args(epoch.UnixMilli(), p), "0", 6, 1)...))
		if err != nil {
			t.Fatal(err)
		}
	}
	if rep.w.Concurrency != 7 || rep.w.Success != 0 {
		t.Fatalf("after six successes at 6: window %d, success %v; want 7, 0", rep.w.Concurrency, rep.w.Success)
	}
}

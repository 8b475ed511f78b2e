package lab

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"zsched/config"
	"zsched/replay"
	"zsched/trace"
)

func TestScheduleIsReproducible(t *testing.T) {
	tr := ValidationTraffic()
	a, b := tr.Schedule(), tr.Schedule()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("one traffic, two schedules")
	}
	hosts := map[string]int{}
	for i, x := range a {
		if i > 0 && x.At < a[i-1].At || len(x.Hosts) == 0 || len(x.Hosts) > 3 {
			t.Fatalf("arrival %d: %+v", i, x)
		}
		for _, h := range x.Hosts {
			if strings.HasPrefix(h, "fast") {
				h = "fast"
			}
			hosts[h]++
		}
	}
	// 1 200 burst messages of 1 or 2 recipients, plus a share of the
	// base traffic, at the limited destination.
	if n := len(a); n < 2000 || n > 2600 || hosts[LimitedHost] < 1800 || hosts[DeadHost] == 0 || hosts[SlowHost] == 0 || hosts["fast"] == 0 {
		t.Errorf("%d messages, recipients by host %v", n, hosts)
	}
}

func TestSetupTOMLLoads(t *testing.T) {
	s := ValidationSetup()
	s.Knob = "learned_ceiling = false"
	agents := map[string]string{"limited": "/bin/limited", "deferall": "/bin/deferall", "slow": "/bin/slow", "sink": "/bin/sink"}
	cfg, err := config.Parse("v.toml", []byte(s.TOML("/po", "/slots", agents, true)))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scheduler.LogFormat != "json" || len(cfg.Clauses) != 4 || cfg.Clauses[0].LearnedCeiling {
		t.Errorf("config %+v", cfg.Clauses)
	}
	if i, _ := cfg.Match("smtp", FastHost(7)); i != 3 {
		t.Errorf("a fast host goes to clause %d", i)
	}
	for _, pf := range []bool{false, true} {
		c, err := config.Parse("p.toml", []byte(PostfixSimConfig(pf)))
		if err != nil || c.Clauses[0].LearnedCeiling == pf {
			t.Errorf("postfix-like %t: %v %+v", pf, err, c)
		}
	}
}

func TestCompare(t *testing.T) {
	r := func(att, def int, p50, p95 time.Duration) replay.Result {
		return replay.Result{FirstAttempts: att, FirstDeferred: def, DelayP50: p50, DelayP95: p95}
	}
	cs := Compare(r(100, 10, time.Second, 4*time.Second), r(100, 13, 1200*time.Millisecond, 5100*time.Millisecond))
	if cs[0].WithinLimit || cs[0].Diff() != "+3.0 pt" || !cs[1].WithinLimit || cs[2].WithinLimit || cs[2].Diff() != "+27 %" {
		t.Errorf("checks %+v %q %q", cs, cs[0].Diff(), cs[2].Diff())
	}
	rows := CompareChange(r(100, 2, time.Second, 2*time.Second), r(100, 9, time.Second, 50*time.Second),
		r(100, 3, time.Second, 2*time.Second), r(100, 8, 1100*time.Millisecond, 58*time.Second))
	for _, row := range rows {
		if !row.Direction || !row.Sized {
			t.Errorf("%+v", row)
		}
	}
	wrong := CompareChange(r(100, 2, time.Second, 2*time.Second), r(100, 9, time.Second, 2*time.Second),
		r(100, 9, time.Second, 2*time.Second), r(100, 2, time.Second, 2*time.Second))
	if wrong[0].Direction || wrong[0].Sized {
		t.Errorf("a change predicted backwards: %+v", wrong[0])
	}
}

// TestRecordAndSimulate records a short real run — the daemon, real agents,
// a burst at the limiter without the learned ceiling, JSON log — and
// simulates its log with its own configuration: the log reads, the
// simulation replays its recipients, and the limiter's limit of 5
// sessions is found.
func TestRecordAndSimulate(t *testing.T) {
	if testing.Short() {
		t.Skip("a real run of several seconds")
	}
	agents := bins.AgentsFor(t)
	tr := Traffic{Span: 4 * time.Second, Rate: 10, Fast: 20, Seed: 2,
		Bursts: []Burst{{At: time.Second, Length: time.Second, Messages: 150}}}
	s := ValidationSetup()
	s.Knob, s.Tail = "learned_ceiling = false", 2*time.Second
	dir := t.TempDir()
	rec, err := Record(context.Background(), dir, tr, s, agents, true)
	if err != nil {
		t.Fatal(err)
	}
	rs, m, err := Simulate(rec.Log, trace.Zsched, 0, rec.Config)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, a := range tr.Schedule() {
		want += len(a.Hosts)
	}
	real, pred := rs[0], rs[1]
	t.Logf("real %+v\npredicted %+v", real, pred)
	// How many recipients had an outcome before the daemon stopped is
	// the machine's pace (the dead destination's wait a minute); the
	// simulation replays exactly those.
	if rec.Count != len(tr.Schedule()) || real.Recipients == 0 || real.Recipients > want || pred.Recipients != real.Recipients {
		t.Errorf("enqueued %d messages, %d recipients; the log has %d, the simulation %d", rec.Count, want, real.Recipients, pred.Recipients)
	}
	if lim := m.Lookup("smtp", LimitedHost); lim.Shared || lim.Limit != 5 || real.Refusals == 0 {
		t.Errorf("limited.test: %+v (refusals %d)", lim, real.Refusals)
	}
	if filepath.Base(rec.Log) != "zsched.log" || pred.Name != "scheduler.toml" {
		t.Errorf("recording %+v, prediction %q", rec, pred.Name)
	}
}

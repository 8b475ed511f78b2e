package core_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"zsched/config"
	"zsched/core"
	"zsched/sim"
	"zsched/thread"
)

// learnedN returns n fresh learned destinations, the i-th used i×100 ms
// before now.
func learnedN(n int, now time.Time) []core.Destination {
	ds := make([]core.Destination, n)
	for i := range ds {
		ds[i] = core.Destination{Channel: "smtp", Host: fmt.Sprintf("h%06d.test", i),
			Window: thread.WindowState{Concurrency: 7, Success: 0.5}, Updated: now.Add(-time.Duration(i) * 100 * time.Millisecond)}
	}
	return ds
}

// Issue 16.19: learned state grew with every distinct destination (240 000
// of them: 364 MB, a 12 MB state file). It is capped at learned_max; what
// is kept is the most recently used.
func TestLearnedStateCapped(t *testing.T) {
	cfg := feedbackConfig(t, "")
	max := cfg.Scheduler.LearnedMax
	s := sim.New(cfg, sim.Sink, 1)
	in := learnedN(max+10000, s.Now)
	if n := s.Core.Learn(s.Now, in); n != len(in) {
		t.Fatalf("Learn took %d of %d fresh destinations", n, len(in))
	}
	got := s.Core.Destinations(s.Now)
	if len(got) != max {
		t.Fatalf("%d destinations kept, want learned_max %d", len(got), max)
	}
	for _, d := range got {
		if s.Now.Sub(d.Updated) >= time.Duration(max)*100*time.Millisecond {
			t.Fatalf("kept %s, used %v ago, over a more recent one", d.Host, s.Now.Sub(d.Updated))
		}
	}
}

// The cap holds for state remembered as threads go away, evicts the least
// recently used, and a dead destination outlives the TTL until its retry
// time. The result does not depend on the order state was learned in.
func TestLearnedStateCapAndTTL(t *testing.T) {
	c, err := config.Parse("test.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\nlearned_max = 50\nlearned_ttl = \"10m\"\n"+feedbackClause))
	if err != nil {
		t.Fatal(err)
	}
	s := sim.New(c, sim.Sink, 1)
	for i := range 200 {
		s.Enqueue(fmt.Sprintf("smtp/d%03d.test/u", i))
		s.Run(s.Now.Sub(sim.Epoch) + time.Second)
	}
	checkAllDelivered(t, s, 200)
	ds := s.Core.Destinations(s.Now)
	if len(ds) != 50 || ds[0].Host != "d150.test" || ds[49].Host != "d199.test" {
		t.Fatalf("%d destinations kept (%s … %s), want the last 50 used, d150 … d199", len(ds), ds[0].Host, ds[len(ds)-1].Host)
	}

	// TTL: a dead destination stays until its retry time.
	now := s.Now
	dead := core.Destination{Channel: "smtp", Host: "dead.test", DeadUntil: now.Add(30 * time.Minute), Updated: now}
	if n := s.Core.Learn(now, []core.Destination{dead}); n != 1 {
		t.Fatal("dead destination not learned")
	}
	if ds := s.Core.Destinations(now.Add(11 * time.Minute)); len(ds) != 1 || ds[0].Host != "dead.test" {
		t.Fatalf("after learned_ttl: %d destinations kept, want only the dead one", len(ds))
	}
	if ds := s.Core.Destinations(now.Add(30 * time.Minute)); len(ds) != 0 {
		t.Fatalf("at the dead destination's retry time: %d kept, want none", len(ds))
	}

	// Order of learning: same inputs, shuffled, same state kept.
	in := learnedN(120, now)
	for i := range in {
		in[i].Updated = now.Add(-time.Duration(i/3) * time.Second) // ties, broken by name
	}
	var first []core.Destination
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 5 {
		s := sim.New(c, sim.Sink, 1)
		r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		s.Core.Learn(now, in)
		got := s.Core.Destinations(now)
		if round == 0 {
			first = got
		} else if !reflect.DeepEqual(got, first) {
			t.Fatalf("learning in another order kept another state")
		}
	}
	if len(first) != 50 {
		t.Fatalf("%d kept of 120, want 50", len(first))
	}
}

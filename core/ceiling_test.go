package core_test

import (
	"fmt"
	"testing"
	"time"

	"zsched/report"
	"zsched/sim"
)

// limited5 answers as a server that takes 5 sessions: the sixth at once
// gets 421 (deferall); the others take a second.
func limited5(s *sim.Sim) sim.Behavior {
	return func(j sim.Job) sim.Response {
		st := make([]report.Status, len(j.Rcpts))
		if s.Busy[j.Host] >= 5 {
			for i := range st {
				st[i] = report.DeferAll
			}
			return sim.Response{Status: st, Text: "421 too many sessions"}
		}
		for i := range st {
			st[i] = report.OK
		}
		return sim.Response{Status: st, Delay: time.Second}
	}
}

// TestCeilingPersistsAcrossRestartAndExpires: a ceiling learned from a
// limiter is part of the learned destination state, comes back after a
// restart (Destinations, then Learn in the new core, as the daemon's
// state file carries it), shows in the thread view, and is forgotten
// ceiling_ttl after it was last confirmed.
func TestCeilingPersistsAcrossRestartAndExpires(t *testing.T) {
	cfg := feedbackConfig(t, "")
	s := sim.New(cfg, nil, 1)
	s.Behavior = limited5(s)
	for i := 0; i < 200; i++ {
		s.Enqueue(fmt.Sprintf("smtp/lim.test/u%d", i))
	}
	s.Run(10 * time.Minute)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	d, ok := dest(s, "lim.test")
	if !ok || d.Window.Ceiling != 5 || d.Window.Strikes < 2 {
		t.Fatalf("learned state %+v (known %v), want a confirmed ceiling of 5", d, ok)
	}
	saved := s.Core.Destinations(s.Now)

	s.Restart(cfg, 2)
	if n := s.Core.Learn(s.Now, saved); n != len(saved) {
		t.Fatalf("restored %d of %d destinations", n, len(saved))
	}
	s.Behavior = limited5(s)
	s.Enqueue("smtp/lim.test/after")
	tv, ok := s.Core.Thread(s.Now, "smtp", "lim.test")
	if !ok || tv.Ceiling != 5 || !tv.Confirmed {
		t.Fatalf("after a restart the thread shows ceiling %d (confirmed %v), want 5 confirmed", tv.Ceiling, tv.Confirmed)
	}
	late := d.Window.CeilingAt.Add(time.Duration(cfg.Clauses[0].CeilingTTL) + time.Second)
	if tv, _ := s.Core.Thread(late, "smtp", "lim.test"); tv.Ceiling != 0 {
		t.Fatalf("ceiling %d still shown past ceiling_ttl", tv.Ceiling)
	}
}

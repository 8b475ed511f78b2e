package core_test

import (
	"fmt"
	"testing"
	"time"

	"zsched/core"
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

// TestRefusedProbeIsRetriedAtOnce: past a confirmed ceiling the window
// probes the limit now and then, and the limiter refuses the probe. That
// refusal is the limit speaking, not the site failing: its recipients are
// due again at once (fed within the window the refusal brought back to
// the ceiling), not at their retry time ten minutes later, and the queue
// drains at the limiter's pace. A site that then refuses every session is
// failing: its recipients wait for their retry times (no loop of at-once
// retries), and the destination dies as Postfix's would.
func TestRefusedProbeIsRetriedAtOnce(t *testing.T) {
	var s *sim.Sim
	down := false
	sessions := 0
	s = sim.New(feedbackConfig(t, ""), func(j sim.Job) sim.Response {
		sessions++
		if down {
			return refuse(j)
		}
		return limited5(s)(j)
	}, 1)
	s.Check = true
	const msgs = 400
	for i := 0; i < msgs; i++ {
		s.Enqueue(fmt.Sprintf("smtp/limited.test/u%d", i))
	}
	// 400 one-second sessions, 5 at a time: 80 s at the limiter's pace.
	// The two refusals that teach and confirm the ceiling wait for their
	// retry time (10m); every later one is a probe past the confirmed
	// ceiling, due again at once.
	s.Run(2 * time.Minute)
	var refused []core.Outcome
	for _, o := range s.Outcomes {
		if o.Status == report.DeferAll.String() {
			refused = append(refused, o)
		}
	}
	if d, _ := dest(s, "limited.test"); d.Window.Ceiling != 5 || d.Window.Strikes != 2 {
		t.Fatalf("learned %+v, want the confirmed ceiling 5", d.Window)
	}
	if len(refused) < 4 {
		t.Fatalf("%d refusals: the window did not probe past its ceiling", len(refused))
	}
	for i, o := range refused {
		at := sim.Epoch.Add(o.Delay)
		if atOnce := !o.Next.After(at); atOnce != (i >= 2) {
			t.Errorf("refusal %d of %d (%s at +%v): next try at +%v", i+1, len(refused), o.User, o.Delay, o.Next.Sub(sim.Epoch))
		}
	}
	if p := s.Pending(); len(p) > 2 {
		t.Fatalf("%d recipients pending at 2 minutes (%v), want only the 2 that taught the ceiling", len(p), p)
	}
	s.Run(15 * time.Minute)
	checkAllDelivered(t, s, msgs)

	down, sessions = true, 0
	for i := 0; i < 20; i++ {
		s.Enqueue(fmt.Sprintf("smtp/limited.test/late%d", i))
	}
	s.Run(s.Now.Sub(sim.Epoch) + time.Minute)
	if sessions > 10 {
		t.Fatalf("%d sessions in a minute to a site refusing every one: refusals retried at once in a loop", sessions)
	}
	if tv, _ := s.Core.Thread(s.Now, "smtp", "limited.test"); !tv.Backoff.After(s.Now) {
		t.Fatalf("a site refusing everything is not dead after %d sessions: %+v", sessions, tv)
	}
}

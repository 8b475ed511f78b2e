package core_test

import (
	"fmt"
	"testing"
	"time"

	"zsched/sim"
)

// TestRingCap: under a ring cap a ring runs at most that many agents
// whatever its maxring; lowered, idle agents beyond it end at once;
// lifted, the ring starts agents for its waiting threads in the next
// batch. Nothing is lost.
func TestRingCap(t *testing.T) {
	s := sim.New(cfg(t, smtp), func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Minute
		return r
	}, 1)
	s.Check = true
	s.Do(func(now time.Time) { s.Core.SetRingCap(now, 2) })
	for i := range 8 {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i))
	}
	s.Advance(time.Second)
	if n := len(s.Agents); n != 2 || s.PeakAgents != 2 {
		t.Fatalf("under a cap of 2: %d agents, peak %d", n, s.PeakAgents)
	}
	if rs := s.Core.Rings(s.Now); len(rs) != 1 || rs[0].MaxRing != 2 {
		t.Fatalf("rings %+v: want one, showing maxring 2 under the cap", rs)
	}
	s.Do(func(now time.Time) { s.Core.SetRingCap(now, 0) })
	s.Advance(2 * time.Second)
	if len(s.Agents) != 8 {
		t.Fatalf("the cap lifted: %d agents, want one per waiting thread (8)", len(s.Agents))
	}
	run(t, s, time.Hour)
	if len(s.Pending()) != 0 || len(s.Completed) != 8 {
		t.Fatalf("pending %v, %d completed", s.Pending(), len(s.Completed))
	}
	// The queue is empty and its agents idle: a cap of 1 ends all but one.
	if err := s.Core.Check(s.Now); err != nil {
		t.Fatal(err)
	}
	idle := 0
	for _, r := range s.Core.Rings(s.Now) {
		idle += r.Idle
	}
	if idle < 2 {
		t.Skipf("%d idle agents left at the end: nothing to retire", idle)
	}
	s.Do(func(now time.Time) { s.Core.SetRingCap(now, 1) })
	s.Advance(s.Now.Sub(sim.Epoch) + time.Second)
	if rs := s.Core.Rings(s.Now); len(rs) == 1 && rs[0].Agents > 1 {
		t.Fatalf("a cap of 1 over %d idle agents leaves %d", idle, rs[0].Agents)
	}
}

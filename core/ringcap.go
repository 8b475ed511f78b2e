package core

import (
	"time"

	"zsched/config"
)

// SetRingCap caps every ring at n agents, below its clause's maxring; 0
// lifts the cap. The caller's startup read (package admission) holds
// delivery to startup_maxring agents per ring while the queue found at
// start is read, and lifts the cap when the read ends. The cap outlives
// a reload; nothing else changes: windows, throttles and what was learned
// are kept. Lowered, it retires idle agents beyond it at once and busy
// ones as they finish, as a lowered maxring does; lifted, rings with
// wanting threads start agents in the next batch.
func (s *Core) SetRingCap(now time.Time, n int) {
	s.event("SetRingCap")
	if n < 0 {
		n = 0
	}
	if n == s.ringCap {
		return
	}
	s.ringCap = n
	for _, r := range sortedRings(s.rings) {
		c := s.clause(r.Clause)
		for in, ok := r.FirstIdle(); ok && r.Agents()-s.ending(r) > s.maxRing(c); in, ok = r.FirstIdle() {
			r.RemoveIdle(in.Agent)
			s.end(s.agents[in.Agent], "ring over its cap")
		}
	}
	for _, t := range sortedThreads(s.threads) {
		s.update(t, now)
	}
	s.unblock(now)
}

// RingCap returns the cap SetRingCap set; 0: none.
func (s *Core) RingCap() int { return s.ringCap }

// maxRing is how many agents a ring of clause c may run: its maxring,
// under the cap.
func (s *Core) maxRing(c *config.Clause) int {
	if s.ringCap > 0 {
		return min(c.MaxRing, s.ringCap)
	}
	return c.MaxRing
}

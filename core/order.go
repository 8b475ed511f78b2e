package core

import (
	"time"

	"zsched/ring"
	"zsched/vertex"
)

// The ring's feed order. Every vertex carries a Rank; threads feed their
// lowest rank first and rings offer the thread holding the lowest rank.
// These hooks are where the ring's job lists learn of messages and slots;
// the plain FIFO order needs nothing but the message's arrival sequence.

// orderAdd ranks the new vertices of message m in ring r.
func (s *Scheduler) orderAdd(r *ring.Ring, m *vertex.Message, vs []*vertex.Vertex, now time.Time) {
	for _, v := range vs {
		v.Rank = float64(m.Seq)
	}
}

// orderFed counts one slot for v's job in its ring when v is fed.
func (s *Scheduler) orderFed(r *ring.Ring, v *vertex.Vertex, now time.Time) {}

// orderDone tells the ring v has no recipient left.
func (s *Scheduler) orderDone(v *vertex.Vertex) {}

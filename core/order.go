package core

import (
	"time"

	"zsched/config"
	"zsched/ring"
	"zsched/thread"
	"zsched/vertex"
)

// The ring's feed order (DESIGN §7). Every vertex carries a Rank; threads
// feed their lowest rank first and rings offer the thread holding the
// lowest rank. Each ring keeps Postfix's job lists (package ring): with
// order "preemptive" and "fifo" a vertex's rank is its job's place on the
// scheduler's list, which preemption reorders; "random" and "age" rank
// vertices here and the lists only count.
//
// A ring takes its clause's order and preemption parameters when the core
// creates it and at every reload (setOrder), not at every hook.
//
// The hooks, and where the core calls them:
//   - orderAdd: a vertex is placed in a ring (arrival, reload, routing),
//     before it goes on its thread's heap;
//   - orderPick: a vertex is about to be picked in the ring — before
//     ring.Best in next and serve, before the pop in feed. The first call
//     after a slot makes Postfix's preemption attempt; later ones before
//     the next slot do nothing.
//   - orderFed: a vertex was picked: one slot for its job;
//   - orderRequeue: a fed vertex goes back on its thread's heap (deferred);
//   - orderDone: a vertex leaves its ring (done, expired, dropped, or moved
//     to another ring by a reload).

// orderAdd ranks a vertex placed in ring r.
func (s *Core) orderAdd(r *ring.Ring, v *vertex.Vertex, now time.Time) {
	r.AddEntry(v, now)
	s.rankOwn(s.clause(r.Clause), v)
}

// orderPick makes the ring's preemption attempt before a pick; true when a
// job moved, so that the ring's best thread may have changed. A ring whose
// order does not preempt makes none (ring.Preempt).
func (s *Core) orderPick(r *ring.Ring, now time.Time) bool {
	s.picker.s, s.picker.r, s.picker.now = s, r, now
	return r.Preempt(now, &s.picker)
}

// orderPickFrom is orderPick for an agent about to feed from its thread t,
// which an earlier pop in the same feed may have left out of place in the
// ring's wanting heap.
func (s *Core) orderPickFrom(r *ring.Ring, t *thread.Thread, now time.Time) {
	if r.PreemptPending() {
		s.ring(t).Update(t, now)
		s.orderPick(r, now)
	}
}

// orderFed counts one slot for v's job in its ring when v is fed.
func (s *Core) orderFed(r *ring.Ring, v *vertex.Vertex, now time.Time) { r.Select(v) }

// orderRequeue counts a fed vertex as queued again, before it goes back on
// its thread's heap.
func (s *Core) orderRequeue(v *vertex.Vertex, now time.Time) {
	t := s.threadOf(v)
	if t == nil {
		return
	}
	r := s.ring(t)
	r.Requeue(v, now)
	s.rankOwn(s.clause(r.Clause), v)
}

// orderDone tells the ring v left it.
func (s *Core) orderDone(v *vertex.Vertex) { ring.Leave(v) }

// setOrder gives ring r the order and preemption parameters of clause c.
func setOrder(r *ring.Ring, c *config.Clause) {
	p := ring.Preemption{
		Cost:     c.DeliverySlotCost,
		Loan:     c.DeliverySlotLoan,
		Discount: c.DeliverySlotDiscount,
		MinSlots: c.MinimumDeliverySlots,
	}
	if c.Order != config.OrderPreemptive {
		p.Cost = 0
	}
	r.SetOrder(c.Order == config.OrderPreemptive || c.Order == config.OrderFIFO, p)
}

// rankOwn ranks v for the orders that do not follow the job list: ZMailer's
// shuffle (a fresh random place at every queueing, from the injected rand)
// and ageorder (oldest message file first).
func (s *Core) rankOwn(c *config.Clause, v *vertex.Vertex) {
	switch c.Order {
	case config.OrderRandom:
		v.Rank = s.rng.Float64()
	case config.OrderAge:
		a := v.Msg.Arrival
		v.Rank = float64(a.Unix()) + float64(a.Nanosecond())/1e9
	}
}

// orderPicker is the ring's view of the core's threads (ring.Picker).
type orderPicker struct {
	s   *Core
	r   *ring.Ring
	now time.Time
}

// Open reports whether a free agent could be given v now.
func (p *orderPicker) Open(v *vertex.Vertex) bool {
	t := p.s.threadOf(v)
	return t != nil && v.In(&t.Ready) && t.Wants(p.now)
}

// Moved restores the ring's wanting heap after v's rank changed.
func (p *orderPicker) Moved(v *vertex.Vertex) {
	if t := p.s.threadOf(v); t != nil {
		p.r.Update(t, p.now)
	}
}

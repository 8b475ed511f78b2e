package ring

import (
	"time"

	"zsched/vertex"
)

// Preemption (SCHEDULER_README "How the preemption works", qmgr_job.c
// qmgr_job_preempt and qmgr_job_candidate), in terms of this ring:
//
//   - The current job is the job a free agent would be given now: the job
//     of the best vertex among the ring's wanting threads (the head of the
//     wanting heap). Jobs before it on the list have no open vertex; they
//     are the blockers the README's selection loop skips.
//   - It may be preempted when it has slots available and could ever
//     accumulate minimum_delivery_slots. Candidates are the other jobs on
//     the list that are not blocked, are not waiting for jobs that preempt
//     them (no stack children), and need no more slots than the current job
//     can still accumulate, max_slots = (queued + available) / cost. The
//     best has the highest (time in queue + 1 s) / (its entries, unread
//     included), ties going to the one earlier on the list (index.go finds
//     it).
//   - It preempts when available / cost + loan ≥ needed × (100 − discount)
//     / 100: it moves in front of the current job, becomes its stack child,
//     and the current job pays needed × cost slots now; the difference from
//     what it really uses is settled when it leaves the stack (pop).
//
// A candidate is confirmed open by its vertices; one that is not becomes a
// blocker (blockers.go).

// Preemption is Postfix's preemption parameters of the ring's clause.
type Preemption struct {
	Cost     int // delivery_slot_cost; below 2 nothing is preempted
	Loan     int // delivery_slot_loan, slots
	Discount int // delivery_slot_discount, percent
	MinSlots int // minimum_delivery_slots
}

// policy is a ring's order as its clause sets it.
type policy struct {
	ranked    bool       // vertex ranks follow the list
	k         Preemption // as last set
	attempted bool       // a preemption was attempted since the last slot
}

// SetOrder sets the ring's order: ranked says vertex ranks follow the job
// list (orders preemptive and fifo; otherwise the caller ranks vertices and
// the lists only count), p the preemption parameters (Cost below 2: none).
// The core calls it when it creates the ring and at every reload.
func (r *Ring) SetOrder(ranked bool, p Preemption) {
	js := &r.jobs
	was := js.indexing()
	js.ranked, js.k = ranked, p
	switch {
	case js.indexing() && !was:
		// Every job has its home node on the list: list order, not the
		// map's.
		for n := js.list.head; n != nil; n = n.next {
			if n == &n.job.home {
				js.sync(n.job)
			}
		}
	case was && !js.indexing():
		js.dropIndex()
	}
}

// Picker is the caller's view of the threads that hold the ring's vertices.
type Picker interface {
	// Open reports whether v could be fed to a free agent now: it is on
	// its thread's ready heap and the thread wants an agent.
	Open(v *vertex.Vertex) bool
	// Moved is called for every queued vertex whose Rank changed, after
	// it was re-fixed in its thread's heap: the caller restores the
	// ring's wanting heap for the thread (Update).
	Moved(v *vertex.Vertex)
}

// Preempt makes the preemption attempt that precedes picking a vertex in r
// (qmgr_job_entry_select calls qmgr_job_preempt before every selection).
// At most one attempt is made per slot: later calls before the next Select
// do nothing, so the caller may call it at every place a pick may follow.
// It reports whether a job was moved; its vertices then carry their new
// rank and p.Moved was called for each queued one.
func (r *Ring) Preempt(now time.Time, p Picker) bool {
	js := &r.jobs
	k := js.k
	if !js.ranked || k.Cost < 2 || js.attempted {
		return false
	}
	js.attempted = true
	r.tick(now)
	cur := r.Current()
	if old := js.parked; old != nil && old != cur {
		js.parked = nil
		js.sync(old) // back in the index now that it is not current
	}
	if cur == nil || cur.avail <= 0 || int(cur.total()) < k.MinSlots*k.Cost {
		return false
	}
	maxSlots := int(cur.queued+cur.avail) / k.Cost
	if maxSlots <= 0 {
		return false
	}
	c := js.candidate(cur, maxSlots, p)
	if c == nil {
		return false
	}
	expected := int(c.needed())
	if (int(cur.avail)/k.Cost+k.Loan)*100 < expected*(100-k.Discount) {
		return false
	}
	if c.level > 0 {
		js.pop(c)
	}
	js.flush()
	js.untree(c)
	if c.moved() {
		js.list.remove(c.away)
		c.pos = &c.home
	}
	if c.away == nil {
		c.away = &node{job: c}
	}
	js.list.insertBefore(c.away, cur.pos, js)
	c.pos = c.away
	cur.addChild(c)
	c.level = cur.level + 1
	cur.avail -= int32(expected * k.Cost)
	c.used = -int32(expected)
	js.sync(cur)
	js.sync(c)
	js.rerank(c, p)
	return true
}

// PreemptPending reports whether the next Preempt would make an attempt:
// the order is preemptive and no attempt was made since the last slot.
func (r *Ring) PreemptPending() bool { return r.jobs.indexing() && !r.jobs.attempted }

// Current returns the job a free agent would be given now: the job of the
// best vertex among the ring's wanting threads, or nil.
func (r *Ring) Current() *Job {
	t := r.Best(nil)
	if t == nil {
		return nil
	}
	v := t.Ready.Min()
	if v == nil {
		return nil
	}
	j := JobOf(v)
	if j == nil || j.ring != r || j.level < 0 {
		return nil
	}
	return j
}

// candidate returns the best open job other than cur that needs at most
// maxSlots slots.
func (js *jobs) candidate(cur *Job, maxSlots int, p Picker) *Job {
	if js.parked != cur {
		// The current job stays out of the index while it is current:
		// the slots it is fed change its key every time.
		js.parked = cur
		js.sync(cur)
	}
	js.flush()
	for {
		c := js.query(maxSlots)
		if c == nil || js.open(c, p) {
			return c
		}
		js.block(c)
	}
}

// open reports whether some vertex of j could be fed to a free agent now,
// looking first at the vertex that was open last time.
func (js *jobs) open(j *Job, p Picker) bool {
	if w := j.lastOpen; w != nil && JobOf(w) == j && !fed(w) && p.Open(w) {
		return true
	}
	found := false
	for _, v := range j.Msg.Vertices {
		if JobOf(v) == j && !fed(v) && p.Open(v) {
			j.lastOpen, found = v, true
			break
		}
	}
	return found
}

// eligible reports whether j may be a candidate: on the list, not blocked,
// not preempted by a job still stacked on it, with entries left.
func (js *jobs) eligible(j *Job) bool {
	return !j.freed && j.level >= 0 && j.child == nil && !j.blocked && j.needed() > 0
}

// indexing reports whether the ring keeps the candidate index: only the
// preemptive order needs it.
func (js *jobs) indexing() bool { return js.ranked && js.k.Cost >= 2 }

// filed reports whether j belongs in the index now.
func (js *jobs) filed(j *Job) bool {
	return js.indexing() && js.eligible(j) && j != js.parked
}

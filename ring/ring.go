// Package ring owns a thread-ring: the threads of one clause and channel (one
// host when the clause's command is host-bound) that share a transport-agent
// command, the ring's pool of idle agents, and the order in which the ring's
// threads are offered to its agents — the thread holding the best vertex
// first (ZMailer's pick_next_thread, ordered by jobs instead of a pointer).
// That order is the ring's job lists with Postfix's preemptive delivery-slot
// scheduling (jobs.go, preempt.go). Pure: no I/O, no clock.
package ring

import (
	"time"

	"zsched/thread"
	"zsched/vertex"
)

// Key identifies a ring. Host is set only for host-bound clauses.
type Key struct {
	Clause  int
	Channel string
	Host    string
}

// Idle is an agent parked in a ring's idle pool.
type Idle struct {
	Agent int
	Host  string // the host it last served (its cached connection)
	Since time.Time
}

// Ring is one thread-ring.
type Ring struct {
	Key
	HostBound bool

	Threads int // threads in the ring
	Agents  int // agents of the ring, idle ones included
	Idle    []Idle

	wanting []*thread.Thread // heap: threads that could use one more agent
	Blocked bool             // queued in the scheduler's blocked-ring queue

	jobs jobs // the job lists and preemption state (jobs.go)
}

// New returns an empty ring.
func New(k Key, hostBound bool) *Ring { return &Ring{Key: k, HostBound: hostBound} }

// Update puts t in or out of the wanting heap as t.Wants says, and restores
// the heap's order after t's best vertex changed.
func (r *Ring) Update(t *thread.Thread, now time.Time) {
	want := t.Wants(now)
	switch {
	case want && t.RingIndex < 0:
		t.RingIndex = len(r.wanting)
		r.wanting = append(r.wanting, t)
		r.up(t.RingIndex)
	case want:
		if !r.down(t.RingIndex) {
			r.up(t.RingIndex)
		}
	case t.RingIndex >= 0:
		r.remove(t)
	}
	if want {
		r.jobs.release(t.Key) // jobs blocked at t may be fed again
	}
}

// Remove takes t out of the wanting heap.
func (r *Ring) Remove(t *thread.Thread) {
	if t.RingIndex >= 0 {
		r.remove(t)
	}
}

// Best returns the wanting thread holding the ring's best vertex, skipping
// skip, or nil. It looks at most at the heap's root and its children, so it
// is O(1); when skip is the root, the better child stands in.
func (r *Ring) Best(skip *thread.Thread) *thread.Thread {
	if len(r.wanting) == 0 {
		return nil
	}
	if r.wanting[0] != skip {
		return r.wanting[0]
	}
	var best *thread.Thread
	for _, j := range []int{1, 2} {
		if j < len(r.wanting) && (best == nil || less(r.wanting[j], best)) {
			best = r.wanting[j]
		}
	}
	return best
}

// Wanting returns the number of threads that could use another agent.
func (r *Ring) Wanting() int { return len(r.wanting) }

// Park puts an agent in the idle pool (most recent last).
func (r *Ring) Park(id int, host string, now time.Time) {
	r.Idle = append(r.Idle, Idle{Agent: id, Host: host, Since: now})
}

// Unpark takes an idle agent for host: the most recent one that served host,
// else (unless host-bound) the most recent one. ok is false when none fits.
func (r *Ring) Unpark(host string) (int, bool) {
	for i := len(r.Idle) - 1; i >= 0; i-- {
		if r.Idle[i].Host == host {
			return r.take(i), true
		}
	}
	if r.HostBound || len(r.Idle) == 0 {
		return 0, false
	}
	return r.take(len(r.Idle) - 1), true
}

// Forget removes agent id from the idle pool, if it is there.
func (r *Ring) Forget(id int) bool {
	for i := range r.Idle {
		if r.Idle[i].Agent == id {
			r.take(i)
			return true
		}
	}
	return false
}

func (r *Ring) take(i int) int {
	id := r.Idle[i].Agent
	r.Idle = append(r.Idle[:i], r.Idle[i+1:]...)
	return id
}

// Empty reports whether the ring holds nothing and can be dropped.
func (r *Ring) Empty() bool { return r.Threads == 0 && r.Agents == 0 }

func less(a, b *thread.Thread) bool { return vertex.FirstBefore(&a.Ready, &b.Ready) }

func (r *Ring) swap(i, j int) {
	r.wanting[i], r.wanting[j] = r.wanting[j], r.wanting[i]
	r.wanting[i].RingIndex = i
	r.wanting[j].RingIndex = j
}

func (r *Ring) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !less(r.wanting[j], r.wanting[i]) {
			break
		}
		r.swap(i, j)
		j = i
	}
}

func (r *Ring) down(i0 int) bool {
	i, n := i0, len(r.wanting)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && less(r.wanting[k], r.wanting[j]) {
			j = k
		}
		if !less(r.wanting[j], r.wanting[i]) {
			break
		}
		r.swap(i, j)
		i = j
	}
	return i > i0
}

func (r *Ring) remove(t *thread.Thread) {
	i := t.RingIndex
	n := len(r.wanting) - 1
	if i != n {
		r.swap(i, n)
	}
	r.wanting[n] = nil
	r.wanting = r.wanting[:n]
	t.RingIndex = -1
	if i != n {
		if !r.down(i) {
			r.up(i)
		}
	}
}

// Package ring owns a thread-ring: the threads of one clause and channel (one
// host when the clause's command is host-bound) that share a transport-agent
// command, the ring's agents and its pool of idle ones, and the order in
// which the ring's threads are offered to its agents — the thread holding the
// best vertex first (ZMailer's pick_next_thread, ordered by jobs instead of a
// pointer). That order is the ring's job lists with Postfix's preemptive
// delivery-slot scheduling: jobs.go (a message's entries in the ring),
// list.go (the scheduler's list), stack.go (the preemption stack), index.go
// (the candidate index), blockers.go, preempt.go (the policy). The core
// decides when threads and agents join and leave; the ring keeps the counts
// and the order. Pure: no I/O, no clock.
package ring

import (
	"iter"
	"time"

	"zsched/thread"
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
	hostBound bool

	threads int         // threads in the ring
	agents  int         // agents of the ring, idle ones included
	idle    []Idle      // the idle pool, most recent last
	wanting thread.Heap // threads that could use one more agent (ByBest)
	blocked bool        // queued in the core's blocked-ring queue

	jobs jobs // the job lists and preemption state (jobs.go)
}

// New returns an empty ring.
func New(k Key, hostBound bool) *Ring {
	return &Ring{Key: k, hostBound: hostBound, wanting: thread.NewHeap(thread.ByBest)}
}

// HostBound reports whether the ring serves one host ($host in the
// command): its agents are never given another host's work.
func (r *Ring) HostBound() bool { return r.hostBound }

// Rekey gives the ring a new key (a reload matched its threads to another
// clause): it keeps its job lists and forgets its threads, agents and idle
// pool, which the caller adds again. Its threads must have left its
// wanting heap (Remove).
func (r *Ring) Rekey(k Key, hostBound bool) {
	r.Key, r.hostBound = k, hostBound
	r.threads, r.agents, r.idle = 0, 0, nil
}

// AddThread counts a thread that joins the ring.
func (r *Ring) AddThread() { r.threads++ }

// RemoveThread takes a thread that leaves the ring out of it.
func (r *Ring) RemoveThread(t *thread.Thread) {
	r.wanting.Remove(t)
	r.threads--
}

// Threads returns the number of threads in the ring.
func (r *Ring) Threads() int { return r.threads }

// AddAgent counts an agent of the ring.
func (r *Ring) AddAgent() { r.agents++ }

// RemoveAgent takes an agent that exited out of the ring and its idle pool.
func (r *Ring) RemoveAgent(id int) {
	r.agents--
	r.RemoveIdle(id)
}

// Agents returns the number of agents of the ring, idle ones included.
func (r *Ring) Agents() int { return r.agents }

// SetBlocked records whether the ring waits in the core's queue of rings
// blocked by a global limit.
func (r *Ring) SetBlocked(b bool) { r.blocked = b }

// Blocked reports whether the ring waits in the core's blocked-ring queue.
func (r *Ring) Blocked() bool { return r.blocked }

// Update puts t in or out of the wanting heap as t.Wants says, and restores
// the heap's order after t's best vertex changed.
func (r *Ring) Update(t *thread.Thread, now time.Time) {
	want := t.Wants(now)
	switch {
	case want && !r.wanting.Has(t):
		r.wanting.Push(t)
	case want:
		r.wanting.Fix(t)
	default:
		r.wanting.Remove(t)
	}
	if want {
		r.jobs.release(t.Key) // jobs blocked at t may be fed again
	}
}

// Remove takes t out of the wanting heap.
func (r *Ring) Remove(t *thread.Thread) { r.wanting.Remove(t) }

// Offers reports whether t is in the wanting heap: the ring offers it to
// its agents.
func (r *Ring) Offers(t *thread.Thread) bool { return r.wanting.Has(t) }

// Best returns the wanting thread holding the ring's best vertex, skipping
// skip, or nil. It is O(1); when skip is the root, the better child stands
// in.
func (r *Ring) Best(skip *thread.Thread) *thread.Thread { return r.wanting.MinExcept(skip) }

// Wanting returns the number of threads that could use another agent.
func (r *Ring) Wanting() int { return r.wanting.Len() }

// Park puts an agent in the idle pool (most recent last), idle since
// since.
func (r *Ring) Park(id int, host string, since time.Time) {
	r.idle = append(r.idle, Idle{Agent: id, Host: host, Since: since})
}

// Unpark takes an idle agent for host: the most recent one that served host,
// else (unless host-bound) the most recent one. ok is false when none fits.
func (r *Ring) Unpark(host string) (int, bool) {
	for i := len(r.idle) - 1; i >= 0; i-- {
		if r.idle[i].Host == host {
			return r.take(i), true
		}
	}
	if r.hostBound || len(r.idle) == 0 {
		return 0, false
	}
	return r.take(len(r.idle) - 1), true
}

// RemoveIdle takes agent id out of the idle pool, if it is there.
func (r *Ring) RemoveIdle(id int) bool {
	for i := range r.idle {
		if r.idle[i].Agent == id {
			r.take(i)
			return true
		}
	}
	return false
}

// Idle returns the idle pool, least recent first.
func (r *Ring) Idle() iter.Seq[Idle] {
	return func(yield func(Idle) bool) {
		for _, in := range r.idle {
			if !yield(in) {
				return
			}
		}
	}
}

// IdleCount returns the number of agents in the idle pool.
func (r *Ring) IdleCount() int { return len(r.idle) }

// FirstIdle returns the agent longest in the idle pool.
func (r *Ring) FirstIdle() (Idle, bool) {
	if len(r.idle) == 0 {
		return Idle{}, false
	}
	return r.idle[0], true
}

func (r *Ring) take(i int) int {
	id := r.idle[i].Agent
	r.idle = append(r.idle[:i], r.idle[i+1:]...)
	return id
}

// Empty reports whether the ring holds nothing and can be dropped.
func (r *Ring) Empty() bool { return r.threads == 0 && r.agents == 0 }

// Check verifies the wanting heap.
func (r *Ring) Check() error { return r.wanting.Check() }

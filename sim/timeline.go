package sim

import (
	"container/heap"
	"time"
)

// Timeline is a fake clock's queue of future events: Pop gives them in
// time order, and events due at the same time in the order they were
// posted, so a simulation runs the same way every time. The simulator,
// the replay driver and the lab share it.
type Timeline[T any] struct {
	q   timelineHeap[T]
	seq uint64
}

// Post schedules v at at.
func (t *Timeline[T]) Post(at time.Time, v T) {
	t.seq++
	heap.Push(&t.q, timed[T]{at: at, seq: t.seq, v: v})
}

// Len is how many events are pending.
func (t *Timeline[T]) Len() int { return len(t.q) }

// Next is the time of the earliest pending event; ok is false when none is.
func (t *Timeline[T]) Next() (at time.Time, ok bool) {
	if len(t.q) == 0 {
		return time.Time{}, false
	}
	return t.q[0].at, true
}

// Pop removes the earliest pending event and returns it with its time. It
// must not be called on an empty timeline.
func (t *Timeline[T]) Pop() (time.Time, T) {
	e := heap.Pop(&t.q).(timed[T])
	return e.at, e.v
}

// Clear drops every pending event (posting order keeps counting).
func (t *Timeline[T]) Clear() { t.q = nil }

type timed[T any] struct {
	at  time.Time
	seq uint64
	v   T
}

type timelineHeap[T any] []timed[T]

func (q timelineHeap[T]) Len() int { return len(q) }
func (q timelineHeap[T]) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q timelineHeap[T]) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *timelineHeap[T]) Push(x any)   { *q = append(*q, x.(timed[T])) }
func (q *timelineHeap[T]) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

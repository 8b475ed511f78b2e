// Package thread owns one destination: all vertices with the same
// (clause, channel, host), the order they are fed in, their retry times, the
// thread's own back-off after site failures, its concurrency window
// (Postfix 2.5 feedback) and the tally of its recipients for the operator
// views; and the heaps of threads (Heap): the core's agenda by wake time and
// each ring's threads by their best vertex, whose places in a thread only
// Heap writes. Pure: time arrives as an argument, randomness as a
// *rand.Rand, and nothing here performs I/O.
package thread

import (
	"time"

	"zsched/vertex"
)

// Key identifies a thread. Its vertices point at their thread's Key
// (vertex.Dest) rather than holding copies of the names.
type Key = vertex.Dest

// Thread is one destination.
type Thread struct {
	Key

	// Ready holds vertices that are due and not fed, by feed rank.
	Ready vertex.Heap
	// Waiting holds vertices whose own retry time is in the future.
	Waiting vertex.Heap
	// vertices counts every vertex of the thread: ready, waiting or fed;
	// tally their pending recipients by arrival, for the operator views.
	// Join, Leave and Drop keep both.
	vertices int
	tally    Tally

	// Busy counts the destination's sessions: agents attached, and jobs
	// that agents of other threads were fed from it (a clause's feed =
	// "message"), each while it runs.
	Busy   int
	Window Window

	// BackoffUntil is set while the destination is dead (its window's
	// pseudo-cohort failures): nothing is fed before it. A site failure that
	// leaves the destination alive only shrinks its window. A thread
	// blocked only by a limit has no back-off.
	BackoffUntil time.Time
	Retry        int // index into the clause's retries for thread back-off
	Attempts     int // deliveries judged
	SiteFailures int // consecutive site-failed runs
	LastText     string

	QueueOnly bool // starts only by ETRN
	ETRN      bool // an ETRN released the queueonly thread: it runs until nothing is due
	Held      bool // operator hold
	// Asking: the destination's window lives in a book shared with other
	// nodes (package window) and the thread waits for its answer, or for
	// a session to come free, before it may take another agent.
	Asking bool

	// Ring is the ring the core ranks the thread in (a *ring.Ring: package
	// ring imports this one), kept here so that finding it on every update
	// is no map lookup by (clause, channel, host); nil until the core
	// looks it up. Only the core reads or writes it.
	Ring any

	// wake is the time the core's agenda (a ByWake heap) holds the thread
	// for, zero when none; index its place in a heap of each order, -1
	// when none. Only Heap writes them.
	wake  time.Time
	index [numOrders]int
}

// New returns an empty thread.
func New(k Key, w Window) *Thread {
	t := &Thread{
		Key:     k,
		Ready:   vertex.NewHeap(vertex.ByRankOrder),
		Waiting: vertex.NewHeap(vertex.ByTimeOrder),
		Window:  w,
	}
	for i := range t.index {
		t.index[i] = -1
	}
	return t
}

// Wake returns the time the agenda holds the thread for; zero when it is
// not on the agenda.
func (t *Thread) Wake() time.Time { return t.wake }

// Join counts a vertex placed in the thread, with its recipients.
func (t *Thread) Join(v *vertex.Vertex) {
	t.vertices++
	t.tally.Add(v.Msg.Arrival, len(v.Rcpts))
}

// Leave un-counts a vertex that leaves the thread, with the recipients it
// still holds.
func (t *Thread) Leave(v *vertex.Vertex) {
	t.vertices--
	t.tally.Remove(v.Msg.Arrival, len(v.Rcpts))
}

// Drop un-counts n of v's recipients, which leave v (delivered, failed,
// expired, gone from the file, or dropped with their message) while v
// stays counted.
func (t *Thread) Drop(v *vertex.Vertex, n int) { t.tally.Remove(v.Msg.Arrival, n) }

// Vertices returns the number of vertices of the thread: ready, waiting or
// fed.
func (t *Thread) Vertices() int { return t.vertices }

// Recipients returns the number of pending recipients of the thread.
func (t *Thread) Recipients() int { return t.tally.Recipients }

// Oldest returns the arrival second of the oldest message with a pending
// recipient in the thread, zero when none has an arrival time.
func (t *Thread) Oldest() time.Time { return t.tally.Oldest() }

// EachArrival calls fn for every arrival second with pending recipients,
// in no particular order (for sums).
func (t *Thread) EachArrival(fn func(arrival time.Time, rcpts int)) { t.tally.Each(fn) }

// CheckTally compares the thread's counts with a recount of its
// recipients from the vertices.
func (t *Thread) CheckTally(recount *Tally) error { return t.tally.Equal(recount) }

// BackingOff reports whether the thread waits out a site-failure back-off.
func (t *Thread) BackingOff(now time.Time) bool { return now.Before(t.BackoffUntil) }

// Startable reports whether nothing but an agent keeps the thread from
// being fed at now.
func (t *Thread) Startable(now time.Time) bool {
	if t.Held || (t.QueueOnly && !t.ETRN) || t.BackingOff(now) {
		return false
	}
	return t.Ready.Len() > 0
}

// Wants reports whether the thread could use one more agent.
func (t *Thread) Wants(now time.Time) bool {
	return t.Startable(now) && !t.Asking && t.Busy < t.Window.Limit()
}

// Promote moves vertices whose own time has come from Waiting to Ready.
func (t *Thread) Promote(now time.Time) {
	for v := t.Waiting.Min(); v != nil && !v.DueAfter(now); v = t.Waiting.Min() {
		t.Waiting.Remove(v)
		t.Ready.Push(v) // due since its retry time, which Due keeps
	}
}

// NextWake is the time the thread next needs the timer: the end of its
// back-off if it has ready work, else its first waiting vertex (never before
// the back-off). Zero when nothing waits on time.
func (t *Thread) NextWake(now time.Time) time.Time {
	var w time.Time
	if t.Ready.Len() > 0 && t.BackoffUntil.After(now) {
		w = t.BackoffUntil
	}
	if v := t.Waiting.Min(); v != nil {
		at := v.Due()
		if at.Before(t.BackoffUntil) {
			at = t.BackoffUntil
		}
		if w.IsZero() || at.Before(w) {
			w = at
		}
	}
	return w
}

// Add puts a new or returning vertex in the heap its time calls for. A
// vertex of a held message goes in neither: the scheduler keeps it aside
// until the operator releases the message.
func (t *Thread) Add(v *vertex.Vertex, now time.Time) {
	switch {
	case v.Msg.Held:
	case v.DueAfter(now):
		t.Waiting.Push(v)
	default:
		v.SetDue(now)
		t.Ready.Push(v)
	}
}

// Check verifies the thread's two vertex heaps (vertex.Heap.Check).
func (t *Thread) Check() error {
	if err := t.Ready.Check(); err != nil {
		return err
	}
	return t.Waiting.Check()
}

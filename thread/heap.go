package thread

import (
	"fmt"
	"time"

	"zsched/vertex"
)

// Order is what a Heap orders its threads by.
type Order uint8

const (
	// ByWake orders threads by the time they next need the timer: the
	// core's agenda. A thread is in it exactly while it has a future time
	// of interest (SetWake).
	ByWake Order = iota
	// ByBest orders threads by their best ready vertex: a ring's heap of
	// the threads that want an agent.
	ByBest
	numOrders
)

func (o Order) String() string {
	if o == ByWake {
		return "wake"
	}
	return "best"
}

// Heap is a min-heap of threads in one Order. A thread keeps its place in
// one heap of each order (the core's agenda, its ring's wanting heap), so
// that Remove and Fix are O(log n); only Heap writes those places.
type Heap struct {
	order Order
	ts    []*Thread
}

// NewHeap returns an empty heap in order o.
func NewHeap(o Order) Heap { return Heap{order: o} }

// Len returns the number of threads in the heap.
func (h *Heap) Len() int { return len(h.ts) }

// Min returns the first thread, or nil.
func (h *Heap) Min() *Thread {
	if len(h.ts) == 0 {
		return nil
	}
	return h.ts[0]
}

// MinExcept returns the first thread other than skip, or nil. It looks at
// the root and at most its two children, so it is O(1).
func (h *Heap) MinExcept(skip *Thread) *Thread {
	if len(h.ts) == 0 {
		return nil
	}
	if h.ts[0] != skip {
		return h.ts[0]
	}
	var best *Thread
	for _, j := range []int{1, 2} {
		if j < len(h.ts) && (best == nil || h.before(h.ts[j], best)) {
			best = h.ts[j]
		}
	}
	return best
}

// Has reports whether h holds t.
func (h *Heap) Has(t *Thread) bool {
	i := t.index[h.order]
	return i >= 0 && i < len(h.ts) && h.ts[i] == t
}

// Push adds t, which must be in no heap of h's order.
func (h *Heap) Push(t *Thread) {
	if t.index[h.order] >= 0 {
		panic("thread: push of a thread already in a heap of order " + h.order.String())
	}
	t.index[h.order] = len(h.ts)
	h.ts = append(h.ts, t)
	h.up(len(h.ts) - 1)
}

// Remove takes t out of h, if h holds it.
func (h *Heap) Remove(t *Thread) {
	if !h.Has(t) {
		return
	}
	i := t.index[h.order]
	n := len(h.ts) - 1
	if i != n {
		h.swap(i, n)
	}
	h.ts[n] = nil
	h.ts = h.ts[:n]
	t.index[h.order] = -1
	if i != n {
		h.fix(i)
	}
}

// Fix restores the order after t's key changed.
func (h *Heap) Fix(t *Thread) {
	if h.Has(t) {
		h.fix(t.index[h.order])
	}
}

// SetWake moves t, in a heap of order ByWake, to wake at w: in the heap
// if it was not, out of it when w is zero.
func (h *Heap) SetWake(t *Thread, w time.Time) {
	switch in := h.Has(t); {
	case w.IsZero():
		h.Remove(t)
		t.wake = time.Time{}
	case in && w.Equal(t.wake):
	case in:
		t.wake = w
		h.Fix(t)
	default:
		t.wake = w
		h.Push(t)
	}
}

// Check verifies the heap's order and the places its threads keep.
func (h *Heap) Check() error {
	for i, t := range h.ts {
		if t.index[h.order] != i {
			return fmt.Errorf("thread: %s/%s at %d of a %s heap says it is at %d", t.Channel, t.Host, i, h.order, t.index[h.order])
		}
		if i > 0 && h.before(t, h.ts[(i-1)/2]) {
			return fmt.Errorf("thread: %s/%s out of order in a %s heap", t.Channel, t.Host, h.order)
		}
	}
	return nil
}

func (h *Heap) before(a, b *Thread) bool {
	if h.order == ByWake {
		return a.wake.Before(b.wake)
	}
	return vertex.FirstBefore(&a.Ready, &b.Ready)
}

func (h *Heap) swap(i, j int) {
	h.ts[i], h.ts[j] = h.ts[j], h.ts[i]
	h.ts[i].index[h.order] = i
	h.ts[j].index[h.order] = j
}

func (h *Heap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *Heap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.before(h.ts[j], h.ts[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *Heap) down(i0 int) bool {
	i, n := i0, len(h.ts)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && h.before(h.ts[k], h.ts[j]) {
			j = k
		}
		if !h.before(h.ts[j], h.ts[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

package vertex

import (
	"fmt"
	"math"
)

// Order is what a heap orders its vertices by.
type Order uint8

const (
	ByRankOrder Order = iota // feed rank: ByRank
	ByTimeOrder              // retry time, then feed rank: ByTime
)

func (o Order) String() string {
	if o == ByTimeOrder {
		return "time"
	}
	return "rank"
}

// Heap is a priority queue of vertices in one Order. It keeps each
// vertex's place, so that Remove and Fix are O(log n).
//
// It is built for the way threads are fed with a million vertices queued,
// where every vertex and every heap slot not touched lately is a cache
// miss:
//   - Vertices mostly arrive in order — in FIFO and preemptive order a
//     new message ranks after everything queued, retry times grow with
//     the clock — so a vertex that ranks at or after the last one pushed
//     is appended to the run, a sorted ring buffer taken from the front:
//     pushing and popping it is O(1), sequential in memory, and moves no
//     other vertex (a heap pop moves one vertex per level, each a write
//     to a cold vertex).
//   - The others (a deferred vertex going back, a job moved forward by
//     preemption) go to a 4-ary min-heap whose slots hold the sort key
//     next to the vertex pointer: sifting compares keys in the heap's own
//     array, four children to a cache line, and reads a vertex only on a
//     tie.
//
// The minimum is the smaller of the run's front and the heap's root.
type Heap struct {
	items []slot // the 4-ary heap
	// The run: vertices in order at sequence numbers [head, tail), slot
	// seq & (len(run)-1) of a power-of-two ring. Removed ones leave a hole
	// (v nil) until the front or back passes it; the front and the back
	// are always live.
	run        []slot
	head, tail uint32
	live       int // vertices in the run
	order      Order
}

type slot struct {
	key uint64 // the order's key as an unsigned integer (rankKey, timeKey)
	v   *Vertex
}

// rankKey maps a rank to an unsigned integer with the same order (no NaN
// rank is ever set; -0 counts as 0, as == does).
func rankKey(f float64) uint64 {
	if f == 0 {
		return 1 << 63
	}
	b := math.Float64bits(f)
	if b>>63 != 0 {
		return ^b
	}
	return b | 1<<63
}

func timeKey(ns int64) uint64 { return uint64(ns) ^ 1<<63 }

func (h *Heap) key(v *Vertex) uint64 {
	if h.order == ByTimeOrder {
		return timeKey(v.due)
	}
	return rankKey(v.Rank)
}

// less orders two slots: by key, ties by the full order (both orders end
// in ByRank once their keys are equal).
func less(a, b *slot) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return ByRank(a.v, b.v)
}

// NewHeap returns an empty heap in order o.
func NewHeap(o Order) Heap { return Heap{order: o} }

// Order returns the heap's order.
func (h *Heap) Order() Order { return h.order }

// Len returns the number of vertices.
func (h *Heap) Len() int { return len(h.items) + h.live }

func (h *Heap) at(seq uint32) *slot { return &h.run[seq&uint32(len(h.run)-1)] }

// min returns the first slot, nil when empty.
func (h *Heap) min() *slot {
	var s *slot
	if h.live > 0 {
		s = h.at(h.head)
	}
	if len(h.items) > 0 && (s == nil || less(&h.items[0], s)) {
		s = &h.items[0]
	}
	return s
}

// Min returns the first vertex, or nil.
func (h *Heap) Min() *Vertex {
	if s := h.min(); s != nil {
		return s.v
	}
	return nil
}

// FirstBefore reports whether a's first vertex comes before b's in their
// order; both must be non-empty heaps of the same order. It compares the
// keys the heaps hold and reads the vertices only on a tie, so that a
// heap of threads ordered by their first vertex (ring's) costs no cache
// miss per comparison.
func FirstBefore(a, b *Heap) bool { return less(a.min(), b.min()) }

// Push adds v, which must be in no heap.
func (h *Heap) Push(v *Vertex) {
	if v.heap != nil {
		panic("vertex: push of a vertex already in a heap")
	}
	v.heap = h
	s := slot{key: h.key(v), v: v}
	if h.live == 0 || !less(&s, h.at(h.tail-1)) {
		h.append(s)
		return
	}
	v.inRun = false
	h.items = append(h.items, s)
	h.up(len(h.items) - 1)
}

// append puts s at the back of the run.
func (h *Heap) append(s slot) {
	if h.live == 0 {
		h.head, h.tail = 0, 0
	}
	if int(h.tail-h.head) == len(h.run) {
		h.grow()
	}
	*h.at(h.tail) = s
	s.v.index, s.v.inRun = int32(h.tail), true
	h.tail++
	h.live++
}

// grow doubles the run. Sequence numbers stay: no vertex is touched.
func (h *Heap) grow() {
	run := make([]slot, max(8, 2*len(h.run)))
	mask := uint32(len(run) - 1)
	for seq := h.head; seq != h.tail; seq++ {
		run[seq&mask] = *h.at(seq)
	}
	h.run = run
}

// Pop removes and returns the first vertex, or nil.
func (h *Heap) Pop() *Vertex {
	v := h.Min()
	if v != nil {
		h.Remove(v)
	}
	return v
}

// Remove takes v out of h; v must be in h.
func (h *Heap) Remove(v *Vertex) {
	if v.heap != h {
		panic("vertex: remove of a vertex not in this heap")
	}
	if v.inRun {
		h.unrun(v)
	} else {
		h.unheap(v)
	}
	v.index, v.inRun, v.heap = -1, false, nil
}

func (h *Heap) unrun(v *Vertex) {
	seq := uint32(v.index)
	s := h.at(seq)
	if h.live == 0 || seq-h.head >= h.tail-h.head || s.v != v {
		panic("vertex: remove of a vertex not in this heap's run")
	}
	*s = slot{}
	h.live--
	for h.head != h.tail && h.at(h.head).v == nil {
		h.head++
	}
	for h.tail != h.head && h.at(h.tail-1).v == nil {
		h.tail--
	}
	if n := int(h.tail - h.head); n > 64 && n > 4*h.live {
		h.compact()
	}
}

// compact closes the holes of a run that has more of them than vertices.
func (h *Heap) compact() {
	run := make([]slot, max(8, pow2(2*h.live)))
	n := uint32(0)
	for seq := h.head; seq != h.tail; seq++ {
		if s := h.at(seq); s.v != nil {
			run[n] = *s
			s.v.index = int32(n)
			n++
		}
	}
	h.run, h.head, h.tail = run, 0, n
}

func pow2(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}

func (h *Heap) unheap(v *Vertex) {
	i := int(v.index)
	if i < 0 || i >= len(h.items) || h.items[i].v != v {
		panic("vertex: remove of a vertex not in this heap")
	}
	n := len(h.items) - 1
	last := h.items[n]
	h.items[n] = slot{}
	h.items = h.items[:n]
	if i != n {
		h.items[i] = last
		last.v.index = int32(i)
		if !h.down(i) {
			h.up(i)
		}
	}
}

// Fix restores the order of whichever heap holds v after its Rank (or, in
// a time heap, its Due) changed; a vertex in no heap is left alone.
func (v *Vertex) Fix() {
	if v.heap != nil {
		v.heap.Fix(v)
	}
}

// Fix restores order after v's key changed.
func (h *Heap) Fix(v *Vertex) {
	if v.inRun {
		h.Remove(v)
		h.Push(v)
		return
	}
	i := int(v.index)
	h.items[i].key = h.key(v)
	if !h.down(i) {
		h.up(i)
	}
}

// Relabel sets v's Rank to one that keeps its place relative to every
// other vertex of its heap, as an order-preserving renumbering of all
// ranks does: the heap's copy is updated without moving anything.
func (v *Vertex) Relabel(rank float64) {
	v.Rank = rank
	h := v.heap
	if h == nil || h.order != ByRankOrder {
		return
	}
	if v.inRun {
		h.at(uint32(v.index)).key = rankKey(rank)
	} else {
		h.items[v.index].key = rankKey(rank)
	}
}

// Each calls fn for every vertex in storage order (unordered). fn must not
// change what the heap holds or its order.
func (h *Heap) Each(fn func(*Vertex)) {
	for i := range h.items {
		fn(h.items[i].v)
	}
	for seq := h.head; seq != h.tail; seq++ {
		if v := h.at(seq).v; v != nil {
			fn(v)
		}
	}
}

// Check verifies the heap: every slot's key is its vertex's, every vertex
// knows its place, no heap child is before its parent, the run is in
// order with live ends. O(n); for tests and the core's Check.
func (h *Heap) Check() error {
	for i := range h.items {
		s := &h.items[i]
		if s.v.heap != h || s.v.inRun || int(s.v.index) != i {
			return fmt.Errorf("vertex: %s heap slot %d holds a vertex that says heap %p index %d run %v", h.order, i, s.v.heap, s.v.index, s.v.inRun)
		}
		if k := h.key(s.v); s.key != k {
			return fmt.Errorf("vertex: %s heap slot %d: stale key %#x, vertex says %#x", h.order, i, s.key, k)
		}
		if i > 0 && less(s, &h.items[(i-1)/arity]) {
			return fmt.Errorf("vertex: %s heap slot %d is before its parent", h.order, i)
		}
	}
	live := 0
	var prev *slot
	for seq := h.head; seq != h.tail; seq++ {
		s := h.at(seq)
		if s.v == nil {
			if seq == h.head || seq == h.tail-1 {
				return fmt.Errorf("vertex: %s run has a hole at its end (%d of [%d, %d))", h.order, seq, h.head, h.tail)
			}
			continue
		}
		live++
		if s.v.heap != h || !s.v.inRun || uint32(s.v.index) != seq {
			return fmt.Errorf("vertex: %s run place %d holds a vertex that says heap %p index %d run %v", h.order, seq, s.v.heap, s.v.index, s.v.inRun)
		}
		if k := h.key(s.v); s.key != k {
			return fmt.Errorf("vertex: %s run place %d: stale key %#x, vertex says %#x", h.order, seq, s.key, k)
		}
		if prev != nil && less(s, prev) {
			return fmt.Errorf("vertex: %s run out of order at place %d", h.order, seq)
		}
		prev = s
	}
	if live != h.live {
		return fmt.Errorf("vertex: %s run holds %d vertices, counts %d", h.order, live, h.live)
	}
	return nil
}

// arity is the heap's fan-out: four 16-byte slots are one cache line.
const arity = 4

func (h *Heap) up(j int) {
	items := h.items
	x := items[j]
	for j > 0 {
		i := (j - 1) / arity
		if !less(&x, &items[i]) {
			break
		}
		items[j] = items[i]
		items[j].v.index = int32(j)
		j = i
	}
	items[j] = x
	x.v.index = int32(j)
}

func (h *Heap) down(i0 int) bool {
	items := h.items
	n := len(items)
	x := items[i0]
	i := i0
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		best := c
		for k, end := c+1, min(c+arity, n); k < end; k++ {
			if less(&items[k], &items[best]) {
				best = k
			}
		}
		if !less(&items[best], &x) {
			break
		}
		items[i] = items[best]
		items[i].v.index = int32(i)
		i = best
	}
	items[i] = x
	x.v.index = int32(i)
	return i > i0
}

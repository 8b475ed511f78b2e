// Package vertex owns the scheduler's in-core picture of the queue: a Message
// (one control file) and its Vertices, each the pending recipients of that
// message for one (channel, host) — the unit a transport agent is fed as one
// job line. It also provides the two vertex orders threads keep: by feed rank
// (which job goes first) and by retry time. Pure data: no I/O, no clock.
package vertex

import (
	"sort"
	"time"

	"zsched/report"
)

// Rcpt is one pending recipient: the r line at Offset.
type Rcpt struct {
	Offset int64
	User   string
	Notify uint8 // ctlfile.Notify bits, kept opaque here
}

// Message is one control file in core.
type Message struct {
	Inum    int64
	Path    string // relative to postoffice/transport
	ID      string // body file name
	Arrival time.Time
	Seq     uint64 // arrival order within this process, the FIFO job order
	Bounce  bool   // the message is itself a DSN

	Vertices []*Vertex
	Pending  int  // recipients still pending in core
	Diags    bool // d lines were written for it: a DSN is owed at completion
	Held     bool // operator hold
	Warned   bool // its delay warning was written (once per message)
	Resyncs  int
}

// Vertex is the pending recipients of one message for one (channel, host).
type Vertex struct {
	// The fields a heap operation touches come first, so that comparing
	// and moving a vertex costs one cache line: with a million vertices
	// queued nearly every vertex a heap looks at is a cache miss.

	Msg *Message
	// Rank orders the feed within a ring: smaller goes first. The ring's
	// job order sets it (FIFO: the message's Seq; preemption moves jobs).
	Rank  float64
	heap  *Heap // the heap that holds it, nil when none
	index int32 // position in that heap, -1 when none

	// SiteFailed is set when the current attempt reported a site failure.
	SiteFailed bool
	// Resynced is set when the agent of the current attempt sent #resync.
	Resynced bool
	JobFed   bool // see Job

	Rcpts []Rcpt // pending, ordered by Offset

	// Agent is the id of the agent the vertex is fed to, 0 when none.
	Agent int

	Clause  int
	Channel string
	Host    string
	// Job is package ring's record of the ring job that counts the vertex
	// (a *ring.Job), nil when none; JobFed says that job counts it as fed
	// rather than queued. Only package ring reads or writes them.
	Job any

	Attempts  int
	Retry     int       // index into the clause's retries for this vertex's own deferrals
	NotBefore time.Time // the vertex's own retry time; zero = due
	DueSince  time.Time // when it last became due (for dispatch latency)
	Expires   time.Time // arrival + expiry (zero = never)
	Expires2  time.Time // arrival + expiry + expiry2 (zero = never)

	// last is what the latest attempt reported, nil until one did: most
	// vertices are delivered at their first attempt, and the text and DSN
	// fields inline would be a third of every vertex (DESIGN §8 budgets
	// 300 bytes per recipient in core).
	last *attempt
}

// attempt is the report of a vertex's latest attempt.
type attempt struct {
	text   string
	notary report.Notary
}

// LastText is the text of the latest report on the vertex, "" if none.
func (v *Vertex) LastText() string {
	if v.last == nil {
		return ""
	}
	return v.last.text
}

// LastNotary is the DSN data of the latest report that carried any.
func (v *Vertex) LastNotary() report.Notary {
	if v.last == nil {
		return report.Notary{}
	}
	return v.last.notary
}

// SetLastText records the latest report's text.
func (v *Vertex) SetLastText(text string) {
	if v.last == nil {
		if text == "" {
			return
		}
		v.last = &attempt{}
	}
	v.last.text = text
}

// SetLastNotary records the latest report's DSN data.
func (v *Vertex) SetLastNotary(n report.Notary) {
	if v.last == nil {
		if n.IsZero() {
			return
		}
		v.last = &attempt{}
	}
	v.last.notary = n
}

// New returns a vertex in no heap.
func New(m *Message, clause int, channel, host string, rcpts []Rcpt) *Vertex {
	sort.Slice(rcpts, func(i, j int) bool { return rcpts[i].Offset < rcpts[j].Offset })
	return &Vertex{Msg: m, Clause: clause, Channel: channel, Host: host, Rcpts: rcpts, index: -1}
}

// Find returns the index of the pending recipient at offset.
func (v *Vertex) Find(offset int64) (int, bool) {
	i := sort.Search(len(v.Rcpts), func(i int) bool { return v.Rcpts[i].Offset >= offset })
	return i, i < len(v.Rcpts) && v.Rcpts[i].Offset == offset
}

// Drop removes recipient i from the vertex and the message's pending count.
func (v *Vertex) Drop(i int) Rcpt {
	r := v.Rcpts[i]
	v.Rcpts = append(v.Rcpts[:i], v.Rcpts[i+1:]...)
	v.Msg.Pending--
	return r
}

// Queued reports whether the vertex is in a heap.
func (v *Vertex) Queued() bool { return v.heap != nil }

// Dequeue removes v from the heap that holds it, if any.
func (v *Vertex) Dequeue() {
	if v.heap != nil {
		v.heap.Remove(v)
	}
}

// In reports whether h holds v.
func (v *Vertex) In(h *Heap) bool { return v.heap == h }

// Unlink removes v from its message's vertex list.
func (v *Vertex) Unlink() {
	vs := v.Msg.Vertices
	for i, x := range vs {
		if x == v {
			vs[i] = vs[len(vs)-1]
			vs[len(vs)-1] = nil
			v.Msg.Vertices = vs[:len(vs)-1]
			return
		}
	}
}

// Heap is a binary min-heap of vertices; Less decides the order. The heap
// keeps each vertex's index so Remove and Fix are O(log n).
type Heap struct {
	items []*Vertex
	less  func(a, b *Vertex) bool
}

// ByRank orders vertices by feed rank, then by arrival, then by offset so
// that equal ranks still give one deterministic order.
func ByRank(a, b *Vertex) bool {
	if a.Rank != b.Rank {
		return a.Rank < b.Rank
	}
	if a.Msg.Seq != b.Msg.Seq {
		return a.Msg.Seq < b.Msg.Seq
	}
	return a.Rcpts[0].Offset < b.Rcpts[0].Offset
}

// ByTime orders vertices by their own retry time.
func ByTime(a, b *Vertex) bool {
	if !a.NotBefore.Equal(b.NotBefore) {
		return a.NotBefore.Before(b.NotBefore)
	}
	return ByRank(a, b)
}

// NewHeap returns an empty heap ordered by less.
func NewHeap(less func(a, b *Vertex) bool) Heap { return Heap{less: less} }

// Len returns the number of vertices.
func (h *Heap) Len() int { return len(h.items) }

// Min returns the first vertex, or nil.
func (h *Heap) Min() *Vertex {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// Push adds v, which must be in no heap.
func (h *Heap) Push(v *Vertex) {
	if v.heap != nil {
		panic("vertex: push of a vertex already in a heap")
	}
	v.index = int32(len(h.items))
	v.heap = h
	h.items = append(h.items, v)
	h.up(int(v.index))
}

// Pop removes and returns the first vertex, or nil.
func (h *Heap) Pop() *Vertex {
	if len(h.items) == 0 {
		return nil
	}
	v := h.items[0]
	h.Remove(v)
	return v
}

// Remove takes v out of h; v must be in h.
func (h *Heap) Remove(v *Vertex) {
	i := int(v.index)
	if v.heap != h || i < 0 || i >= len(h.items) || h.items[i] != v {
		panic("vertex: remove of a vertex not in this heap")
	}
	n := len(h.items) - 1
	if i != n {
		h.swap(i, n)
	}
	h.items[n] = nil
	h.items = h.items[:n]
	v.index = -1
	v.heap = nil
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// Fix restores the order of whichever heap holds v after its Rank or
// NotBefore changed; a vertex in no heap is left alone.
func (v *Vertex) Fix() {
	if v.heap != nil {
		v.heap.Fix(v)
	}
}

// Fix restores order after v's key changed.
func (h *Heap) Fix(v *Vertex) {
	if !h.down(int(v.index)) {
		h.up(int(v.index))
	}
}

// Each calls fn for every vertex in heap order's storage order (unordered).
func (h *Heap) Each(fn func(*Vertex)) {
	for _, v := range h.items {
		fn(v)
	}
}

func (h *Heap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index = int32(i)
	h.items[j].index = int32(j)
}

func (h *Heap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *Heap) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.less(h.items[r], h.items[j]) {
			j = r
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

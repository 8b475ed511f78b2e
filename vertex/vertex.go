// Package vertex owns the scheduler's in-core picture of the queue: a Message
// (one control file) and its Vertices, each the pending recipients of that
// message for one (channel, host) — the unit a transport agent is fed as one
// job line. It also provides the two vertex orders threads keep: by feed rank
// (which job goes first) and by retry time. Pure data: no I/O, no clock.
//
// A vertex is what the core holds per pending destination of every message,
// so its size is most of the core's memory (DESIGN §8 budgets 300 bytes per
// in-core recipient): its times are Unix nanoseconds rather than time.Time,
// its destination is shared with its thread, and it keeps no deadline the
// core can compute from the message and the clause.
package vertex

import (
	"cmp"
	"slices"
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
	Inum int64
	Path string // relative to postoffice/transport
	ID   string // body file name
	// QID is the queue id operators see (ctlfile.File.QueueID): the name
	// with its file's generation, never reused; Path when unknown.
	QID     string
	Arrival time.Time
	Seq     uint64 // arrival order within this process, the FIFO job order

	Vertices []*Vertex
	Pending  int   // recipients still pending in core
	Resyncs  uint8 // #resync re-reads; the core drops the message past a few dozen
	Bounce   bool  // the message is itself a DSN
	Diags    bool  // d lines were written for it: a DSN is owed at completion
	Held     bool  // operator hold
	Warned   bool  // its delay warning was written (once per message)
	// Gone is set when the message leaves core (completed or dropped):
	// the jobs agents still hold for it are stale. A message that comes
	// back is a new Message.
	Gone bool
}

// Dest identifies a destination: the (clause, channel, host) of a thread,
// whose key it is (thread.Key).
type Dest struct {
	Clause  int
	Channel string
	Host    string
}

// Vertex is the pending recipients of one message for one (channel, host).
type Vertex struct {
	// The fields feeding the vertex touches — taking it off its heap,
	// counting the slot for its job, writing its job line — come first,
	// within 72 bytes: with a million vertices queued the vertex fed is a
	// cache miss, and the fewer lines it spans the fewer misses.

	Msg   *Message
	heap  *Heap // the heap that holds it, nil when none
	index int32 // its place in that heap (heap.go), -1 when none

	// SiteFailed is set when the current attempt reported a site failure.
	SiteFailed bool
	// Resynced is set when the agent of the current attempt sent #resync.
	Resynced bool
	jobFed   bool // see job
	inRun    bool // index is a place in its heap's run (heap.go)

	// *Dest is the vertex's destination, shared with its thread (the
	// thread's Key): one copy of the names per destination in core, not
	// one per vertex. Only the core re-points it.
	*Dest

	// job is package ring's record of the ring job that counts the vertex
	// (a *ring.Job), nil when none; jobFed says that job counts it as fed
	// rather than queued. Only package ring reads or writes them (Job,
	// SetJob).
	job any

	// due is, in Unix nanoseconds (0 = none), the instant from which the
	// vertex is due: while it waits, its own retry time (NotBefore); once
	// due, the time it became due (DueSince, for dispatch latency). One
	// field serves both because a vertex is never both waiting and ready.
	due int64

	// Agent is the id of the agent the vertex is fed to, 0 when none.
	Agent int

	Attempts int32
	Retry    int32 // index into the clause's retries for this vertex's own deferrals

	// Rank orders the feed within a ring: smaller goes first. The ring's
	// job order sets it (FIFO: the message's Seq; preemption moves jobs).
	// A heap holding the vertex keeps a copy (heaps compare copies, so
	// sifting reads no vertex): after changing Rank, call Fix (or Relabel).
	Rank float64

	Rcpts []Rcpt // pending, ordered by Offset

	// last is what the latest attempt reported, nil until one did: most
	// vertices are delivered at their first attempt, and the text and DSN
	// fields inline would be a third of every vertex.
	last *attempt

	// one holds the recipient of a vertex that has one (Rcpts is then a
	// slice of it): the commonest case costs no second object, and no
	// second cache miss when the vertex is fed and reported.
	one [1]Rcpt
}

// Job returns package ring's record of the ring job that counts v (a
// *ring.Job), nil when none, and whether that job counts v as fed rather
// than queued. It is ring's back-pointer: no other package has a use for
// it (the core asks ring.JobOf).
func (v *Vertex) Job() (job any, fed bool) { return v.job, v.jobFed }

// SetJob records the ring job that counts v and whether it counts v as
// fed. Only package ring calls it (a test checks that no other does).
func (v *Vertex) SetJob(job any, fed bool) { v.job, v.jobFed = job, fed }

// Due returns the instant from which v is due: its own retry time while
// it waits (zero or past = due now), the time it became due once ready.
func (v *Vertex) Due() time.Time { return fromNanos(v.due) }

// SetDue sets the instant from which v is due (zero: due now), restoring
// the order of a time heap that holds it.
func (v *Vertex) SetDue(t time.Time) {
	v.due = nanos(t)
	if h := v.heap; h != nil && h.order == ByTimeOrder {
		h.Fix(v)
	}
}

// DueAfter reports whether v's own retry time is after now: it must wait.
func (v *Vertex) DueAfter(now time.Time) bool { return v.due != 0 && v.due > nanos(now) }

// nanos is t in Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// attempt is the report of a vertex's latest attempt.
type attempt struct {
	text   string
	notary report.Notary
	fed    int64 // when the attempt's job was fed, Unix nanoseconds (SHOW THREAD)
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

// LastFed is when the vertex's latest finished attempt was fed to its
// agent; zero if none was recorded.
func (v *Vertex) LastFed() time.Time {
	if v.last == nil {
		return time.Time{}
	}
	return fromNanos(v.last.fed)
}

// SetLastFed records when the latest attempt was fed. Only a vertex that
// stays after its attempt needs it, and such a vertex has usually a record
// already (its deferral's text).
func (v *Vertex) SetLastFed(t time.Time) {
	if v.last == nil {
		v.last = &attempt{}
	}
	v.last.fed = nanos(t)
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

// New returns a vertex of m for destination d, in no heap, with a copy of
// rcpts sorted by offset.
func New(m *Message, d *Dest, rcpts []Rcpt) *Vertex {
	v := &Vertex{Msg: m, Dest: d, index: -1}
	if len(rcpts) == 1 {
		v.one[0] = rcpts[0]
		v.Rcpts = v.one[:]
		return v
	}
	v.Rcpts = slices.Clone(rcpts)
	byOffset := func(a, b Rcpt) int { return cmp.Compare(a.Offset, b.Offset) }
	if !slices.IsSortedFunc(v.Rcpts, byOffset) {
		slices.SortFunc(v.Rcpts, byOffset)
	}
	return v
}

// Find returns the index of the pending recipient at offset.
func (v *Vertex) Find(offset int64) (int, bool) {
	return slices.BinarySearchFunc(v.Rcpts, offset, func(r Rcpt, off int64) int { return cmp.Compare(r.Offset, off) })
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

// ByTime orders vertices by their own retry time (Due), then by rank.
func ByTime(a, b *Vertex) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return ByRank(a, b)
}

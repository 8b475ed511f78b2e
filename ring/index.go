package ring

import (
	"fmt"
	"math"
)

// The candidate index. Postfix finds the preemption candidate by a linear
// scan of the job list, cached per second. Here a treap keyed by needed
// slots answers "best score among jobs needing at most max_slots" in
// O(log n): each node keeps the best job of its subtree at the ring's
// clock and the second at which that may change (scores are lines in time
// and two of them cross at most once, so a kinetic tournament keeps it
// exact as the clock moves).

// indexNode is a job's node in the index: a treap by (needed, seq) whose
// nodes know their subtree's best candidate at the ring's clock. The
// fields a descent touches come first, and each node keeps a copy of its
// best's score, so that a descent reads one job per level.
type indexNode struct {
	tl, tr, best *Job
	seq          uint64 // Msg.Seq
	ts           score  // its own score when filed
	bs           score  // best's score
	cert         int32  // the clock at which best may change
	tNeeded      int32  // needed when filed
	prio         uint32
	inTree       bool
	dirty        bool // on the list of jobs to re-file
}

// candidates is a ring's index.
type candidates struct {
	root   *Job   // the treap
	parked *Job   // the current job, kept out of the index while current
	dirty  []*Job // jobs to re-file in the index before the next query
	// deadDirty counts freed jobs still on dirty, pruned now and then so
	// that the list does not keep them alive.
	deadDirty int
}

// score is what the candidate index compares: when the job was queued, its
// entries (unread included) and its place on the list.
type score struct {
	q     int32
	total int32
	label float64
}

// sync notes that j's eligibility or key may have changed. Jobs are
// re-filed in the index only when it is asked (flush, before a query): a
// job that changes several times between two queries — every entry fed
// changes its key — costs one re-filing, and one that comes and goes
// between two costs none. That is most jobs when messages are too small
// ever to preempt (total < minimum_delivery_slots × cost: no query is
// made), where re-filing at every slot was most of the cost of a pick with
// a million recipients queued (each re-filing walks the index, a cache
// miss a level). Without the index (orders other than preemptive) nothing
// is noted.
func (js *jobs) sync(j *Job) {
	if j.dirty || !js.indexing() {
		return
	}
	j.dirty = true
	js.dirty = append(js.dirty, j)
}

func (js *jobs) flush() {
	for i, j := range js.dirty {
		js.dirty[i] = nil
		j.dirty = false
		js.refile(j)
	}
	js.dirty = js.dirty[:0]
	js.deadDirty = 0
}

// pruneDirty drops freed jobs from the dirty list.
func (js *jobs) pruneDirty() {
	keep := js.dirty[:0]
	for _, j := range js.dirty {
		if j.freed {
			j.dirty = false
			continue
		}
		keep = append(keep, j)
	}
	clear(js.dirty[len(keep):])
	js.dirty = keep
	js.deadDirty = 0
}

// dropIndex empties the candidate index when the ring stops preempting.
func (js *jobs) dropIndex() {
	for _, j := range js.byMsg {
		j.inTree, j.dirty = false, false
		j.tl, j.tr, j.best = nil, nil, nil
	}
	clear(js.dirty)
	js.dirty = js.dirty[:0]
	js.deadDirty = 0
	js.root, js.parked = nil, nil
}

// refile puts j in or out of the candidate index, or moves it, as its
// state now says.
func (js *jobs) refile(j *Job) {
	want := js.filed(j)
	if j.inTree && (!want || j.tNeeded != j.needed() || j.ts.total != j.total() || j.ts.label != j.pos.label) {
		js.untree(j)
	}
	if want && !j.inTree {
		j.tNeeded = j.needed()
		j.ts = score{q: j.queuedAt, total: j.total(), label: j.pos.label}
		j.inTree = true
		js.root = js.insert(js.root, j)
	}
}

func (js *jobs) untree(j *Job) {
	if !j.inTree {
		return
	}
	js.root = js.delete(js.root, j)
	j.inTree = false
	j.tl, j.tr, j.best = nil, nil, nil
}

// beats reports whether a is the better candidate at clock t: a higher
// (t − q + 1) / total, compared exactly as cross products, and between
// equal scores the one earlier on the list.
func beats(a, b score, t int64) bool {
	sa := (t - int64(a.q) + 1) * int64(b.total)
	sb := (t - int64(b.q) + 1) * int64(a.total)
	if sa != sb {
		return sa > sb
	}
	return a.label < b.label
}

// overtake returns the first second after t at which l beats w, given
// that w beats l at t; math.MaxInt64 if never. The score difference is
// linear in time, so a job with fewer entries overtakes one with more once
// and for good, and never the other way round.
func overtake(w, l score, t int64) int64 {
	s := int64(w.total) - int64(l.total)
	if s <= 0 {
		return math.MaxInt64
	}
	// l beats w at x when s·x + c > 0, or = 0 with l earlier on the list.
	c := (1-int64(l.q))*int64(w.total) - (1-int64(w.q))*int64(l.total)
	need := -c
	if !(l.label < w.label) {
		need++
	}
	x := ceilDiv(need, s)
	if x <= t {
		x = t + 1
	}
	return x
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

func keyLess(a, b *Job) bool {
	if a.tNeeded != b.tNeeded {
		return a.tNeeded < b.tNeeded
	}
	return a.seq < b.seq
}

// pull recomputes n's subtree best and its certificate at the clock.
func (js *jobs) pull(n *Job) {
	t := js.clock
	best, bs, cert := n, n.ts, int64(math.MaxInt32)
	l, r := n.tl, n.tr
	if l != nil {
		cert = min(cert, int64(l.cert))
		if beats(l.bs, bs, t) {
			best, bs = l.best, l.bs
		}
	}
	if r != nil {
		cert = min(cert, int64(r.cert))
		if beats(r.bs, bs, t) {
			best, bs = r.best, r.bs
		}
	}
	if best != n {
		cert = min(cert, overtake(bs, n.ts, t))
	}
	if l != nil && l.best != best {
		cert = min(cert, overtake(bs, l.bs, t))
	}
	if r != nil && r.best != best {
		cert = min(cert, overtake(bs, r.bs, t))
	}
	n.best, n.bs, n.cert = best, bs, int32(min(cert, math.MaxInt32))
}

// advance brings every subtree best whose certificate expired up to the
// clock.
func (js *jobs) advance() {
	if js.root != nil && int64(js.root.cert) <= js.clock {
		js.fix(js.root)
	}
}

func (js *jobs) fix(n *Job) {
	if n == nil || int64(n.cert) > js.clock {
		return
	}
	js.fix(n.tl)
	js.fix(n.tr)
	js.pull(n)
}

// query returns the best job needing at most m slots.
func (js *jobs) query(m int) *Job {
	t := js.clock
	var best *Job
	var bs score
	for n := js.root; n != nil; {
		if int(n.tNeeded) > m {
			n = n.tl
			continue
		}
		if l := n.tl; l != nil && (best == nil || beats(l.bs, bs, t)) {
			best, bs = l.best, l.bs
		}
		if best == nil || beats(n.ts, bs, t) {
			best, bs = n, n.ts
		}
		n = n.tr
	}
	return best
}

func (js *jobs) insert(n, j *Job) *Job {
	if n == nil {
		j.tl, j.tr = nil, nil
		js.pull(j)
		return j
	}
	if keyLess(j, n) {
		n.tl = js.insert(n.tl, j)
		if n.tl.prio > n.prio {
			return js.rotateRight(n)
		}
	} else {
		n.tr = js.insert(n.tr, j)
		if n.tr.prio > n.prio {
			return js.rotateLeft(n)
		}
	}
	js.pull(n)
	return n
}

func (js *jobs) delete(n, j *Job) *Job {
	if n == nil {
		panic("ring: candidate index lost a job")
	}
	if n == j {
		return js.merge(n.tl, n.tr)
	}
	if keyLess(j, n) {
		n.tl = js.delete(n.tl, j)
	} else {
		n.tr = js.delete(n.tr, j)
	}
	js.pull(n)
	return n
}

func (js *jobs) merge(a, b *Job) *Job {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		a.tr = js.merge(a.tr, b)
		js.pull(a)
		return a
	default:
		b.tl = js.merge(a, b.tl)
		js.pull(b)
		return b
	}
}

func (js *jobs) rotateRight(n *Job) *Job {
	l := n.tl
	n.tl, l.tr = l.tr, n
	js.pull(n)
	js.pull(l)
	return l
}

func (js *jobs) rotateLeft(n *Job) *Job {
	r := n.tr
	n.tr, r.tl = r.tl, n
	js.pull(n)
	js.pull(r)
	return r
}

// recopy refreshes the index's copies of best scores after a renumbering.
func (js *jobs) recopy(n *Job) {
	if n != nil {
		js.recopy(n.tl)
		js.recopy(n.tr)
		n.bs = n.best.ts
	}
}

// checkTree verifies the index below n: key order, heap order of
// priorities, and that every node's best and certificate are what pull
// computes now. It returns the number of nodes.
func (js *jobs) checkTree(n, lo, hi *Job) (int, error) {
	if n == nil {
		return 0, nil
	}
	if !n.inTree || (lo != nil && !keyLess(lo, n)) || (hi != nil && !keyLess(n, hi)) {
		return 0, fmt.Errorf("ring: candidate index out of key order at msg %d", n.Msg.Seq)
	}
	for _, c := range []*Job{n.tl, n.tr} {
		if c != nil && c.prio > n.prio {
			return 0, fmt.Errorf("ring: candidate index out of heap order at msg %d", n.Msg.Seq)
		}
	}
	a, err := js.checkTree(n.tl, lo, n)
	if err != nil {
		return 0, err
	}
	b, err := js.checkTree(n.tr, n, hi)
	if err != nil {
		return 0, err
	}
	best, cert := n.best, n.cert
	if n.bs != best.ts {
		return 0, fmt.Errorf("ring: candidate index has a stale score copy at msg %d", n.Msg.Seq)
	}
	js.pull(n)
	if n.best != best || n.cert != cert {
		return 0, fmt.Errorf("ring: candidate index stale at msg %d: best %d cert %d, want %d %d",
			n.Msg.Seq, best.Msg.Seq, cert, n.best.Msg.Seq, n.cert)
	}
	return a + b + 1, nil
}

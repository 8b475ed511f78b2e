package ring

import (
	"fmt"
	"math"
	"time"

	"zsched/thread"
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
//     included), ties going to the one earlier on the list.
//   - It preempts when available / cost + loan ≥ needed × (100 − discount)
//     / 100: it moves in front of the current job, becomes its stack child,
//     and the current job pays needed × cost slots now; the difference from
//     what it really uses is settled when it leaves the stack (pop).
//
// Postfix finds the candidate by a linear scan of the job list, cached per
// second. Here a treap keyed by needed slots answers "best score among
// jobs needing at most max_slots" in O(log n): each node keeps the best
// job of its subtree at the ring's clock and the second at which that may
// change (scores are lines in time and two of them cross at most once, so
// a kinetic tournament keeps it exact as the clock moves). A candidate is
// confirmed open by its vertices; one that is not is marked blocked, leaves
// the index, and is registered at its threads, and comes back when one of
// them wants an agent again (ring.Update) or it gets an entry.

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
	if w := j.witness; w != nil && JobOf(w) == j && !w.JobFed && p.Open(w) {
		return true
	}
	found := false
	for _, v := range j.Msg.Vertices {
		if JobOf(v) == j && !v.JobFed && p.Open(v) {
			j.witness, found = v, true
			break
		}
	}
	return found
}

type blockReg struct {
	j   *Job
	gen uint32
}

// block marks j a blocker: out of the candidate index until a thread that
// holds one of its queued vertices wants an agent (release) or it gets an
// entry (enqueue).
func (js *jobs) block(j *Job) {
	j.blocked = true
	j.blockGen++
	js.nblocked++
	if js.regs == nil {
		js.regs = make(map[thread.Key][]blockReg)
	}
	j.each(func(v *vertex.Vertex) {
		if v.JobFed {
			return // it comes back through Requeue, which unblocks
		}
		k := *v.Dest
		js.regs[k] = append(js.regs[k], blockReg{j, j.blockGen})
		j.nregs++
	})
	js.nregs += int(j.nregs)
	js.liveRegs += int(j.nregs)
	js.refile(j) // out of the index now: the caller queries again
	if js.nregs > 1024 && js.nregs > 2*js.liveRegs {
		js.compact()
	}
}

func (js *jobs) unblock(j *Job) {
	j.blocked = false
	js.nblocked--
	js.liveRegs -= int(j.nregs)
	j.nregs = 0
	js.sync(j)
}

// release gives the jobs blocked at thread k their chance again: k wants
// an agent (Postfix unblocks every job of a destination at once).
func (js *jobs) release(k thread.Key) {
	if len(js.regs) == 0 {
		return
	}
	rs, ok := js.regs[k]
	if !ok {
		return
	}
	delete(js.regs, k)
	js.nregs -= len(rs)
	for _, g := range rs {
		if g.j.blocked && g.j.blockGen == g.gen && !g.j.freed {
			js.unblock(g.j)
		}
	}
}

// compact drops registrations of jobs released or freed since.
func (js *jobs) compact() {
	n := 0
	for k, rs := range js.regs {
		keep := rs[:0]
		for _, g := range rs {
			if g.j.blocked && g.j.blockGen == g.gen && !g.j.freed {
				keep = append(keep, g)
			}
		}
		if len(keep) == 0 {
			delete(js.regs, k)
			continue
		}
		clear(rs[len(keep):])
		js.regs[k] = keep
		n += len(keep)
	}
	js.nregs = n
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

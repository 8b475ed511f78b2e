package ring

import (
	"fmt"
	"math"
	"time"

	"zsched/thread"
	"zsched/vertex"
)

// The ring's job lists (DESIGN §7; Postfix SCHEDULER_README "Preemptive
// scheduling", qmgr_job.c). A job is one message within the ring; its
// entries are the message's vertices in the ring. Jobs sit on the
// scheduler's list, which preemption reorders; each job keeps a home node at
// its arrival position (the arrival-order list), which is where a job that
// ran out of queued entries returns when an entry comes back.
//
// The list is an order-maintenance list: every node carries a float label
// increasing along the list, and every queued vertex carries its job's
// label as its Rank. Thread heaps (by Rank) and the ring's wanting heap (by
// each thread's best Rank) therefore feed in list order without looking at
// the list, and moving a job is a new midpoint label written into its
// vertices: O(entries · log n). Labels are renumbered (O(n)) only when a
// gap is exhausted, which takes dozens of preemptions nested in one gap.
//
// Entry counts are explicit so that a message only partly read into core
// (a memory limit) keeps the estimates honest: queued entries are read and
// not yet fed, Unread ones are still on disk (SetUnread); MIN_ENTRIES and
// MAX_ENTRIES of qmgr_job.c are Entries and Entries+Unread.

// Knobs are Postfix's preemption parameters of the ring's clause.
type Knobs struct {
	Cost     int // delivery_slot_cost; below 2 nothing is preempted
	Loan     int // delivery_slot_loan, slots
	Discount int // delivery_slot_discount, percent
	MinSlots int // minimum_delivery_slots
}

// Job is one message within one ring: Postfix's transport job. Every
// message in core has one per ring it has vertices in, so the fields are
// kept small.
type Job struct {
	// The candidate index (preempt.go): a treap by (needed, seq) whose
	// nodes know their subtree's best candidate at the ring's clock. The
	// fields a descent touches come first, and each node keeps a copy of
	// its best's score, so that a descent reads one job per level.
	tl, tr, best *Job
	seq          uint64 // Msg.Seq
	ts           score  // its own score when filed
	bs           score  // best's score
	cert         int32  // the clock at which best may change
	tNeeded      int32  // needed when filed
	prio         uint32
	inTree       bool
	dirty        bool // on the list of jobs to re-file
	blocked      bool // found with no open vertex
	freed        bool

	Msg  *vertex.Message
	ring *Ring

	queuedAt int32 // when the job was created, seconds on the ring's clock
	live     int32 // vertices the job counts, queued or fed
	queued   int32 // entries read and not yet fed (held ones included)
	selected int32 // entries fed: selected_entries
	unread   int32 // entries not yet read into core (an estimate)
	avail    int32 // slots_available
	used     int32 // slots_used; while stacked, real minus expected
	level    int32 // stack level; -1 while off the scheduler's list
	nregs    int32 // live blocker registrations (preempt.go)
	blockGen uint32

	parent  *Job // the job it preempted, while stacked
	child   *Job // first of the jobs that preempt it
	prevSib *Job
	nextSib *Job
	home    node           // its arrival position, on the list while the job exists
	away    *node          // its position in front of the job it preempted, once it has moved
	pos     *node          // home or away
	witness *vertex.Vertex // a vertex last seen open
}

// score is what the candidate index compares: when the job was queued, its
// entries (unread included) and its place on the list.
type score struct {
	q     int32
	total int32
	label float64
}

// Entries returns the job's entries read into core: fed or queued.
func (j *Job) Entries() int { return int(j.selected + j.queued) }

// Unread returns the job's entries not yet read into core.
func (j *Job) Unread() int { return int(j.unread) }

// Selected returns how many of the job's entries were fed.
func (j *Job) Selected() int { return int(j.selected) }

// Available returns the job's delivery-slot counter (slots_available).
func (j *Job) Available() int { return int(j.avail) }

// Level returns the job's preemption stack level, -1 while it is off the
// scheduler's list (no entry queued).
func (j *Job) Level() int { return int(j.level) }

// Rank returns the label its queued vertices carry.
func (j *Job) Rank() float64 { return j.pos.label }

// Blocked reports whether the job was found with no open vertex and has not
// been released since.
func (j *Job) Blocked() bool { return j.blocked }

// Ring returns the ring the job belongs to.
func (j *Job) Ring() *Ring { return j.ring }

func (j *Job) needed() int32 { return j.queued + j.unread }
func (j *Job) total() int32  { return j.selected + j.queued + j.unread }

// moved reports whether the job stands away from home, in front of the
// job it preempted.
func (j *Job) moved() bool { return j.away != nil && j.pos == j.away }

// each calls fn for every vertex the job counts.
func (j *Job) each(fn func(v *vertex.Vertex)) {
	for _, v := range j.Msg.Vertices {
		if x, _ := v.Job.(*Job); x == j {
			fn(v)
		}
	}
}

func (j *Job) addChild(c *Job) {
	c.parent = j
	c.prevSib = nil
	c.nextSib = j.child
	if j.child != nil {
		j.child.prevSib = c
	}
	j.child = c
}

func (j *Job) removeChild(c *Job) {
	if c.prevSib != nil {
		c.prevSib.nextSib = c.nextSib
	} else {
		j.child = c.nextSib
	}
	if c.nextSib != nil {
		c.nextSib.prevSib = c.prevSib
	}
	c.prevSib, c.nextSib, c.parent = nil, nil, nil
}

type jobs struct {
	byMsg     map[*vertex.Message]*Job
	list      labels
	ranked    bool  // vertex ranks follow the list
	k         Knobs // as last configured
	attempted bool  // a preemption was attempted since the last slot

	based bool
	base  int64 // Unix seconds of the clock's zero
	clock int64 // seconds since base; never goes back (int32 range: 68 years)

	root   *Job   // candidate index
	parked *Job   // the current job, kept out of the index while current
	dirty  []*Job // jobs to re-file in the index before the next query
	// deadDirty counts freed jobs still on dirty, pruned now and then so
	// that the list does not keep them alive.
	deadDirty int

	regs      map[thread.Key][]blockReg
	nregs     int // registrations held, stale ones included
	liveRegs  int
	nblocked  int
	renumbers int
}

// Configure sets the ring's order: ranked says vertex ranks follow the job
// list (orders preemptive and fifo; otherwise the caller ranks vertices and
// the lists only count), k the preemption knobs. The core calls it before
// every use so that a reloaded clause takes effect.
func (r *Ring) Configure(ranked bool, k Knobs) {
	js := &r.jobs
	was := js.indexing()
	js.ranked, js.k = ranked, k
	switch {
	case js.indexing() && !was:
		// Every job has its home node on the list: list order, not the
		// map's.
		for n := js.list.head; n != nil; n = n.next {
			if n == &n.job.home {
				js.sync(n.job)
			}
		}
	case was && !js.indexing():
		js.dropIndex()
	}
}

// Jobs returns the number of jobs in the ring.
func (r *Ring) Jobs() int { return len(r.jobs.byMsg) }

// Job returns m's job in the ring, or nil.
func (r *Ring) Job(m *vertex.Message) *Job { return r.jobs.byMsg[m] }

// JobOf returns the job that counts v, or nil.
func JobOf(v *vertex.Vertex) *Job {
	j, _ := v.Job.(*Job)
	return j
}

// tick moves the ring's clock to now (whole seconds, as Postfix) and
// brings the candidate index up to date.
func (r *Ring) tick(now time.Time) int64 {
	js := &r.jobs
	s := now.Unix()
	if !js.based {
		js.base, js.based = s, true
	}
	if t := s - js.base; t > js.clock {
		js.clock = t
		js.advance()
	}
	return js.clock
}

// AddEntry counts a new vertex v of its message as a queued entry of the
// message's job in r, creating the job (at the end of both lists) when it
// is the message's first vertex in r. With ranked order it sets v.Rank; the
// caller then pushes v on its thread's heap. A vertex another ring counts
// is taken from that ring's job first.
func (r *Ring) AddEntry(v *vertex.Vertex, now time.Time) *Job {
	if JobOf(v) != nil {
		Forget(v)
	}
	r.tick(now)
	js := &r.jobs
	j := js.byMsg[v.Msg]
	if j == nil {
		if js.byMsg == nil {
			js.byMsg = make(map[*vertex.Message]*Job)
		}
		j = &Job{Msg: v.Msg, ring: r, seq: v.Msg.Seq, queuedAt: int32(js.clock), level: -1, prio: uint32(mix(v.Msg.Seq))}
		j.home.job = j
		j.pos = &j.home
		js.byMsg[v.Msg] = j
		js.list.append(&j.home, js)
	}
	j.live++
	v.Job, v.JobFed = j, false
	js.enqueue(j, v)
	return j
}

// Requeue counts a fed vertex as queued again (after a deferral, before it
// goes back on its thread's heap): one more entry for its job, which
// returns to its home position if it had left the list. A vertex that now
// belongs to r but was counted elsewhere moves here.
func (r *Ring) Requeue(v *vertex.Vertex, now time.Time) {
	j := JobOf(v)
	if j == nil || j.ring != r {
		r.AddEntry(v, now)
		return
	}
	r.tick(now)
	if !v.JobFed {
		if r.jobs.ranked {
			v.Rank = j.pos.label
		}
		return
	}
	v.JobFed = false
	r.jobs.enqueue(j, v)
}

func (js *jobs) enqueue(j *Job, v *vertex.Vertex) {
	j.queued++
	if j.level < 0 {
		j.pos = &j.home
		j.level = 0
	}
	if j.blocked {
		js.unblock(j) // Postfix: new entries make a blocker a job again
	}
	if js.ranked {
		v.Rank = j.pos.label
	}
	js.sync(j)
}

// Select counts the feeding of v, picked in r: one delivery slot for its
// job (qmgr_job_count_slots). A job with nothing left queued leaves the
// list (qmgr_job_retire).
func (r *Ring) Select(v *vertex.Vertex) {
	r.jobs.attempted = false
	j := JobOf(v)
	if j == nil || v.JobFed {
		return
	}
	v.JobFed = true
	j.queued--
	j.selected++
	j.avail++
	j.used++
	js := &j.ring.jobs
	if j.queued <= 0 {
		j.queued = 0
		js.retire(j)
	}
	js.sync(j)
}

// SetUnread sets the number of m's entries in r not yet read into core.
func (r *Ring) SetUnread(m *vertex.Message, n int) {
	if j := r.jobs.byMsg[m]; j != nil && n >= 0 {
		j.unread = int32(n)
		r.jobs.sync(j)
	}
}

// Forget takes v out of the job that counts it: v is done, dropped, or
// about to be counted by another ring. The job ends with its last vertex.
func Forget(v *vertex.Vertex) {
	j := JobOf(v)
	v.Job = nil
	if j == nil {
		v.JobFed = false
		return
	}
	if !v.JobFed {
		j.queued--
	}
	v.JobFed = false
	j.live--
	if j.witness == v {
		j.witness = nil
	}
	js := &j.ring.jobs
	if j.live <= 0 {
		js.free(j)
		return
	}
	if j.queued <= 0 {
		j.queued = 0
		if j.level >= 0 {
			js.retire(j)
		}
	}
	js.sync(j)
}

// retire takes a job with nothing queued off the scheduler's list; its
// counters stay (qmgr_job_retire).
func (js *jobs) retire(j *Job) {
	if j.level > 0 {
		js.pop(j)
	}
	js.unlink(j)
}

func (js *jobs) unlink(j *Job) {
	js.orphan(j, nil)
	if j.moved() {
		js.list.remove(j.away)
		j.pos = &j.home
	}
	j.level = -1
	js.sync(j)
}

func (js *jobs) free(j *Job) {
	if j.level > 0 {
		js.pop(j)
	}
	if j.level >= 0 {
		js.unlink(j)
	}
	if j.blocked {
		js.unblock(j)
	}
	j.freed = true
	if js.parked == j {
		js.parked = nil
	}
	js.untree(j)
	js.list.remove(&j.home)
	delete(js.byMsg, j.Msg)
	if j.dirty {
		js.deadDirty++
		if js.deadDirty > max(128, len(js.byMsg)/8) {
			js.pruneDirty()
		}
	}
}

// pop takes j off its preemption stack (qmgr_job_pop): its parent is
// charged the slots j used beyond what it was expected to use (or credited
// the ones it did not use), but only if the parent is the job j preempted
// itself; j's children pass to its parent. j keeps its list position.
func (js *jobs) pop(j *Job) {
	p := j.parent
	if p != nil && j.level == p.level+1 {
		p.avail -= j.used * int32(js.k.Cost)
	}
	if p != nil {
		p.removeChild(j)
	}
	js.orphan(j, p)
	j.level = 0
	js.sync(j)
	if p != nil {
		js.sync(p)
	}
}

// orphan gives j's children to p, or to no one (qmgr_job_parent_gone).
func (js *jobs) orphan(j, p *Job) {
	for c := j.child; c != nil; c = j.child {
		j.removeChild(c)
		if p != nil {
			p.addChild(c)
		}
	}
	js.sync(j)
}

// rerank writes j's label into its vertices and restores the heaps that
// hold them.
func (js *jobs) rerank(j *Job, p Picker) {
	label := j.pos.label
	j.each(func(v *vertex.Vertex) {
		v.Rank = label
		if v.Queued() {
			v.Fix()
			p.Moved(v)
		}
	})
}

// mix spreads a sequence number into a treap priority (splitmix64), so
// that the index is balanced without a random source.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// labels is the order-maintenance list of job nodes.
type labels struct {
	head, tail *node
	n          int
}

type node struct {
	prev, next *node
	label      float64
	job        *Job
}

func (l *labels) has(n *node) bool { return n.prev != nil || l.head == n }

const (
	labelGap = 1 << 10
	// labelMax keeps labels exact integers far from float64's 2^53.
	labelMax = 1 << 50
)

func (l *labels) append(n *node, js *jobs) {
	if l.tail != nil && l.tail.label+labelGap > labelMax {
		js.renumber()
	}
	n.prev, n.next = l.tail, nil
	if l.tail == nil {
		n.label = 0
		l.head = n
	} else {
		n.label = l.tail.label + labelGap
		l.tail.next = n
	}
	l.tail = n
	l.n++
}

// insertBefore links n in front of at with a label between at's and its
// predecessor's, renumbering the list when the gap is used up.
func (l *labels) insertBefore(n, at *node, js *jobs) {
	lo, hi := at.label-2*labelGap, at.label
	if at.prev != nil {
		lo = at.prev.label
	}
	mid := lo + (hi-lo)/2
	if !(mid > lo && mid < hi) {
		js.renumber()
		lo, hi = at.label-2*labelGap, at.label
		if at.prev != nil {
			lo = at.prev.label
		}
		mid = lo + (hi-lo)/2
	}
	n.label = mid
	n.prev, n.next = at.prev, at
	if at.prev != nil {
		at.prev.next = n
	} else {
		l.head = n
	}
	at.prev = n
	l.n++
}

func (l *labels) remove(n *node) {
	if !l.has(n) {
		return
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = nil, nil
	l.n--
}

// renumber spreads the labels evenly again, keeping their order, and
// rewrites the ranks that copy them: the heaps stay ordered as they are.
func (js *jobs) renumber() {
	js.renumbers++
	i := 0.0
	for n := js.list.head; n != nil; n = n.next {
		n.label = i * labelGap
		i++
	}
	for n := js.list.head; n != nil; n = n.next {
		j := n.job
		if j.pos != n {
			continue
		}
		if j.inTree {
			j.ts.label = n.label
		}
		if js.ranked {
			j.each(func(v *vertex.Vertex) { v.Relabel(n.label) })
		}
	}
	js.recopy(js.root)
}

// recopy refreshes the index's copies of best scores after a renumbering.
func (js *jobs) recopy(n *Job) {
	if n != nil {
		js.recopy(n.tl)
		js.recopy(n.tr)
		n.bs = n.best.ts
	}
}

// Renumbers returns how often the ring's labels were renumbered.
func (r *Ring) Renumbers() int { return r.jobs.renumbers }

// CheckJobs verifies the job lists' invariants: labels increase along the
// list, every job's counters match the vertices it counts, queued vertices
// carry their job's label, stacks are consistent, and the candidate index
// holds exactly the eligible jobs with correct subtree bests. O(n); for
// tests and the core's Check.
func (r *Ring) CheckJobs() error {
	js := &r.jobs
	js.flush()
	seen := 0
	prev := math.Inf(-1)
	for n := js.list.head; n != nil; n = n.next {
		if !(n.label > prev) {
			return fmt.Errorf("ring: labels out of order at msg %d: %v after %v", n.job.Msg.Seq, n.label, prev)
		}
		if n.next == nil && js.list.tail != n {
			return fmt.Errorf("ring: list tail is wrong")
		}
		prev = n.label
		seen++
	}
	if seen != js.list.n {
		return fmt.Errorf("ring: list has %d nodes, counts %d", seen, js.list.n)
	}
	blocked := 0
	for m, j := range js.byMsg {
		if j.Msg != m || j.ring != r || j.freed {
			return fmt.Errorf("ring: job of msg %d misfiled", m.Seq)
		}
		var live, queued, fed int32
		var bad error
		j.each(func(v *vertex.Vertex) {
			live++
			if v.JobFed {
				fed++
				return
			}
			queued++
			if js.ranked && v.Queued() && v.Rank != j.pos.label && bad == nil {
				bad = fmt.Errorf("ring: msg %d: vertex %s rank %v, job label %v", m.Seq, v.Host, v.Rank, j.pos.label)
			}
		})
		if bad != nil {
			return bad
		}
		if live != j.live || queued != j.queued {
			return fmt.Errorf("ring: msg %d: job counts live %d queued %d, vertices say %d %d", m.Seq, j.live, j.queued, live, queued)
		}
		if (j.level >= 0) != (j.queued > 0) {
			return fmt.Errorf("ring: msg %d: level %d with %d queued", m.Seq, j.level, j.queued)
		}
		if !js.list.has(&j.home) || j.moved() != (j.away != nil && js.list.has(j.away)) {
			return fmt.Errorf("ring: msg %d: nodes off the list", m.Seq)
		}
		if j.level < 0 && j.pos != &j.home {
			return fmt.Errorf("ring: msg %d: off the list but away from home", m.Seq)
		}
		if j.parent != nil && j.level <= 0 {
			return fmt.Errorf("ring: msg %d: parent at level %d", m.Seq, j.level)
		}
		for c := j.child; c != nil; c = c.nextSib {
			if c.parent != j {
				return fmt.Errorf("ring: msg %d: child %d has another parent", m.Seq, c.Msg.Seq)
			}
		}
		if j.blocked {
			blocked++
		}
		if j.inTree != js.filed(j) {
			return fmt.Errorf("ring: msg %d: in index %v, eligible %v", m.Seq, j.inTree, js.eligible(j))
		}
		if j.inTree && (j.tNeeded != j.needed() || j.ts.total != j.total() || j.ts.label != j.pos.label) {
			return fmt.Errorf("ring: msg %d: stale index key", m.Seq)
		}
	}
	if blocked != js.nblocked {
		return fmt.Errorf("ring: %d blocked jobs, counter %d", blocked, js.nblocked)
	}
	n, err := js.checkTree(js.root, nil, nil)
	if err != nil {
		return err
	}
	in := 0
	for _, j := range js.byMsg {
		if j.inTree {
			in++
		}
	}
	if n != in {
		return fmt.Errorf("ring: index holds %d jobs, %d marked", n, in)
	}
	return nil
}

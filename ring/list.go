package ring

import (
	"zsched/vertex"
)

// The scheduler's list of a ring's jobs: an order-maintenance list. Every
// node carries a float label increasing along the list, and every queued
// vertex carries its job's label as its Rank. Thread heaps (by Rank) and
// the ring's wanting heap (by each thread's best Rank) therefore feed in
// list order without looking at the list, and moving a job is a new
// midpoint label written into its vertices: O(entries · log n). Labels are
// renumbered (O(n)) only when a gap is exhausted, which takes dozens of
// preemptions nested in one gap. Each job keeps a home node at its arrival
// position, which is where a job that ran out of queued entries returns
// when an entry comes back, and an away node once it preempted another.

// listPlace is a job's place on the list.
type listPlace struct {
	home node  // its arrival position, on the list while the job exists
	away *node // its position in front of the job it preempted, once it has moved
	pos  *node // home or away
}

// orderList is a ring's list with its counter.
type orderList struct {
	list      labels
	renumbers int
}

// moved reports whether the job stands away from home, in front of the
// job it preempted.
func (j *Job) moved() bool { return j.away != nil && j.pos == j.away }

func (js *jobs) unlink(j *Job) {
	js.orphan(j, nil)
	if j.moved() {
		js.list.remove(j.away)
		j.pos = &j.home
	}
	j.level = -1
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

// Renumbers returns how often the ring's labels were renumbered.
func (r *Ring) Renumbers() int { return r.jobs.renumbers }

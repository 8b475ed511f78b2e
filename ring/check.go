package ring

import (
	"fmt"
	"math"

	"zsched/vertex"
)

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
		var live, queued, nfed int32
		var bad error
		j.each(func(v *vertex.Vertex) {
			live++
			if fed(v) {
				nfed++
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

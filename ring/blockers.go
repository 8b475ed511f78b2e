package ring

import (
	"zsched/thread"
	"zsched/vertex"
)

// Blockers (SCHEDULER_README: jobs before the current one with no vertex a
// free agent could take). A candidate the index offers that turns out to
// have no open vertex is marked blocked, leaves the index, and is
// registered at the threads of its queued vertices; it comes back when one
// of them wants an agent again (Ring.Update) or it gets an entry.

// blockState is a job's standing as a blocker.
type blockState struct {
	blocked  bool   // found with no open vertex
	nregs    int32  // live registrations at threads
	blockGen uint32 // tells this blocking's registrations from older ones
}

// blockers is a ring's registrations of blocked jobs by thread.
type blockers struct {
	regs     map[thread.Key][]blockReg
	nregs    int // registrations held, stale ones included
	liveRegs int
	nblocked int
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
		if fed(v) {
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

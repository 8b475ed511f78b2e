package ring

// The preemption stack (qmgr_job.c's stack_level, stack_parent,
// stack_children): a job that preempted another is its child, one level
// up, until it leaves the stack (pop) and settles the slots it used.

// stackNode is a job's place on the preemption stack.
type stackNode struct {
	level   int32 // stack level; -1 while off the scheduler's list
	parent  *Job  // the job it preempted, while stacked
	child   *Job  // first of the jobs that preempt it
	prevSib *Job
	nextSib *Job
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

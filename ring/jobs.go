package ring

import (
	"time"

	"zsched/vertex"
)

// The ring's job lists (DESIGN §7; Postfix SCHEDULER_README "Preemptive
// scheduling", qmgr_job.c). A job is one message within the ring; its
// entries are the message's vertices in the ring. This file keeps the
// entries' counts as vertices are placed, fed, requeued and done; the job
// also stands on the scheduler's list (list.go), on a preemption stack
// (stack.go), in the candidate index (index.go) and, while no vertex of it
// is open, among the blockers (blockers.go); preempt.go is the policy that
// moves it.
//
// Entry counts are explicit so that a message only partly read into core
// (a memory limit) keeps the estimates honest: queued entries are read and
// not yet fed, unread ones are still on disk (SetUnread); MIN_ENTRIES and
// MAX_ENTRIES of qmgr_job.c are Entries and Entries+Unread.

// Job is one message within one ring: Postfix's transport job. Every
// message in core has one per ring it has vertices in, so the fields are
// kept small; each concept's fields are declared in its own file.
type Job struct {
	indexNode // first: the fields a descent of the index touches (index.go)

	Msg  *vertex.Message
	ring *Ring

	queuedAt int32 // when the job was created, seconds on the ring's clock
	live     int32 // vertices the job counts, queued or fed
	queued   int32 // entries read and not yet fed (held ones included)
	selected int32 // entries fed: selected_entries
	unread   int32 // entries not yet read into core (an estimate)
	avail    int32 // slots_available
	used     int32 // slots_used; while stacked, real minus expected
	freed    bool  // no longer in the ring

	blockState // blockers.go
	stackNode  // stack.go
	listPlace  // list.go

	lastOpen *vertex.Vertex // a vertex last seen open (preempt.go)
}

// jobs is a ring's job lists and preemption state.
type jobs struct {
	byMsg map[*vertex.Message]*Job

	orderList  // list.go
	candidates // index.go
	blockers   // blockers.go
	policy     // preempt.go

	based bool
	base  int64 // Unix seconds of the clock's zero
	clock int64 // seconds since base; never goes back (int32 range: 68 years)
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

func (j *Job) total() int32 { return j.selected + j.queued + j.unread }

// each calls fn for every vertex the job counts.
func (j *Job) each(fn func(v *vertex.Vertex)) {
	for _, v := range j.Msg.Vertices {
		if jobOf(v) == j {
			fn(v)
		}
	}
}

// jobOf returns the job that counts v, nil when none.
func jobOf(v *vertex.Vertex) *Job {
	j, _ := v.Job()
	x, _ := j.(*Job)
	return x
}

// fed reports whether the job that counts v counts it as fed.
func fed(v *vertex.Vertex) bool {
	_, f := v.Job()
	return f
}

// Jobs returns the number of jobs in the ring.
func (r *Ring) Jobs() int { return len(r.jobs.byMsg) }

// Job returns m's job in the ring, or nil.
func (r *Ring) Job(m *vertex.Message) *Job { return r.jobs.byMsg[m] }

// JobOf returns the job that counts v, or nil.
func JobOf(v *vertex.Vertex) *Job { return jobOf(v) }

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
	if jobOf(v) != nil {
		Leave(v)
	}
	r.tick(now)
	js := &r.jobs
	j := js.byMsg[v.Msg]
	if j == nil {
		if js.byMsg == nil {
			js.byMsg = make(map[*vertex.Message]*Job)
		}
		j = &Job{Msg: v.Msg, ring: r, queuedAt: int32(js.clock)}
		j.seq, j.prio, j.level = v.Msg.Seq, uint32(mix(v.Msg.Seq)), -1
		j.home.job = j
		j.pos = &j.home
		js.byMsg[v.Msg] = j
		js.list.append(&j.home, js)
	}
	j.live++
	v.SetJob(j, false)
	js.enqueue(j, v)
	return j
}

// Requeue counts a fed vertex as queued again (after a deferral, before it
// goes back on its thread's heap): one more entry for its job, which
// returns to its home position if it had left the list. A vertex that now
// belongs to r but was counted elsewhere moves here.
func (r *Ring) Requeue(v *vertex.Vertex, now time.Time) {
	j := jobOf(v)
	if j == nil || j.ring != r {
		r.AddEntry(v, now)
		return
	}
	r.tick(now)
	if !fed(v) {
		if r.jobs.ranked {
			v.Rank = j.pos.label
		}
		return
	}
	v.SetJob(j, false)
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
	j := jobOf(v)
	if j == nil || fed(v) {
		return
	}
	v.SetJob(j, true)
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

// Leave takes v out of the job that counts it: v is done, dropped, or
// about to be counted by another ring. The job ends with its last vertex.
func Leave(v *vertex.Vertex) {
	j, wasFed := jobOf(v), fed(v)
	v.SetJob(nil, false)
	if j == nil {
		return
	}
	if !wasFed {
		j.queued--
	}
	j.live--
	if j.lastOpen == v {
		j.lastOpen = nil
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

// mix spreads a sequence number into a treap priority (splitmix64), so
// that the index is balanced without a random source.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

package core

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/report"
	"zsched/ring"
	"zsched/thread"
	"zsched/vertex"
	"zsched/window"
)

// serve gives agents to the ring's wanting threads, best first, until none
// wants or no agent can be had; at most limit agents when limit ≥ 0. It
// returns how many threads got an agent.
func (s *Core) serve(r *ring.Ring, now time.Time, limit int) int {
	n := 0
	if s.stopping {
		return 0
	}
	for limit < 0 || n < limit {
		t := r.Best(nil)
		if t == nil {
			return n
		}
		if !s.admit(t, now) {
			continue // asking its book: out of the wanting heap meanwhile
		}
		a := s.obtain(r, t, now)
		if a == nil {
			s.unspare(t, now)
			return n
		}
		if s.orderPick(r, now) {
			// A job was moved in front: its thread first, if its book
			// lets it.
			if t2 := r.Best(nil); t2 != nil && t2 != t && s.admit(t2, now) {
				s.unspare(t, now)
				t = t2
			}
		}
		s.attach(a, t, now)
		n++
	}
	return n
}

// obtain returns an agent for thread t of ring r: an idle one of the ring
// (the same host first, for its open connection), else a new one within the
// limits, else nil with r queued as blocked when a global limit binds.
func (s *Core) obtain(r *ring.Ring, t *thread.Thread, now time.Time) *agent {
	if id, ok := r.Unpark(t.Host); ok {
		a := s.agents[id]
		a.state = working
		return a
	}
	c := s.clause(t.Clause)
	switch {
	case s.transportClosed(r, now):
		// Its agents failed at start: no new one before the back-off
		// ends, and then one probe at a time (throttle.go). Lifting the
		// throttle serves the ring.
		t.LastText = "transport unavailable"
		return nil
	case r.Agents() >= s.maxRing(c):
		// The ring's own agents will come to t when they finish their
		// threads; nothing outside the ring can help.
		t.LastText = ">MaxRing"
		return nil
	case s.total >= s.cfg.Scheduler.MaxTA:
		t.LastText = ">MaxTA"
		s.block(r)
		s.reclaimIdle(r)
		return nil
	case s.perChannel[t.Channel] >= c.MaxChannel:
		t.LastText = ">MaxChannel"
		s.block(r)
		s.reclaimIdleChannel(r, t.Channel)
		return nil
	case !s.forkAllowed(now):
		t.LastText = "ForkRateLimit"
		s.forkBlocked = true
		s.block(r)
		return nil
	}
	s.nextAgent++
	a := &agent{
		id:      s.nextAgent,
		clause:  t.Clause,
		channel: t.Channel,
		ring:    r,
		state:   starting,
		heard:   now,
	}
	a.push(entry{kind: entryStart})
	s.agents[a.id] = a
	s.transportStarted(r, a)
	s.total++
	s.perChannel[a.channel]++
	r.AddAgent()
	s.stats.Spawned++
	s.ready.Spawns = append(s.ready.Spawns, Spawn{Agent: a.id, Clause: t.Clause, Channel: t.Channel, Host: r.Host})
	return a
}

func (s *Core) forkAllowed(now time.Time) bool {
	rate := s.cfg.Scheduler.ForkRate
	if rate <= 0 {
		return true
	}
	if sec := now.Unix(); sec != s.forkSecond {
		s.forkSecond, s.forks = sec, 0
	}
	if s.forks >= rate {
		return false
	}
	s.forks++
	return true
}

func (s *Core) block(r *ring.Ring) {
	if !r.Blocked() {
		r.SetBlocked(true)
		s.blocked = append(s.blocked, r)
	}
}

// reclaimIdle ends the longest-idle agent of another ring so that a ring
// blocked by maxta gets the slot when it exits (ZMailer never does; Q7).
func (s *Core) reclaimIdle(blocked *ring.Ring) {
	s.reclaim(func(a *agent) bool { return a.ring != blocked })
}

func (s *Core) reclaimIdleChannel(blocked *ring.Ring, channel string) {
	s.reclaim(func(a *agent) bool { return a.ring != blocked && a.channel == channel })
}

func (s *Core) reclaim(ok func(*agent) bool) {
	var oldest *agent
	var since time.Time
	for _, r := range s.rings {
		for in := range r.Idle() {
			a := s.agents[in.Agent]
			// Agents idle since the same instant go by id, not by the
			// order the rings' map is walked in.
			if ok(a) && (oldest == nil || in.Since.Before(since) || in.Since.Equal(since) && a.id < oldest.id) {
				oldest, since = a, in.Since
			}
		}
	}
	if oldest != nil {
		oldest.ring.RemoveIdle(oldest.id)
		s.end(oldest, "idle agent reclaimed for a blocked ring")
	}
}

// unblock serves blocked rings round-robin, one agent per ring per turn,
// after a slot freed.
func (s *Core) unblock(now time.Time) {
	s.forkBlocked = false
	for n := len(s.blocked); n > 0 && len(s.blocked) > 0; n-- {
		r := s.blocked[0]
		s.blocked = s.blocked[1:]
		r.SetBlocked(false)
		got := s.serve(r, now, 1)
		if got == 0 && s.transportClosed(r, now) {
			// Not the limit's fault: the slot goes to the next ring, and
			// the end of the back-off serves this one.
			continue
		}
		if r.Wanting() > 0 && !r.Blocked() {
			// Served (or not blocked any more): back of the queue for the
			// next free slot.
			if got > 0 {
				s.block(r)
			}
		}
		if got == 0 {
			return
		}
	}
}

// attach puts agent a on thread t and feeds it.
func (s *Core) attach(a *agent, t *thread.Thread, now time.Time) {
	a.thread = t
	a.host = t.Host
	t.Busy++
	s.lease(a, t)
	s.feed(a, now)
}

// detach takes a off its thread.
func (s *Core) detach(a *agent, now time.Time) {
	t := a.thread
	if t == nil {
		return
	}
	a.thread = nil
	t.Busy--
	s.unlease(a, t, now)
	s.update(t, now)
}

// feed writes job lines to a until overfeed+1 are outstanding or its thread
// has nothing due, the best vertex of the thread first. With feed =
// "message" each job is followed by its message's other vertices in the
// ring that can be fed (feedPeer), before the thread's next vertex.
func (s *Core) feed(a *agent, now time.Time) {
	t := a.thread
	limit := s.clause(a.clause).Overfeed + 1
	peers := s.feedsPeers(a)
	for !s.stopping && a.jobs < limit {
		// A peer needs room in its own thread's window, not in t's.
		if peers && a.peers != nil && s.feedPeer(a, now) {
			continue
		}
		// An agent takes no new job while its thread has more agents than
		// its window allows: negative feedback must take effect on agents
		// already attached, not only on new ones (Postfix checks the
		// window per delivery).
		if !t.Startable(now) || !s.within(t) {
			break
		}
		s.orderPickFrom(a.ring, t, now)
		v := t.Ready.Pop()
		s.orderFed(a.ring, v, now)
		s.job(a, v, t, nil, now)
		if peers {
			a.peers, a.peerAt = v.Msg, 0
			// The pop left t out of place in the ring's wanting heap,
			// which borrowing on another thread rearranges.
			a.ring.Update(t, now)
		}
	}
	s.ring(t).Update(t, now)
	s.agenda.SetWake(t, t.NextWake(now))
}

// job writes v's job line to a: v, taken off t's Ready heap, is a's to
// attempt. borrowed is t when the job holds one of t's sessions (t is not
// a's thread), else nil.
func (s *Core) job(a *agent, v *vertex.Vertex, t, borrowed *thread.Thread, now time.Time) {
	due := v.Due()
	if t.BackoffUntil.After(due) {
		due = t.BackoffUntil
	}
	s.latency.Observe(now.Sub(due))
	v.Agent = a.id
	v.Attempts++
	a.push(entry{kind: entryJob, v: v, msg: v.Msg, fed: now, borrowed: borrowed, thread: t})
	a.jobs++
	if c := s.clause(a.clause); c.JobTimeout > 0 {
		s.watch(a.heard.Add(c.JobTimeout.D()))
	}
	line := v.Msg.Path
	if !a.ring.HostBound() {
		line += "\t" + v.Host
	}
	s.ready.Writes = append(s.ready.Writes, Write{Agent: a.id, Line: line, Due: due})
}

// feedsPeers reports whether a is fed its messages' peers (feed =
// "message"). Never for a host-bound ring, whose agents serve one host
// (config refuses it; a clause built by hand may not).
func (s *Core) feedsPeers(a *agent) bool {
	return s.clause(a.clause).Feed == config.FeedMessage && !a.ring.HostBound()
}

// feedPeer feeds a the first vertex of a.peers, the message a was last
// fed, that its own thread would let an agent take now: in a's ring,
// ready, on a thread that is startable, not asking its book and has a
// session free in its window (with a book: a lease granted for it,
// borrowLease). The job borrows that session (entry.borrowed) unless the
// thread is a's own. It reports whether one was fed. a.peers
// stays until a is fed another message or goes idle: a peer that was not
// ready (placed after a's job, promoted by a later timer, or its window
// full) is fed at a's next #hungry if it is ready then. The peers are
// looked at in the message's order, from where the last call stopped.
//
// This is Postfix's order within a job (qmgr_job_entry_select: the current
// job's next peer) rather than ZMailer's thread binding: an agent's
// consecutive jobs are one message, whose files it keeps open.
func (s *Core) feedPeer(a *agent, now time.Time) bool {
	vs := a.peers.Vertices
	n := min(len(vs), maxPeerScan)
	for k := range n {
		i := (a.peerAt + k) % len(vs)
		v := vs[i]
		if v.Agent != 0 {
			continue
		}
		t := s.threadOf(v)
		// The ring is not host-bound (feedsPeers): its key is the clause
		// and the channel.
		if t == nil || t.Clause != a.ring.Clause || t.Channel != a.ring.Channel || !v.In(&t.Ready) || !t.Startable(now) {
			continue
		}
		if t == a.thread {
			if !s.within(t) {
				continue
			}
			t.Ready.Remove(v)
			s.orderFed(a.ring, v, now)
			s.job(a, v, t, nil, now)
			a.ring.Update(t, now)
			a.peerAt = i + 1
			return true
		}
		var l window.Lease
		if s.book != nil {
			// The book counts the cluster's sessions: the job holds a
			// lease of its own (borrowLease), as an agent attaching does.
			var ok bool
			if l, ok = s.borrowLease(a, t, now); !ok {
				continue
			}
		} else if t.Asking || t.Busy >= t.Window.Limit() {
			continue
		}
		t.Ready.Remove(v)
		t.Busy++
		s.orderFed(a.ring, v, now)
		s.job(a, v, t, t, now)
		a.fifo[len(a.fifo)-1].lease = l
		s.borrowed++
		a.ring.Update(t, now)
		s.agenda.SetWake(t, t.NextWake(now))
		a.peerAt = i + 1
		return true
	}
	if len(vs) > 0 {
		a.peerAt = (a.peerAt + n) % len(vs)
	}
	return false
}

// maxPeerScan bounds the vertices feedPeer looks at in one call: a
// message to many destinations whose windows are full would otherwise
// cost a look at each of them at every #hungry. The next call goes on
// where this one stopped (agent.peerAt).
const maxPeerScan = 64

// giveBack returns the session e's job borrowed, if any, and its lease
// to the book. The caller updates the thread.
func (s *Core) giveBack(e *entry, now time.Time) {
	t := e.borrowed
	if t == nil {
		return
	}
	e.borrowed = nil
	t.Busy--
	s.borrowed--
	if l := e.lease; l != 0 {
		e.lease = 0
		s.release(s.seatOf(t), l, now)
	}
}

// next finds more work for an agent with nothing outstanding: the best
// thread of its ring, else #idle.
func (s *Core) next(a *agent, now time.Time) {
	if a.thread != nil {
		s.feed(a, now)
		if a.jobs > 0 {
			return
		}
		s.detach(a, now)
	}
	if a.state == ending {
		return
	}
	if c := s.clause(a.clause); a.ring.Agents() > s.maxRing(c) && a.ring.Agents()-s.ending(a.ring) > s.maxRing(c) {
		// maxring was lowered by a reload: the ring shrinks as agents
		// come free.
		s.end(a, "ring over maxring")
		return
	}
	s.orderPick(a.ring, now)
	t := a.ring.Best(nil)
	for t != nil && !s.clause(t.Clause).QueueOnly && !s.admit(t, now) {
		t = a.ring.Best(nil) // t asks its book: the next best
	}
	if t != nil && !s.clause(t.Clause).QueueOnly {
		s.attach(a, t, now)
		if a.jobs > 0 {
			return
		}
		s.detach(a, now)
	}
	a.peers = nil
	a.push(entry{kind: entryIdle})
	a.state = idling
	s.ready.Writes = append(s.ready.Writes, Write{Agent: a.id, Line: "#idle"})
}

// AgentLine handles one line from an agent.
func (s *Core) AgentLine(now time.Time, id int, line string) {
	s.event("AgentLine")
	a, ok := s.agents[id]
	if !ok {
		return
	}
	a.heard = now
	switch {
	case line == "#hungry":
		s.hungry(a, now)
	case strings.HasPrefix(line, "#resync "):
		s.resync(a, strings.TrimSpace(line[len("#resync "):]), now)
	case strings.HasPrefix(line, "#") || line == "":
		s.log.Debug("agent says", "agent", id, "line", line)
	default:
		l, err := report.Parse(line)
		if err != nil {
			s.garbage(a, now, err.Error(), line)
			return
		}
		if s.report(a, l, now) {
			return
		}
		_, in := s.msgs[l.Inum]
		switch {
		case !in && a.hasJob(l.Inum):
			// Killed or dropped from core while the agent worked on it.
			s.log.Debug("report for a message no longer in core", "agent", id, "line", line)
		case in:
			s.garbage(a, now, "recipient not fed to this agent (or already reported)", l.String())
		default:
			s.garbage(a, now, "unknown message", l.String())
		}
	}
}

// garbage counts and logs a misformed line: stderr text in socketpair mode
// is one, so it is what an agent says about its own trouble. The log is
// rate-limited per ring (words.go); the agent is killed only past
// maxGarbage in one job.
func (s *Core) garbage(a *agent, now time.Time, why, line string) {
	a.garbage++
	s.stats.Garbage++
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	s.say(a, misformedWords, now, hclog.Warn, "misformed line from agent", "error", why, "line", line)
	if a.garbage > maxGarbage {
		s.kill(a, "more than "+strconv.Itoa(maxGarbage)+" misformed lines in one job", now)
	}
}

// AgentTooLong handles an agent line over the protocol's limit: the agent
// is killed and its work rescheduled.
func (s *Core) AgentTooLong(now time.Time, id int) {
	s.event("AgentTooLong")
	if a, ok := s.agents[id]; ok {
		s.stats.Garbage++
		s.kill(a, "line over "+strconv.Itoa(report.MaxLine)+" bytes", now)
	}
}

func (s *Core) hungry(a *agent, now time.Time) {
	if len(a.fifo) == 0 {
		s.garbage(a, now, "#hungry with no line outstanding", "#hungry")
		return
	}
	a.hungry = true
	a.garbage = 0
	e := a.pop()
	switch e.kind {
	case entryStart:
		if a.state == starting {
			a.state = working
		}
	case entryJob:
		a.jobs--
		s.finish(a, e, now, "")
		if len(s.throttles) > 0 {
			s.transportWorks(a, now)
		}
	case entryIdle:
		if a.state == idling {
			a.state = idle
		}
	}
	if a.state == ending {
		return
	}
	if a.state == idle {
		if len(a.fifo) == 0 {
			s.park(a, now)
		}
		return
	}
	if a.jobs == 0 && len(a.fifo) == 0 {
		s.next(a, now)
	} else if a.thread != nil {
		s.feed(a, now)
	}
}

// park puts an idle agent in its ring's pool, unless a ring blocked by a
// global limit can use the slot better.
func (s *Core) park(a *agent, now time.Time) {
	for _, r := range s.blocked {
		if r != a.ring && (s.total >= s.cfg.Scheduler.MaxTA ||
			(r.Channel == a.channel && s.perChannel[a.channel] >= s.clause(r.Clause).MaxChannel)) {
			s.end(a, "idle agent yields its slot to a blocked ring")
			return
		}
	}
	a.ring.Park(a.id, a.host, now)
	if c := s.clause(a.clause); c.IdleMax >= 0 {
		s.watch(a.heard.Add(c.IdleMax.D()))
	}
	// Work may have come for the ring while the agent was going idle.
	s.serve(a.ring, now, -1)
}

// AgentExited handles the end of an agent's process (and of every process
// of its group), or the failure to start it. Jobs it had not finished get a
// synthetic deferral and their files are re-read so the locks it left are
// reset. An agent that ended before its first #hungry or with jobs
// outstanding, not killed by us, is a transport failure: its jobs count as
// negative feedback and its ring is throttled (throttle.go).
func (s *Core) AgentExited(now time.Time, id int, why string) {
	s.event("AgentExited")
	a, ok := s.agents[id]
	if !ok {
		return
	}
	delete(s.agents, id)
	s.total--
	s.perChannel[a.channel]--
	a.ring.RemoveAgent(id)
	s.stats.AgentsEnded++
	if why == "" {
		why = "agent exited"
	}
	if a.killed && a.killReason != "" {
		// What WHY shows for its jobs: the cause, not the signal.
		why = "agent killed (" + a.killReason + ")"
	}
	busy := a.jobs > 0
	if th := s.throttled(a.ring); th != nil && th.probe == id {
		th.probe = 0
	}
	a.failed = !a.killed && !s.stopping && a.clause >= 0 && (!a.hungry || busy)
	switch {
	case a.failed:
		// Before its jobs are finished: finishing them serves the ring.
		reason := why + " before its first #hungry"
		if a.hungry {
			reason = why + " with " + strconv.Itoa(a.jobs) + " jobs outstanding"
		}
		s.transportFailed(a, reason, now)
	case busy:
		s.log.Warn("agent exited with work outstanding", "agent", id, "reason", why)
	}
	a.state = ending
	for _, e := range a.fifo {
		if e.kind != entryJob {
			continue
		}
		m := e.msg
		s.finish(a, e, now, why+" with the job outstanding")
		if !m.Gone {
			s.ready.Rereads = append(s.ready.Rereads, Reread{Path: m.Path, Inum: m.Inum})
		}
	}
	a.dropFifo()
	a.jobs = 0
	s.detach(a, now)
	if a.ring.Empty() {
		s.dropRing(a.ring)
	}
	s.unblock(now)
	// A thread left wanting by the exit gets a new agent in its ring.
	if r, ok := s.rings[a.ring.Key]; ok && r.Wanting() > 0 {
		s.serve(r, now, -1)
	}
}

func (s *Core) end(a *agent, reason string) {
	if a.state == ending {
		return
	}
	a.state = ending
	s.ready.Stops = append(s.ready.Stops, Stop{Agent: a.id, Reason: reason})
}

func (s *Core) kill(a *agent, reason string, now time.Time) {
	if a.killed {
		return
	}
	a.killed = true
	a.killReason = reason
	s.stats.Killed++
	a.state = ending
	// The daemon logs "killing agent", with its pid, when it carries out the stop.
	s.ready.Stops = append(s.ready.Stops, Stop{Agent: a.id, Kill: true, Reason: reason})
	if a.thread != nil {
		s.detach(a, now)
	}
	// Its borrowed sessions come free with its own: a killed agent's jobs
	// are done with, though they end only at its exit.
	for i := range a.fifo {
		if t := a.fifo[i].borrowed; t != nil {
			s.giveBack(&a.fifo[i], now)
			s.update(t, now)
		}
	}
}

// sweepAgents kills busy agents silent past jobtimeout and ends idle ones
// past idlemax, then sets the next sweep to the earliest deadline left, so
// the core wakes only when an agent can be due (feeding and parking lower
// it through watch, also while the sweep runs: a kill may start and feed
// an agent the walk does not see). An agent told to end but still holding
// jobs is watched too: it may hang as well as any.
func (s *Core) sweepAgents(now time.Time) {
	var next time.Time
	later := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	s.nextSweep = time.Time{}
	var silent, idlers []*agent
	for _, a := range s.agents {
		if a.clause < 0 || a.killed {
			continue // retired by a reload that left it no clause, or killed
		}
		c := s.clause(a.clause)
		switch {
		case a.jobs > 0 && c.JobTimeout > 0:
			if at := a.heard.Add(c.JobTimeout.D()); now.Before(at) {
				later(at)
			} else {
				silent = append(silent, a)
			}
		case a.state == idle && c.IdleMax >= 0:
			if at := a.heard.Add(c.IdleMax.D()); now.Before(at) {
				later(at)
			} else {
				idlers = append(idlers, a)
			}
		}
	}
	// By id: what the kills and ends set off (new agents for the threads)
	// must not depend on the map's order.
	byID := func(as []*agent) {
		sort.Slice(as, func(i, j int) bool { return as[i].id < as[j].id })
	}
	byID(silent)
	byID(idlers)
	for _, a := range silent {
		s.kill(a, "job timeout: silent for "+now.Sub(a.heard).String(), now)
	}
	for _, a := range idlers {
		a.ring.RemoveIdle(a.id)
		s.end(a, "idlemax")
	}
	if !next.IsZero() {
		s.watch(next)
	}
}

// Silent returns, by id, the agents a Tick at now would kill for silence
// (jobtimeout). It changes nothing: the caller makes sure it has handed the
// core everything these agents wrote before it lets the sweep judge them
// (their output may sit unread while the caller itself was stalled).
func (s *Core) Silent(now time.Time) []int {
	if s.nextSweep.IsZero() || now.Before(s.nextSweep) {
		return nil
	}
	var ids []int
	for id, a := range s.agents {
		if a.clause < 0 || a.killed || a.jobs == 0 {
			continue
		}
		if c := s.clause(a.clause); c.JobTimeout > 0 && !now.Before(a.heard.Add(c.JobTimeout.D())) {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	return ids
}

// AgentLingers handles an agent's own exit while other processes of its
// group still run (a child it forked to deliver): AgentExited comes when
// they are gone. It takes no more work; with none outstanding its group is
// killed, else jobtimeout watches it as it watches any busy agent.
func (s *Core) AgentLingers(now time.Time, id int) {
	s.event("AgentLingers")
	a, ok := s.agents[id]
	if !ok || a.killed {
		return
	}
	s.log.Info("agent exited; waiting for the rest of its process group", "agent", id,
		"channel", a.channel, "host", a.host, "jobs", a.jobs)
	a.ring.RemoveIdle(id)
	if a.jobs == 0 {
		s.kill(a, "exited, leaving processes of its group behind", now)
		return
	}
	a.state = ending
	if a.clause >= 0 {
		if c := s.clause(a.clause); c.JobTimeout > 0 {
			s.watch(a.heard.Add(c.JobTimeout.D()))
		}
	}
}

// watch makes sure the agent sweep runs no later than at.
func (s *Core) watch(at time.Time) {
	if s.nextSweep.IsZero() || at.Before(s.nextSweep) {
		s.nextSweep = at
	}
}

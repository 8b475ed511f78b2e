package daemon

import (
	"strings"
	"time"

	"zsched/agent"
	"zsched/core"
)

// What the daemon keeps of its agents beyond the processes (apply.go): the
// last lines each one wrote, so that a transport failure is logged with the
// agent's own words; the pid and those lines of agents that exited, until
// the core's actions about them (outcome lines, a throttle) are carried out;
// and the answers awaited from agents asked to Sync before the core judges
// them silent.

// tailLines is how many of an agent's last output lines are kept.
const tailLines = 5

// tailLineMax bounds one kept line.
const tailLineMax = 300

// tail is an agent's last output lines, a small ring.
type tail struct {
	lines [tailLines]string
	n     int // lines written in all
}

func (t *tail) add(line string) {
	if line == "#hungry" {
		return // says nothing about what went wrong
	}
	if len(line) > tailLineMax {
		line = line[:tailLineMax] + "…"
	}
	t.lines[t.n%tailLines] = line
	t.n++
}

// last returns the kept lines, oldest first.
func (t *tail) last() []string {
	if t == nil {
		return nil
	}
	var out []string
	for i := max(t.n-tailLines, 0); i < t.n; i++ {
		out = append(out, t.lines[i%tailLines])
	}
	return out
}

// goneAgent is an exited agent, kept until the actions its exit caused are
// carried out.
type goneAgent struct {
	pid   int
	lines []string
}

// heard keeps one line of agent id.
func (d *Daemon) heard(id int, line string) {
	t := d.tails[id]
	if t == nil {
		if d.tails == nil {
			d.tails = make(map[int]*tail)
		}
		t = &tail{}
		d.tails[id] = t
	}
	t.add(line)
}

// exited moves an agent from the live ones to the gone ones.
func (d *Daemon) exited(id int) {
	g := goneAgent{lines: d.tails[id].last()}
	if p := d.procs[id]; p != nil {
		g.pid = p.Pid()
	}
	if d.gone == nil {
		d.gone = make(map[int]goneAgent)
	}
	d.gone[id] = g
	delete(d.procs, id)
	delete(d.tails, id)
	delete(d.syncing, id)
	d.forgetLines(id)
}

// agentPid returns the pid of agent id, also of one that has just exited:
// the outcome lines of its jobs name it.
func (d *Daemon) agentPid(id int) int {
	if p := d.procs[id]; p != nil {
		return p.Pid()
	}
	return d.gone[id].pid
}

// settleWait bounds how long the loop waits for agents' Synced answers. It
// is a guard: a reader answers as soon as it runs.
const settleWait = 5 * time.Second

// settle hands the core everything the agents it would now judge silent
// have written, before the core judges them: their lines may still be in
// the socket, unread, when the scheduler itself was what stalled (SIGSTOP,
// a long turn), or in the event channel behind the timer. Each such agent
// is asked to Sync, and events are taken until each has answered or exited.
func (d *Daemon) settle() {
	ids := d.core.Silent(d.now())
	if len(ids) == 0 {
		return
	}
	d.syncing = make(map[int]bool, len(ids))
	for _, id := range ids {
		if p := d.procs[id]; p != nil && p.Sync() {
			d.syncing[id] = true
		}
	}
	guard := time.NewTimer(settleWait)
	defer guard.Stop()
	for len(d.syncing) > 0 {
		select {
		case ev := <-d.events:
			d.agentEvent(d.now(), ev)
		case <-guard.C:
			d.log.Warn("agents did not answer a sync in time; judging them as they are", "agents", len(d.syncing))
			d.syncing = nil
			return
		}
	}
	d.syncing = nil
}

// tick is the loop's timer: intake's and the core's timers, after what the
// agents wrote is in.
func (d *Daemon) tick() {
	d.settle()
	now := d.now()
	d.intakeTick(now)
	d.core.Tick(now)
	d.apply()
	d.saveStateDue(now)
}

// logThrottle logs a transport throttle once, with the failing agent's
// last words.
func (d *Daemon) logThrottle(th core.Throttle) {
	g := d.gone[th.Agent]
	sel := ""
	if th.Clause >= 0 && th.Clause < len(d.cfg.Clauses) {
		sel = d.cfg.Clauses[th.Clause].Select
	}
	host := th.Host
	if host == "" {
		host = th.Ring
	}
	d.log.Warn("transport unavailable: its agent failed; no new agent until the back-off ends",
		"clause", sel, "channel", th.Channel, "host", host, "agent", th.Agent, "pid", g.pid,
		"reason", th.Reason, "backoff", th.Backoff.String(), "until", th.Until.UTC().Format(time.RFC3339),
		"failures", th.Failures, "output", strings.Join(g.lines, " | "))
}

// agentEvent hands one agent event to the core at now: the time the loop
// took it, read once for the batch of events ready together (Run), as a
// clock read per event was a tenth of the loop's CPU (two events, a report
// and a #hungry, a recipient).
func (d *Daemon) agentEvent(now time.Time, ev agent.Event) {
	switch ev.Kind {
	case agent.Line:
		d.heard(ev.ID, ev.Line)
		d.core.AgentLine(now, ev.ID, ev.Line)
	case agent.Stderr:
		d.heard(ev.ID, ev.Line)
		d.core.AgentStderr(now, ev.ID, ev.Line)
	case agent.TooLong:
		d.heard(ev.ID, ev.Line)
		d.core.AgentTooLong(now, ev.ID)
	case agent.Synced:
		delete(d.syncing, ev.ID)
	case agent.Lingering:
		d.core.AgentLingers(now, ev.ID)
	case agent.Exited:
		if ev.Partial > 0 {
			d.log.Warn("agent output ended in a partial line", "agent", ev.ID, "lost_bytes", ev.Partial)
		}
		d.exited(ev.ID)
		d.core.AgentExited(now, ev.ID, exitReason(ev))
	}
}

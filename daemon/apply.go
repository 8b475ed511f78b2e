package daemon

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/agent"
	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
)

// maxBacklog bounds the bytes queued for an agent that does not read them.
const maxBacklog = 1 << 20

// apply carries out the core's actions until it has none left (re-reads
// feed results back, which may produce more).
func (d *Daemon) apply() {
	for d.core.HasReady() {
		r := d.core.Ready()
		var failed []failedStart
		for _, sp := range r.Spawns {
			if err := d.spawn(sp); err != nil {
				failed = append(failed, failedStart{sp.Agent, err})
			}
		}
		d.write(r.Writes)
		// One clock read for the batch (not one a job line, a recipient):
		// the lines' dispatch latency, the re-reads and the failed starts.
		now := d.now()
		for _, w := range r.Writes {
			if p := d.procs[w.Agent]; p != nil {
				if n := p.Backlog(); n > maxBacklog {
					// The protocol answers every line with a #hungry, so a
					// reading agent never lets this grow: this one stopped
					// reading but keeps asking for work.
					d.log.Warn("killing agent", "agent", w.Agent, "pid", p.Pid(), "reason", "not reading its input", "backlog", n)
					p.Kill(killGrace)
				}
				if !w.Due.IsZero() {
					d.operator.metrics.dispatched(now.Sub(w.Due))
				}
			}
		}
		for _, st := range r.Stops {
			p := d.procs[st.Agent]
			if p == nil {
				continue
			}
			if st.Kill {
				d.log.Warn("killing agent", "agent", st.Agent, "pid", p.Pid(), "reason", st.Reason)
				p.Kill(killGrace)
			} else {
				d.log.Debug("ending agent", "agent", st.Agent, "pid", p.Pid(), "reason", st.Reason)
				p.End()
			}
		}
		d.diags(r.Diags)
		for _, o := range r.Outcomes {
			d.logOutcome(o)
			d.settled(o) // intake.go: recipient accounting
		}
		for _, c := range r.Completes {
			d.left(c.Inum)
			d.finish(c) // complete.go
		}
		for _, n := range r.DSNs {
			d.notice(n)
		}
		for _, th := range r.Throttles {
			d.logThrottle(th)
		}
		d.observed(r.Observations)
		if d.opt.OnBatch != nil {
			d.opt.OnBatch(&r)
		}
		for _, rr := range r.Rereads {
			d.reread(now, rr)
		}
		d.core.Advance()
		for _, f := range failed {
			// Logged once per throttle, with the error as the agent's last
			// words (core/throttle.go), not once per start.
			d.log.Debug("cannot start agent", "agent", f.id, "error", f.err)
			if d.gone == nil {
				d.gone = make(map[int]goneAgent)
			}
			d.gone[f.id] = goneAgent{lines: []string{f.err.Error()}}
			d.core.AgentExited(now, f.id, "start failed: "+f.err.Error())
		}
	}
	// The outcome lines and throttles of exited agents are out.
	clear(d.gone)
	if d.outcomes != nil {
		d.outcomes.flush()
	}
	d.pushBook() // cluster.go
}

// reread reads a control file again, as the core asked, and gives the core
// the result (every re-read of a batch is answered before the next event).
func (d *Daemon) reread(now time.Time, rr core.Reread) {
	f, err := d.spool.Reread(rr.Path)
	if err != nil {
		if !errors.Is(err, ctlfile.ErrNotFound) {
			d.log.Warn("re-reading control file", "msg", rr.Path, "error", err)
		}
		d.core.Reread(now, rr.Inum, nil)
		return
	}
	// Lines a live agent holds are still pending for the core.
	for i := range f.Rcpts {
		if f.Rcpts[i].Status == ctlfile.Locked {
			f.Rcpts[i].Status = ctlfile.Pending
		}
	}
	a := arrival(rr.Path, f)
	d.core.Reread(now, rr.Inum, &a)
}

// write hands each agent its lines in one call, in order, so that they
// leave in one system call rather than one per line.
func (d *Daemon) write(ws []core.Write) {
	if len(ws) == 1 {
		if p := d.procs[ws[0].Agent]; p != nil {
			p.Write(ws[0].Line)
		}
		return
	}
	if d.lines == nil {
		d.lines = make(map[int][]string)
	}
	// The per-agent slices are kept from call to call, until their agent
	// is gone: a dispatch allocates none.
	byAgent := d.lines
	order := d.agentOrder[:0]
	for _, w := range ws {
		l := byAgent[w.Agent]
		if len(l) == 0 {
			order = append(order, w.Agent)
		}
		byAgent[w.Agent] = append(l, w.Line)
	}
	for _, id := range order {
		if p := d.procs[id]; p != nil {
			p.Write(byAgent[id]...)
		}
	}
	// Only the lists written now are emptied (an agent's is dropped when it
	// exits: forgetLines), so a call costs its own agents, not all of them.
	for _, id := range order {
		if d.procs[id] == nil {
			delete(byAgent, id)
			continue
		}
		l := byAgent[id]
		clear(l)
		byAgent[id] = l[:0]
	}
	d.agentOrder = order
}

// forgetLines drops an exited agent's kept line list.
func (d *Daemon) forgetLines(id int) { delete(d.lines, id) }

type failedStart struct {
	id  int
	err error
}

// spawn starts the agent the core asked for.
func (d *Daemon) spawn(sp core.Spawn) error {
	c := &d.cfg.Clauses[sp.Clause]
	argv, env := c.Command.Expand(sp.Channel, sp.Host)
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("daemon: clause %q: %w", c.Select, err)
	}
	argv[0] = prog
	env = append(env, "PATH="+os.Getenv("PATH"))
	if tz, ok := os.LookupEnv("TZ"); ok {
		env = append(env, "TZ="+tz)
	}
	uid, gid, err := credentials(c)
	if err != nil {
		return err
	}
	spec := agent.Spec{
		Argv:  argv,
		Env:   env,
		Dir:   d.spool.TransportDir(),
		Stdio: agent.Stdio(c.Stdio),
		UID:   uid,
		GID:   gid,
		Nice:  c.Nice,
	}
	alog := d.log.Named("agent").With("clause", c.Select, "channel", sp.Channel, "host", sp.Host)
	var p *agent.Proc
	offLoop(func() { p, err = agent.Start(sp.Agent, spec, d.events, alog) })
	if err != nil {
		return err
	}
	d.procs[sp.Agent] = p
	d.log.Debug("agent started", "agent", sp.Agent, "pid", p.Pid(), "channel", sp.Channel, "host", sp.Host, "command", c.Command.String())
	return nil
}

// credentials resolves a clause's user and group; they apply only when the
// scheduler runs as root (setgid, then setuid, in the child).
func credentials(c *config.Clause) (uid, gid int, err error) {
	uid, gid = -1, -1
	if os.Geteuid() != 0 || (c.User == "" && c.Group == "") {
		return uid, gid, nil
	}
	if c.User != "" {
		u, err := user.Lookup(c.User)
		if err != nil {
			if u, err = user.LookupId(c.User); err != nil {
				return 0, 0, fmt.Errorf("daemon: clause %q: user %q: %w", c.Select, c.User, err)
			}
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	if c.Group != "" {
		g, err := user.LookupGroup(c.Group)
		if err != nil {
			if g, err = user.LookupGroupId(c.Group); err != nil {
				return 0, 0, fmt.Errorf("daemon: clause %q: group %q: %w", c.Select, c.Group, err)
			}
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	return uid, gid, nil
}

// diags appends the d lines the core asked for, grouped per file.
func (d *Daemon) diags(ds []core.Diag) {
	if len(ds) == 0 {
		return
	}
	byFile := make(map[string][]ctlfile.Diag)
	var order []string
	now := d.now().Unix()
	for _, dg := range ds {
		if _, ok := byFile[dg.Path]; !ok {
			order = append(order, dg.Path)
		}
		byFile[dg.Path] = append(byFile[dg.Path], ctlfile.Diag{
			Status:     ctlfile.Pending,
			RcptOffset: dg.Offset,
			Time:       now,
			Notary:     dg.Notary.String(),
			Text:       dg.Text,
		})
	}
	for _, path := range order {
		d.appendOrKeep(path, byFile[path])
	}
}

// appendOrKeep appends d lines to a control file; what cannot be written
// now is kept and retried when the message completes (writeUnwritten).
func (d *Daemon) appendOrKeep(path string, ds []ctlfile.Diag) bool {
	write := d.appendDiags
	if write == nil {
		write = d.spool.AppendDiags
	}
	if err := write(path, ds); err != nil {
		d.log.Error("cannot append d lines; kept to retry before the message completes",
			"msg", path, "lines", len(ds), "error", err)
		if d.unwritten == nil {
			d.unwritten = make(map[string][]ctlfile.Diag)
		}
		d.unwritten[path] = append(d.unwritten[path], ds...)
		return false
	}
	return true
}

// writeUnwritten retries the d lines kept for path; false means some are
// still unwritten and the message must not complete yet.
func (d *Daemon) writeUnwritten(path string) bool {
	ds, ok := d.unwritten[path]
	if !ok {
		return true
	}
	delete(d.unwritten, path)
	return d.appendOrKeep(path, ds)
}

// lastUnwritten tries the kept d lines once more as the scheduler stops,
// and logs each one it still cannot write: they live only in memory, so
// after this their recipients are missing from the message's DSN unless an
// operator sends it (the log line has what the d line held).
func (d *Daemon) lastUnwritten() {
	for _, path := range slices.Collect(maps.Keys(d.unwritten)) {
		d.writeUnwritten(path)
	}
	for path, ds := range d.unwritten {
		for _, dg := range ds {
			d.log.Error("d line lost at stop: its recipient is missing from the delivery status notification",
				"msg", path, "rcpt", dg.RcptOffset, "notary", dg.Notary, "text", dg.Text)
		}
	}
}

// logOutcome writes the per-recipient line operators grep, with fixed keys,
// to the log and the statelog: through the outcome writer beside the loop
// while Run runs, else at once. The queue id, the agent's pid and the
// retry journal's record are the loop's, taken here.
func (d *Daemon) logOutcome(o core.Outcome) {
	d.operator.metrics.outcome(o.Status)
	pid := d.agentPid(o.Agent)
	qid := o.QID // the core's: no lookup by the path (d.qid) a recipient
	if qid == "" {
		qid = d.qid(o.Path)
	}
	d.retry.deferred(qid, o) // retry.go: kept across a restart
	if d.outcomes != nil {
		d.outcomes.add(o, qid, pid, d.statelog)
		return
	}
	l := d.outcomeLine
	if l == nil {
		l = newOutcomeLine()
		d.outcomeLine = l
	}
	l.write(d.log, uncheckedOf(d.log), d.statelog, &o, qid, pid)
}

// uncheckedLogger is a logger that checks the values it is given, as
// cmd/scheduler's does (a time.Time in RFC 3339, a value spanning lines
// made one line), and can give the logger beneath, which does not: for a
// caller whose values are strings and integers of one line each, which
// the checks would pass through unchanged. The outcome line, one per
// recipient, spent an eighth of its formatting in them.
type uncheckedLogger interface {
	Unchecked() hclog.Logger
}

// uncheckedOf is log's logger beneath its checks, or nil when it has none.
func uncheckedOf(log hclog.Logger) hclog.Logger {
	if u, ok := log.(uncheckedLogger); ok {
		return u.Unchecked()
	}
	return nil
}

// write logs o, of message qid, which agent pid had, to log and to the
// statelog st (nil: none), reusing the list. unchecked is log's logger
// beneath its checks (uncheckedOf; nil: none): the line goes to it when
// every string in it is one line, which is what those checks would have
// passed through unchanged (the line's other values are integers), so
// the line is the same either way.
func (l *outcomeLine) write(log, unchecked hclog.Logger, st *stateLog, o *core.Outcome, qid string, pid int) {
	next := ""
	if !o.Next.IsZero() {
		next = o.Next.UTC().Format(time.RFC3339)
	}
	l.setString(outMsg, qid)
	l.set(outRcpt, o.Offset)
	l.setString(outTo, o.User)
	l.same(outChannel, &l.channel, o.Channel)
	l.setString(outHost, o.Host)
	if pid != l.pid || l.kv[2*outTA+1] == nil {
		l.pid = pid
		l.set(outTA, pid)
	}
	l.same(outStatus, &l.status, o.Status)
	l.set(outDelay, o.Delay.Truncate(time.Millisecond).String())
	l.set(outAttempts, o.Attempts)
	l.same(outNext, &l.next, next)
	l.same(outText, &l.text, o.Text)
	if unchecked != nil && l.spanning == 0 {
		log = unchecked
	}
	log.Info("outcome", l.kv[:]...)
	st.outcome(l.kv[:])
}

// outcomeLine is logOutcome's key/value list, kept from line to line
// (hclog formats it before Info returns and keeps nothing): one line per
// recipient then allocates neither the list nor the values that repeat
// from one recipient to the next (the channel, the agent, the status word,
// the text), each of which is boxed again only when it changed.
type outcomeLine struct {
	kv                          [2 * outKeys]any
	pid                         int
	channel, status, next, text string
	// spanning has bit f set while field f's value is a string with a
	// newline in it. The address and host come from a control file's
	// line and the text from an agent's report line, so it is only ever
	// set by a text of the scheduler's own (an error's).
	spanning uint32
}

// The outcome line's fields, in the order of its keys (outcomeKeys).
const (
	outMsg = iota
	outRcpt
	outTo
	outChannel
	outHost
	outTA
	outStatus
	outDelay
	outAttempts
	outNext
	outText
	outKeys // how many
)

// outcomeKeys are the line's keys, which operators grep: fixed, in order.
var outcomeKeys = [outKeys]string{"msg", "rcpt", "to", "channel", "host", "ta",
	"status", "delay", "attempts", "next", "text"}

// newOutcomeLine returns the list with its keys in place. Each goroutine
// that logs outcomes keeps its own.
func newOutcomeLine() *outcomeLine {
	l := &outcomeLine{}
	for f, k := range outcomeKeys {
		l.kv[2*f] = k
	}
	return l
}

// set sets field f's value.
func (l *outcomeLine) set(f int, v any) { l.kv[2*f+1] = v }

// same sets field f to v unless it holds v already.
func (l *outcomeLine) same(f int, cur *string, v string) {
	if v != *cur || l.kv[2*f+1] == nil {
		*cur = v
		l.setString(f, v)
	}
}

// setString sets field f's value to the string v, noting whether it spans
// lines.
func (l *outcomeLine) setString(f int, v string) {
	l.set(f, v)
	if strings.IndexByte(v, '\n') >= 0 {
		l.spanning |= 1 << f
	} else {
		l.spanning &^= 1 << f
	}
}

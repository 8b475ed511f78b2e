package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"zsched/control"
	"zsched/core"
	"zsched/ctlfile"
)

// ops is the daemon's operator side: the control server, the calls other
// goroutines (metrics scrapes) run inside the loop, reload requests, and
// metrics. Everything here that touches the core runs on the loop.
type ops struct {
	ctl     *control.Server
	calls   chan func()
	reload  chan struct{}
	loaded  chan loaded // a reload's file, read and checked beside the loop (reload.go)
	reloads reloads
	hurry   chan struct{} // a second TERM: shutdown kills the agents now
	metrics *metrics
	started time.Time
	// Control commands: how long each waited for the loop (from the
	// server reading its line) and how long the loop spent on it.
	ctlWait, ctlRun core.Latency
}

// slowControl is how long a control command may take, waiting for the
// loop and running on it, before it is logged: issue 9's bound on mailq
// and WHY.
const slowControl = 100 * time.Millisecond

// startOps opens the control socket (and its optional TCP listener) and the
// metrics listener.
func (d *Daemon) startOps() error {
	d.ops.calls = make(chan func())
	d.ops.reload = make(chan struct{}, 1)
	d.ops.loaded = make(chan loaded, 1) // one read at a time: its sender never waits
	d.ops.hurry = make(chan struct{}, 1)
	d.ops.started = d.now()
	s := d.cfg.Scheduler
	if s.ControlSocket != "" || s.ControlListen != "" {
		ctl, err := control.Listen(control.Options{
			Path:     s.ControlSocket,
			Group:    s.ControlGroup,
			TCP:      s.ControlListen,
			AuthFile: s.ControlAuth,
			Log:      d.log.Named("control"),
		})
		if err != nil {
			return fmt.Errorf("daemon: %w", err)
		}
		d.ops.ctl = ctl
	}
	m, err := d.startMetrics()
	if err != nil {
		d.stopOps()
		return err
	}
	d.ops.metrics = m
	return nil
}

// stopControl closes the control server: waiting clients are told the
// scheduler is shutting down.
func (d *Daemon) stopControl() {
	if d.ops.ctl != nil {
		d.ops.ctl.Close()
	}
}

func (d *Daemon) stopOps() {
	d.stopControl()
	d.ops.metrics.close()
}

// requests is the control server's request channel; nil (never ready)
// without one.
func (d *Daemon) requests() <-chan *control.Request {
	if d.ops.ctl == nil {
		return nil
	}
	return d.ops.ctl.Requests()
}

// ControlTCPAddr returns the TCP control listener's address, or nil.
func (d *Daemon) ControlTCPAddr() string {
	if d.ops.ctl == nil || d.ops.ctl.TCPAddr() == nil {
		return ""
	}
	return d.ops.ctl.TCPAddr().String()
}

// Reload asks the loop to re-read the configuration file (SIGHUP). It never
// blocks; reloads asked for while one is pending are one reload.
func (d *Daemon) Reload() {
	select {
	case d.ops.reload <- struct{}{}:
	default:
	}
}

// Hurry makes a shutdown under way, or the next one, kill the agents at
// once instead of waiting shutdown_timeout for them (a second SIGTERM). It
// never blocks.
func (d *Daemon) Hurry() {
	select {
	case d.ops.hurry <- struct{}{}:
	default:
	}
}

// sdNotify tells the service manager a state (Options.Notify).
func (d *Daemon) sdNotify(state string) {
	if d.opt.Notify != nil {
		d.opt.Notify(state)
	}
}

// inLoop runs f on the loop and waits for it, at most timeout; false when
// the loop did not run it (stopped or busy).
func (d *Daemon) inLoop(f func(), timeout time.Duration) bool {
	done := make(chan struct{})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case d.ops.calls <- func() { f(); close(done) }:
	case <-t.C:
		return false
	}
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// control carries out one control command on the loop and replies. The
// loop's share of its latency (the wait for the loop, the run on it) is
// measured with the wall clock, whatever clock the daemon schedules by.
func (d *Daemon) control(req *control.Request) {
	start := time.Now()
	var rep control.Reply
	if req.Verb == "SHOW THREAD" {
		// The error addresses are in the control files: read beside the
		// loop, which answers for the rest.
		st, ok := d.showThread(d.now(), req.Args[0], req.Args[1])
		if !ok {
			rep = control.Fail("no thread " + req.Args[0] + "/" + req.Args[1] + " in core")
			req.Respond(rep)
		} else {
			go func() { asHelper(); req.Respond(control.Listing(st.finish(d.spool.TransportDir()))) }()
		}
	} else {
		rep = d.command(d.now(), req)
		d.apply()
		if rep.OK || rep.Text != "" || rep.Multi {
			req.Respond(rep)
		} // else answered by a goroutine of its own (queue.go)
	}
	ran := time.Since(start)
	var waited time.Duration
	if !req.Received.IsZero() {
		waited = max(start.Sub(req.Received), 0)
	}
	d.ops.ctlWait.Observe(waited)
	d.ops.ctlRun.Observe(ran)
	if waited+ran >= slowControl {
		d.log.Warn("slow control command", "verb", req.Verb, "waited", waited.String(), "ran", ran.String(),
			"lines", len(rep.Lines))
	}
}

func (d *Daemon) command(now time.Time, req *control.Request) control.Reply {
	arg := func(i int) string {
		if i < len(req.Args) {
			return req.Args[i]
		}
		return ""
	}
	switch req.Verb {
	case "SHOW QUEUE THREADS":
		return control.Listing(d.threadReport(now, false))
	case "SHOW QUEUE SHORT":
		return control.Listing(d.threadReport(now, true))
	case "SHOW QUEUE THREADS2":
		return control.Listing(d.threads2(now))
	case "SHOW QUEUE JSON":
		b, err := json.Marshal(d.Queue(now))
		if err != nil {
			return control.Fail(err.Error())
		}
		return control.Listing([]string{string(b)})
	case "SHOW COUNTERS":
		return control.Listing(d.counters(now))
	case "SHOW SNMP":
		return control.Listing(d.globalLines(now, true))
	case "SHOW QSHAPE":
		top := 20
		if a := arg(0); a != "" {
			n, err := strconv.Atoi(a)
			if err != nil || n < 1 {
				return control.Fail("SHOW QSHAPE: want a number of hosts, not " + strconv.Quote(a))
			}
			top = n
		}
		return control.Listing(d.qshape(now, top))
	case "ETRN":
		if _, err := core.ParseDest(arg(0)); err != nil || strings.Contains(arg(0), "/") {
			return control.Fail(fmt.Sprintf("ETRN %s: want a host, @domain or a host glob", arg(0)))
		}
		n := d.core.ETRN(now, strings.Join(req.Args, " "))
		d.log.Info("etrn", append([]any{"name", arg(0), "started", n}, peerArgs(req.Peer)...)...)
		if n > 0 {
			return control.OK("OK; an ETRN started something.")
		}
		// MAILQ v2's words: its clients compare them. `scheduler etrn`
		// exits 1 on this one.
		return control.OK("OK; an ETRN didn't start anything.")
	case "KILL MSG":
		d.single(req, opKill, arg(0)) // queue.go: in core or on disk
		return control.Reply{}
	case "FLUSH":
		n, err := d.core.Flush(now, arg(0))
		if err != nil {
			return control.Fail(err.Error())
		}
		d.log.Info("flush", append([]any{"select", arg(0), "threads", n}, peerArgs(req.Peer)...)...)
		if n == 0 {
			if arg(0) == "" {
				return control.Fail("no thread in core to flush")
			}
			return control.Fail("no thread in core matches " + strconv.Quote(arg(0)))
		}
		return control.OK(fmt.Sprintf("flushed %d threads", n))
	case "HOLD THREAD", "RELEASE THREAD":
		p, err := core.ParseDest(arg(0))
		if err != nil || !strings.Contains(arg(0), "/") {
			return control.Fail("want channel/host (globs allowed), not " + strconv.Quote(arg(0)))
		}
		if req.Verb == "HOLD THREAD" {
			return d.holdDest(now, p, peerArgs(req.Peer))
		}
		return d.releaseDest(now, p, peerArgs(req.Peer))
	case "HOLD MSG":
		d.single(req, opHold, arg(0))
		return control.Reply{}
	case "RELEASE MSG":
		d.single(req, opRelease, arg(0))
		return control.Reply{}
	case "WHY":
		lines, err := d.why(now, arg(0))
		if errors.Is(err, core.ErrNoMessage) {
			d.whyOnDisk(req, arg(0)) // queue.go: answered off the loop
			return control.Reply{}
		}
		if err != nil {
			return control.Fail(err.Error())
		}
		return control.Listing(lines)
	case "SHOW QUEUE MESSAGES":
		return d.listQueue(req.Args)
	case "SHOW MSG":
		return d.cat(req.Args)
	case "KILL MSGS":
		return d.bulk(opKill, req.Args, peerArgs(req.Peer))
	case "HOLD MSGS":
		return d.bulk(opHold, req.Args, peerArgs(req.Peer))
	case "RELEASE MSGS":
		return d.bulk(opRelease, req.Args, peerArgs(req.Peer))
	case "FLUSH MSGS":
		return d.bulk(opFlush, req.Args, peerArgs(req.Peer))
	case "RELOAD":
		d.askReload(reloadAsk{by: peerArgs(req.Peer), req: req})
		return control.Reply{} // answered once the file is read and applied (reload.go)
	}
	return control.Fail("MAILQ2 Unknown command: " + req.Verb)
}

// peerArgs are the log keys naming who sent a command.
func peerArgs(p control.Peer) []any {
	if p.Network == "unix" {
		return []any{"uid", p.UID, "pid", p.PID}
	}
	return []any{"user", p.User, "addr", p.Addr}
}

func (d *Daemon) pid(id int) int {
	if p := d.procs[id]; p != nil {
		return p.Pid()
	}
	return 0
}

func secs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) + "s" }

// age formats a duration as ZMailer's saytime does in its short form:
// days and hours, and minutes and seconds unless both of those are there —
// "0s", "2m53s", "1h2m", "3d4h", "1d5m7s".
func age(d time.Duration) string {
	secs := int64(d / time.Second)
	if secs <= 0 {
		return "0s"
	}
	var b strings.Builder
	days, hours, mins, sec := secs/86400, secs/3600%24, secs/60%60, secs%60
	fields := 0
	if days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		fields++
	}
	if hours > 0 {
		fmt.Fprintf(&b, "%dh", hours)
		fields++
	}
	if mins > 0 && fields < 2 {
		fmt.Fprintf(&b, "%dm", mins)
	}
	if sec > 0 && fields < 2 {
		fmt.Fprintf(&b, "%ds", sec)
	}
	return b.String()
}

// agentStateZ maps agent states to ZMailer's S= words.
var agentStateZ = map[string]string{
	"starting": "LARVA", "working": "STUFF", "idling": "IDLE", "idle": "IDLE", "ending": "FINISH",
}

func hostBound(b bool) int {
	if b {
		return 1
	}
	return 0
}

// threadLine is one thread's summary as the thread report gives it
// (zmailer-facts.md §7.3), with zsched's window and state after.
// With pad, N=, R= and A= have ZMailer's column widths, which scripts
// reading its report count on; THREADS2 splits on blanks instead.
func (d *Daemon) threadLine(now time.Time, t core.ThreadView, agents map[int]core.AgentView, pad bool) string {
	var b strings.Builder
	if pad {
		fmt.Fprintf(&b, "N=%-3d R=%-3d A=%-2d", t.Vertices, t.Recipients, t.Attempts)
	} else {
		fmt.Fprintf(&b, "N=%d R=%d A=%d", t.Vertices, t.Recipients, t.Attempts)
	}
	if len(t.Agents) > 0 {
		var pids []string
		var heard, fed time.Time
		jobs, over := 0, 0
		state := ""
		for _, id := range t.Agents {
			a := agents[id]
			pids = append(pids, strconv.Itoa(d.pid(id)))
			if a.Heard.After(heard) {
				heard = a.Heard
			}
			if a.Fed.After(fed) {
				fed = a.Fed
			}
			jobs += a.Jobs
			over += max(a.Jobs-1, 0)
			if state == "" {
				state = agentStateZ[a.State]
			}
		}
		fa := "never"
		if !fed.IsZero() {
			fa = secs(now.Sub(fed))
		}
		fmt.Fprintf(&b, " P={%s} HA=%s FA=%s OF=%d S=%s UF=%d", strings.Join(pids, ","),
			secs(now.Sub(heard)), fa, over, state, max(t.Vertices-jobs, 0))
	}
	if t.Wake.After(now) {
		fmt.Fprintf(&b, " W=%s", secs(t.Wake.Sub(now)))
	}
	if t.State == core.ThreadBlocked {
		fmt.Fprintf(&b, " pend=%s", t.Pend)
	}
	if !t.Oldest.IsZero() {
		fmt.Fprintf(&b, " QA=%s", age(now.Sub(t.Oldest)))
	}
	fmt.Fprintf(&b, " window=%d/%d", t.Window, t.MaxThr)
	if t.Ceiling > 0 {
		// An unconfirmed ceiling is a guess from one refusal: marked "?".
		q := "?"
		if t.Confirmed {
			q = ""
		}
		fmt.Fprintf(&b, " ceiling=%d%s", t.Ceiling, q)
	}
	if c := t.Cluster; c != nil {
		// The shared window: sessions of every node, this node's, nodes.
		fmt.Fprintf(&b, " cluster=%d/%d mine=%d nodes=%d", c.Leases, c.Window, c.Mine, c.Nodes)
		if c.Fallback {
			b.WriteString(" cluster:fallback")
		}
	}
	fmt.Fprintf(&b, " state=%s", t.State)
	return b.String()
}

func (d *Daemon) agentMap() map[int]core.AgentView {
	m := make(map[int]core.AgentView)
	for _, a := range d.core.AgentViews() {
		m[a.ID] = a
	}
	return m
}

// threadReport is SHOW QUEUE THREADS (short: SHOW QUEUE SHORT), laid out
// as ZMailer's thread_report.
func (d *Daemon) threadReport(now time.Time, short bool) []string {
	agents := d.agentMap()
	var out []string
	for _, r := range d.core.Rings(now) {
		head := fmt.Sprintf("%s/%d", clauseHead(r.Select), hostBound(r.HostBound))
		if r.Host != "" {
			head += "\t" + r.Host
		}
		out = append(out, head)
		if !short {
			for _, t := range r.Threads {
				name := fmt.Sprintf("    %s/%s/%d", t.Channel, t.Host, hostBound(r.HostBound))
				out = append(out, name+threadPad(name)+d.threadLine(now, t, agents, true))
			}
		}
		out = append(out, fmt.Sprintf("	Threads: %4d Msgs: %5d Procs: %3d Idle: %3d Plim: %3d Flim: %3d Tlim: %3d",
			len(r.Threads), r.Msgs, r.Agents, r.Idle, r.MaxRing, r.Overfeed, r.MaxThr)+throttleNote(now, r))
	}
	out = append(out, d.globalLines(now, false)...)
	out = append(out, d.spoolLines(now)...)    // census.go: the whole spool, unrouted mail
	return append(out, d.waitingLines(now)...) // intake.go: files not in core, and why
}

// threadPad is what ZMailer writes after a thread's name: tabs to the
// fifth tab stop, or a blank past it.
func threadPad(name string) string {
	w := len(name) + 7
	pad := ""
	for _, stop := range []int{15, 23, 31} {
		if w < stop {
			pad += "\t"
		}
	}
	if w < 39 {
		return pad + "\t"
	}
	return pad + " "
}

// throttleNote is the ring line's note on a throttled transport (issue 16):
// " throttled=12s" while the back-off runs, " throttled=probe" while one
// agent at a time is tried; then the failure.
func throttleNote(now time.Time, r core.RingView) string {
	switch {
	case r.Throttled.After(now):
		return fmt.Sprintf(" throttled=%s (%s)", secs(r.Throttled.Sub(now)), r.ThrottleText)
	case r.Probing:
		return " throttled=probe (" + r.ThrottleText + ")"
	}
	return ""
}

// clauseHead writes a select pattern as channel/host.
func clauseHead(sel string) string {
	if !strings.Contains(sel, "/") {
		return sel + "/*"
	}
	return sel
}

func (d *Daemon) threads2(now time.Time) []string {
	agents := d.agentMap()
	var out []string
	for _, r := range d.core.Rings(now) {
		for _, t := range r.Threads {
			out = append(out, t.Channel+"\t"+t.Host+"\t"+strings.ReplaceAll(d.threadLine(now, t, agents, false), " ", "\t"))
		}
	}
	return out
}

// globalLines are ZMailer's two summary lines; snmp gives the uptime in
// seconds, as ZMailer's SHOW SNMP does.
func (d *Daemon) globalLines(now time.Time, snmp bool) []string {
	g := d.core.Gauges(now, 0)
	c := d.core.Counters()
	idle := g.Agents["idle"] + g.Agents["idling"]
	threads := 0
	for _, n := range g.Threads {
		threads += n
	}
	out := c.Delivered + c.Failed + c.Expired
	uptime := age(now.Sub(d.ops.started))
	if snmp {
		uptime = fmt.Sprintf("%d sec", int64(now.Sub(d.ops.started)/time.Second))
	}
	lines := []string{
		fmt.Sprintf("Kids: %d  Idle: %2d  Msgs: %3d  Thrds: %3d  Rcpnts: %4d  Uptime: %s",
			d.core.Agents(), idle, g.Messages, threads, g.Recipients, uptime),
		fmt.Sprintf("Msgs in %d out %d stored %d Rcpnts in %d out %d stored %d",
			c.Arrived, max(c.Arrived-int64(g.Messages), 0), g.Messages, out+int64(g.Recipients), out, g.Recipients),
	}
	if st, ok := d.ClusterStatus(); ok && !snmp {
		// "cluster: shared (node mx1, 3 nodes)", "cluster: fallback since …"
		lines = append(lines, st.String())
	}
	return lines
}

// threadListing is SHOW THREAD as the loop leaves it: every field but the
// error address, which finish reads from the control files.
type threadListing struct {
	head string
	rows []threadRow
}

type threadRow struct {
	path   string
	offset int64
	fields []string // MAILQ v2's ten, the third (error address) left to finish
}

// showThread is SHOW THREAD: a summary line, then one TAB-separated line
// per recipient with MAILQ v2's ten fields: path, index in its vertex,
// error address, offset, expiry, the thread's wake-up, the vertex's last
// feed, attempts, what it waits for, the last agent text.
func (d *Daemon) showThread(now time.Time, channel, host string) (*threadListing, bool) {
	t, ok := d.core.Thread(now, channel, host)
	if !ok {
		return nil, false
	}
	st := &threadListing{head: fmt.Sprintf("#%s/%s/%d\t%s", t.Channel, t.Host, hostBound(t.HostBound), d.threadLine(now, t, d.agentMap(), true))}
	epoch := func(x time.Time) string {
		if x.IsZero() {
			return "0"
		}
		return strconv.FormatInt(x.Unix(), 10)
	}
	for _, v := range d.core.ThreadVertices(now, channel, host) {
		wait := ""
		switch v.Why.Reason {
		case core.ReasonRetry, core.ReasonBackoff, core.ReasonDead:
			wait = "retry in " + secs(v.Why.Until.Sub(now))
		case core.ReasonMaxTA, core.ReasonMaxChannel, core.ReasonForkRate:
			wait = "channel"
		case core.ReasonMaxRing, core.ReasonWindow:
			wait = "thread"
		case core.ReasonDue, core.ReasonRunning:
		default:
			wait = v.Why.Reason.String()
		}
		for i, r := range v.Rcpts {
			st.rows = append(st.rows, threadRow{path: v.Path, offset: r.Offset, fields: []string{v.Path, strconv.Itoa(i), "-",
				strconv.FormatInt(r.Offset, 10), epoch(v.Expires), epoch(v.Wake), epoch(v.Fed), strconv.Itoa(v.Attempts), wait, v.LastText}})
		}
	}
	return st, true
}

// finish fills in the error addresses from the control files under
// transport (each read once) and returns the listing. It runs beside the
// loop: a file gone meanwhile (the message completed) leaves "-".
func (st *threadListing) finish(transport string) []string {
	files := make(map[string]*ctlfile.File)
	out := []string{st.head}
	for _, r := range st.rows {
		f, seen := files[r.path]
		if !seen {
			if data, err := os.ReadFile(filepath.Join(transport, filepath.FromSlash(r.path))); err == nil {
				f, _ = ctlfile.Parse(filepath.Base(r.path), data)
			}
			files[r.path] = f
		}
		if f != nil {
			r.fields[2] = errorAddress(f, r.offset)
		}
		out = append(out, strings.Join(r.fields, "\t"))
	}
	return out
}

// errorAddress is where reports about the recipient at offset go, as the
// control file says: the error address in force for its sender, else the
// file's, else the sender itself; "<>" for the null address.
func errorAddress(f *ctlfile.File, offset int64) string {
	var s *ctlfile.Sender
	for i := range f.Rcpts {
		if r := &f.Rcpts[i]; r.Offset == offset && r.Sender >= 0 && r.Sender < len(f.Senders) {
			s = &f.Senders[r.Sender]
		}
	}
	if s == nil && len(f.Senders) > 0 {
		s = &f.Senders[0]
	}
	addr := ""
	if s != nil {
		addr = s.ErrorAddr
	}
	if addr == "" {
		addr = f.ErrorAddr
	}
	if addr == "" && s != nil && s.Channel != "error" && s.User != "-" {
		addr = s.User
	}
	addr = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(addr), "<"), ">")
	if addr == "" {
		return "<>"
	}
	return addr
}

func (d *Daemon) counters(now time.Time) []string {
	c := d.core.Counters()
	g := d.core.Gauges(now, 0)
	l := d.core.Latency()
	out := []string{
		fmt.Sprintf("messages_arrived %d", c.Arrived),
		fmt.Sprintf("recipients_delivered %d", c.Delivered),
		fmt.Sprintf("recipients_failed %d", c.Failed),
		fmt.Sprintf("recipients_deferred %d", c.Deferred),
		fmt.Sprintf("recipients_expired %d", c.Expired),
		fmt.Sprintf("agents_started %d", c.Spawned),
		fmt.Sprintf("agents_ended %d", c.AgentsEnded),
		fmt.Sprintf("agents_killed %d", c.Killed),
		fmt.Sprintf("agent_garbage_lines %d", c.Garbage),
		fmt.Sprintf("queue_messages %d", g.Messages),
		fmt.Sprintf("queue_vertices %d", g.Vertices),
		fmt.Sprintf("queue_recipients %d", g.Recipients),
		fmt.Sprintf("dispatched %d", l.Count()),
		fmt.Sprintf("dispatch_latency_p50 %s", l.Quantile(0.5)),
		fmt.Sprintf("dispatch_latency_p99 %s", l.Quantile(0.99)),
		fmt.Sprintf("uptime %s", age(now.Sub(d.ops.started))),
		fmt.Sprintf("control_commands %d", d.ops.ctlRun.Count()),
		fmt.Sprintf("control_wait_p50 %s", d.ops.ctlWait.Quantile(0.5)),
		fmt.Sprintf("control_wait_p99 %s", d.ops.ctlWait.Quantile(0.99)),
		fmt.Sprintf("control_run_p50 %s", d.ops.ctlRun.Quantile(0.5)),
		fmt.Sprintf("control_run_p99 %s", d.ops.ctlRun.Quantile(0.99)),
	}
	for _, st := range core.ThreadStates() {
		out = append(out, fmt.Sprintf("threads_%s %d", st, g.Threads[st]))
	}
	names := make([]string, 0, len(g.Agents))
	for n := range g.Agents {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, fmt.Sprintf("agents_%s %d", n, g.Agents[n]))
	}
	return out
}

// qshapeBuckets are Postfix qshape's age columns, in minutes.
var qshapeBuckets = []int{5, 10, 20, 40, 80, 160, 320, 640, 1280}

func (d *Daemon) qshape(now time.Time, top int) []string {
	bs := make([]time.Duration, len(qshapeBuckets))
	head := fmt.Sprintf("%-30s %6s", "", "T")
	for i, m := range qshapeBuckets {
		bs[i] = time.Duration(m) * time.Minute
		head += fmt.Sprintf(" %5d", m)
	}
	head += fmt.Sprintf(" %5s", strconv.Itoa(qshapeBuckets[len(qshapeBuckets)-1])+"+")
	out := []string{head}
	for _, r := range d.shapeSpool(d.core.Shape(now, bs, 0), top) { // census.go
		line := fmt.Sprintf("%30s %6d", r.Host, r.Total)
		for _, n := range r.Counts {
			line += fmt.Sprintf(" %5d", n)
		}
		out = append(out, line)
	}
	return append(out, d.qshapeNote(now)) // census.go: which part is in core
}

// why is WHY: one line per recipient, TAB-separated: offset, address,
// channel/host, reason word, the reason in words, attempts, and the last
// agent message.
func (d *Daemon) why(now time.Time, id string) ([]string, error) {
	lk, err := d.core.Find(id)
	if err != nil {
		return nil, err
	}
	if !lk.InCore {
		if lines := d.whyWaiting(now, id); lines != nil { // intake.go
			return lines, nil
		}
		return nil, fmt.Errorf("%w: %q", core.ErrNoMessage, id)
	}
	m, err := d.core.Message(now, lk.QID)
	if err != nil {
		if lines := d.whyWaiting(now, id); lines != nil { // intake.go
			return lines, nil
		}
		return nil, err
	}
	held := ""
	if m.Held {
		held = ", held"
	}
	out := []string{fmt.Sprintf("message %s (%s), queued %s ago, %d recipients pending%s",
		lk.QID, m.Path, age(now.Sub(m.Arrival)), m.Pending, held)}
	for _, v := range m.Vertices {
		text := v.Why.String()
		if v.Why.Reason == core.ReasonRunning {
			text += fmt.Sprintf(" (pid %d)", d.pid(v.Why.Agent))
		}
		for _, r := range v.Rcpts {
			out = append(out, strings.Join([]string{strconv.FormatInt(r.Offset, 10), r.User,
				v.Channel + "/" + v.Host, v.Why.Reason.String(), text,
				"attempts=" + strconv.Itoa(v.Attempts), "last=" + strconv.Quote(v.LastText)}, "\t"))
		}
	}
	return out, nil
}

// Queue is the document SHOW QUEUE JSON (scheduler mailq -json) returns.
type Queue struct {
	Time     time.Time     `json:"time"`
	Uptime   string        `json:"uptime"`
	Counters core.Counters `json:"counters"`
	Rings    []QueueRing   `json:"rings"`
	Agents   []QueueAgent  `json:"agents"`
	// Cluster is the node's link to the shared store; absent without
	// [cluster].
	Cluster *QueueCluster `json:"cluster,omitempty"`
	// Spool counts the whole spool and says which part is in core;
	// Unrouted is the mail no clause routes (census.go).
	Spool    QueueSpool      `json:"spool"`
	Unrouted []core.Unrouted `json:"unrouted"`
}

// QueueCluster is the node's view of its cluster in Queue.
type QueueCluster struct {
	Node       string    `json:"node"`
	Store      string    `json:"store"` // without password
	Mode       string    `json:"mode"`  // connecting, shared, fallback
	Since      time.Time `json:"since"`
	Nodes      int       `json:"nodes"`
	Leases     int       `json:"leases"`
	Error      string    `json:"error,omitempty"`
	Fallbacks  int       `json:"fallbacks"`
	Reconnects int       `json:"reconnects"`
}

// QueueShared is a destination's shared window in QueueThread.
type QueueShared struct {
	Window   int  `json:"window"`
	Leases   int  `json:"leases"` // every node's sessions
	Mine     int  `json:"mine"`   // this node's
	Nodes    int  `json:"nodes"`
	Fallback bool `json:"fallback,omitempty"`
	Denied   bool `json:"denied,omitempty"`
}

// QueueRing is one thread-ring in Queue.
type QueueRing struct {
	Select    string `json:"select"`
	Channel   string `json:"channel"`
	Host      string `json:"host,omitempty"`
	HostBound bool   `json:"hostbound"`
	Msgs      int    `json:"msgs"`
	Agents    int    `json:"agents"`
	Idle      int    `json:"idle"`
	MaxRing   int    `json:"maxring"`
	Overfeed  int    `json:"overfeed"`
	MaxThr    int    `json:"maxthr"`
	// Throttled: its transport failed and no new agent starts before this
	// time; ThrottleProbe: the back-off is over and one agent at a time is
	// tried. ThrottleReason is the failure.
	Throttled      *time.Time    `json:"throttled_until,omitempty"`
	ThrottleProbe  bool          `json:"throttle_probe,omitempty"`
	ThrottleReason string        `json:"throttle_reason,omitempty"`
	Threads        []QueueThread `json:"threads"`
}

// QueueThread is one destination in Queue.
type QueueThread struct {
	Channel    string     `json:"channel"`
	Host       string     `json:"host"`
	State      string     `json:"state"`
	Pend       string     `json:"pend,omitempty"`
	Vertices   int        `json:"vertices"`
	Recipients int        `json:"recipients"`
	Attempts   int        `json:"attempts"`
	Pids       []int      `json:"pids"`
	Window     int        `json:"window"`
	MaxThr     int        `json:"maxthr"`
	Ceiling    int        `json:"ceiling,omitempty"`
	Confirmed  bool       `json:"ceiling_confirmed,omitempty"`
	Wake       *time.Time `json:"wake,omitempty"`
	Backoff    *time.Time `json:"backoff_until,omitempty"`
	Oldest     *time.Time `json:"oldest,omitempty"`
	QueueOnly  bool       `json:"queueonly,omitempty"`
	Turned     bool       `json:"turned,omitempty"`
	Held       bool       `json:"held,omitempty"`
	LastText   string     `json:"last_text,omitempty"`
	// Cluster is the destination's shared window; absent without [cluster].
	Cluster *QueueShared `json:"cluster,omitempty"`
}

// QueueAgent is one transport agent in Queue.
type QueueAgent struct {
	Pid     int        `json:"pid"`
	Channel string     `json:"channel"`
	Host    string     `json:"host"`
	State   string     `json:"state"`
	Jobs    int        `json:"jobs"`
	Heard   time.Time  `json:"heard"`
	Fed     *time.Time `json:"fed,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Queue returns the scheduler's state as SHOW QUEUE JSON gives it. Call it
// only on the loop.
func (d *Daemon) Queue(now time.Time) Queue {
	q := Queue{Time: now.UTC(), Uptime: age(now.Sub(d.ops.started)), Counters: d.core.Counters(),
		Rings: []QueueRing{}, Agents: []QueueAgent{}}
	for _, r := range d.core.Rings(now) {
		qr := QueueRing{Select: r.Select, Channel: r.Channel, Host: r.Host, HostBound: r.HostBound,
			Msgs: r.Msgs, Agents: r.Agents, Idle: r.Idle, MaxRing: r.MaxRing, Overfeed: r.Overfeed,
			MaxThr: r.MaxThr, Threads: []QueueThread{},
			Throttled: timePtr(r.Throttled), ThrottleProbe: r.Probing, ThrottleReason: r.ThrottleText}
		for _, t := range r.Threads {
			qt := QueueThread{Channel: t.Channel, Host: t.Host, State: t.State.String(),
				Vertices: t.Vertices, Recipients: t.Recipients, Attempts: t.Attempts, Pids: []int{},
				Window: t.Window, MaxThr: t.MaxThr, Ceiling: t.Ceiling, Confirmed: t.Confirmed, Wake: timePtr(t.Wake), Backoff: timePtr(t.Backoff),
				Oldest: timePtr(t.Oldest), QueueOnly: t.QueueOnly, Turned: t.ETRN, Held: t.Held,
				LastText: t.LastText}
			if t.State == core.ThreadBlocked {
				qt.Pend = t.Pend.String()
			}
			if c := t.Cluster; c != nil {
				qt.Cluster = &QueueShared{Window: c.Window, Leases: c.Leases, Mine: c.Mine, Nodes: c.Nodes,
					Fallback: c.Fallback, Denied: c.Denied}
			}
			for _, id := range t.Agents {
				qt.Pids = append(qt.Pids, d.pid(id))
			}
			qr.Threads = append(qr.Threads, qt)
		}
		q.Rings = append(q.Rings, qr)
	}
	for _, a := range d.core.AgentViews() {
		q.Agents = append(q.Agents, QueueAgent{Pid: d.pid(a.ID), Channel: a.Channel, Host: a.Host,
			State: a.State, Jobs: a.Jobs, Heard: a.Heard.UTC(), Fed: timePtr(a.Fed)})
	}
	if st, ok := d.ClusterStatus(); ok {
		q.Cluster = &QueueCluster{Node: st.Node, Store: st.Store, Mode: st.Mode.String(), Since: st.Since.UTC(),
			Nodes: st.Nodes, Leases: st.Leases, Error: st.Err, Fallbacks: st.Fallbacks, Reconnects: st.Reconnects}
	}
	q.Spool = d.spoolTotals(now)
	q.Unrouted = append([]core.Unrouted{}, d.core.UnroutedViews()...)
	return q
}

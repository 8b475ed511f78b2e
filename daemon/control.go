package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/control"
	"zsched/core"
)

// ops is the daemon's operator side: the control server, the calls other
// goroutines (metrics scrapes) run inside the loop, reload requests, and
// metrics. Everything here that touches the core runs on the loop.
type ops struct {
	ctl     *control.Server
	calls   chan func()
	reload  chan struct{}
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

// reload re-reads the configuration. A file that does not load, or that
// the core refuses, leaves the running configuration as it was. Settings
// that need a restart keep their old values, with a warning.
func (d *Daemon) reload() error {
	if d.cfg.File == "" {
		return errors.New("daemon: reload: the configuration was not loaded from a file")
	}
	cfg, err := config.Load(d.cfg.File)
	if err != nil {
		d.log.Error("reload refused; the running configuration stays", "error", err)
		return err
	}
	old := d.cfg.Scheduler
	if cfg.Scheduler.Postoffice != old.Postoffice || cfg.Scheduler.Hash != old.Hash {
		err := fmt.Errorf("daemon: reload: postoffice or hash changed (%s → %s); restart the scheduler for that",
			old.Postoffice, cfg.Scheduler.Postoffice)
		d.log.Error("reload refused; the running configuration stays", "error", err)
		return err
	}
	keep := func(key string, now, was *string) {
		if *now != *was {
			d.log.Warn("reload: setting needs a restart; keeping the running value", "key", key, "running", *was, "file", *now)
			*now = *was
		}
	}
	keep("control_socket", &cfg.Scheduler.ControlSocket, &old.ControlSocket)
	keep("control_group", &cfg.Scheduler.ControlGroup, &old.ControlGroup)
	keep("notify_socket", &cfg.Scheduler.NotifySocket, &old.NotifySocket)
	keep("control_listen", &cfg.Scheduler.ControlListen, &old.ControlListen)
	keep("metrics_listen", &cfg.Scheduler.MetricsListen, &old.MetricsListen)
	if err := d.core.Reconfigure(d.now(), d.coreConfig(cfg)); err != nil {
		d.log.Error("reload refused; the running configuration stays", "error", err)
		return err
	}
	d.cfg = cfg
	if lvl := hclog.LevelFromString(cfg.Scheduler.LogLevel); lvl != hclog.NoLevel {
		d.log.SetLevel(lvl)
	}
	d.apply()
	return nil
}

// control carries out one control command on the loop and replies. The
// loop's share of its latency (the wait for the loop, the run on it) is
// measured with the wall clock, whatever clock the daemon schedules by.
func (d *Daemon) control(req *control.Request) {
	start := time.Now()
	rep := d.command(d.now(), req)
	d.apply()
	req.Respond(rep)
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
	case "SHOW THREAD":
		lines, ok := d.showThread(now, arg(0), arg(1))
		if !ok {
			return control.Fail("no thread " + arg(0) + "/" + arg(1) + " in core")
		}
		return control.Listing(lines)
	case "SHOW COUNTERS":
		return control.Listing(d.counters(now))
	case "SHOW SNMP":
		return control.Listing(d.globalLines(now))
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
		d.log.Info("etrn request", "name", arg(0), "from", peerName(req.Peer))
		if d.core.Turn(now, strings.Join(req.Args, " ")) > 0 {
			return control.OK("OK; an ETRN started something.")
		}
		return control.OK("OK; an ETRN didn't start anything.")
	case "KILL MSG":
		if err := d.core.Kill(now, arg(0)); err != nil {
			return control.Fail(err.Error())
		}
		d.log.Info("kill request", "msg", arg(0), "from", peerName(req.Peer))
		return control.OK("OK; KILLed something.")
	case "FLUSH":
		n, err := d.core.Flush(now, arg(0))
		if err != nil {
			return control.Fail(err.Error())
		}
		return control.OK(fmt.Sprintf("flushed %d threads", n))
	case "HOLD THREAD", "RELEASE THREAD":
		ch, host, ok := strings.Cut(arg(0), "/")
		if !ok || ch == "" || host == "" {
			return control.Fail("want channel/host, not " + strconv.Quote(arg(0)))
		}
		if req.Verb == "HOLD THREAD" {
			inCore := d.core.HoldThread(now, ch, host)
			return control.OK(fmt.Sprintf("holding %s/%s (in core: %v)", ch, host, inCore))
		}
		if !d.core.ReleaseThread(now, ch, host) {
			return control.Fail("no hold on " + ch + "/" + host)
		}
		return control.OK("released " + ch + "/" + host)
	case "HOLD MSG":
		if err := d.core.HoldMessage(now, arg(0)); err != nil {
			return control.Fail(err.Error())
		}
		return control.OK("holding message " + arg(0))
	case "RELEASE MSG":
		if err := d.core.ReleaseMessage(now, arg(0)); err != nil {
			return control.Fail(err.Error())
		}
		return control.OK("released message " + arg(0))
	case "WHY":
		lines, err := d.why(now, arg(0))
		if err != nil {
			return control.Fail(err.Error())
		}
		return control.Listing(lines)
	case "RELOAD":
		if err := d.reload(); err != nil {
			return control.Fail(err.Error())
		}
		return control.OK(fmt.Sprintf("reloaded %s: %d clauses", d.cfg.File, len(d.cfg.Clauses)))
	}
	return control.Fail("MAILQ2 Unknown command: " + req.Verb)
}

func peerName(p control.Peer) string {
	if p.Network == "unix" {
		return fmt.Sprintf("unix uid %d pid %d", p.UID, p.PID)
	}
	return p.User + "@" + p.Addr
}

func (d *Daemon) pid(id int) int {
	if p := d.procs[id]; p != nil {
		return p.Pid()
	}
	return 0
}

func secs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) + "s" }

// age formats a duration the way ZMailer's mailq does: 2m53s, 1h2m, 3d4h.
func age(d time.Duration) string {
	d = d.Truncate(time.Second)
	if d >= 24*time.Hour {
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	}
	return d.String()
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
func (d *Daemon) threadLine(now time.Time, t core.ThreadView, agents map[int]core.AgentView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "N=%d R=%d A=%d", t.Vertices, t.Recipients, t.Attempts)
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

// threadReport is SHOW QUEUE THREADS (short: SHOW QUEUE SHORT).
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
				out = append(out, fmt.Sprintf("    %s/%s/%d\t%s", t.Channel, t.Host, hostBound(r.HostBound), d.threadLine(now, t, agents)))
			}
		}
		out = append(out, fmt.Sprintf("Threads: %d Msgs: %d Procs: %d Idle: %d Plim: %d Flim: %d Tlim: %d",
			len(r.Threads), r.Msgs, r.Agents, r.Idle, r.MaxRing, r.Overfeed, r.MaxThr)+throttleNote(now, r))
	}
	return append(out, d.globalLines(now)...)
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
			out = append(out, t.Channel+"\t"+t.Host+"\t"+strings.ReplaceAll(d.threadLine(now, t, agents), " ", "\t"))
		}
	}
	return out
}

// globalLines are ZMailer's two summary lines.
func (d *Daemon) globalLines(now time.Time) []string {
	g := d.core.Gauges(now, 0)
	c := d.core.Counters()
	idle := g.Agents["idle"] + g.Agents["idling"]
	threads := 0
	for _, n := range g.Threads {
		threads += n
	}
	out := c.Delivered + c.Failed + c.Expired
	return []string{
		fmt.Sprintf("Kids: %d  Idle: %d  Msgs: %d  Thrds: %d  Rcpnts: %d  Uptime: %s",
			d.core.Agents(), idle, g.Messages, threads, g.Recipients, age(now.Sub(d.ops.started))),
		fmt.Sprintf("Msgs in %d out %d stored %d Rcpnts in %d out %d stored %d",
			c.Arrived, max(c.Arrived-int64(g.Messages), 0), g.Messages, out+int64(g.Recipients), out, g.Recipients),
	}
}

// showThread is SHOW THREAD: a summary line, then one TAB-separated line
// per recipient with MAILQ v2's ten fields.
func (d *Daemon) showThread(now time.Time, channel, host string) ([]string, bool) {
	t, ok := d.core.Thread(now, channel, host)
	if !ok {
		return nil, false
	}
	out := []string{fmt.Sprintf("#%s/%s/%d\t%s", t.Channel, t.Host, hostBound(t.HostBound), d.threadLine(now, t, d.agentMap()))}
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
			out = append(out, strings.Join([]string{v.Path, strconv.Itoa(i), "-", strconv.FormatInt(r.Offset, 10),
				epoch(v.Expires), epoch(v.Wake), epoch(v.Fed), strconv.Itoa(v.Attempts), wait, v.LastText}, "\t"))
		}
	}
	return out, true
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
	for _, r := range d.core.Shape(now, bs, top) {
		line := fmt.Sprintf("%30s %6d", r.Host, r.Total)
		for _, n := range r.Counts {
			line += fmt.Sprintf(" %5d", n)
		}
		out = append(out, line)
	}
	return out
}

// why is WHY: one line per recipient, TAB-separated: offset, address,
// channel/host, reason word, the reason in words, attempts, and the last
// agent message.
func (d *Daemon) why(now time.Time, id string) ([]string, error) {
	m, err := d.core.Message(now, id)
	if err != nil {
		return nil, err
	}
	held := ""
	if m.Held {
		held = ", held"
	}
	out := []string{fmt.Sprintf("message %s (inum %d), queued %s ago, %d recipients pending%s",
		m.Path, m.Inum, age(now.Sub(m.Arrival)), m.Pending, held)}
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
				Oldest: timePtr(t.Oldest), QueueOnly: t.QueueOnly, Turned: t.Turned, Held: t.Held,
				LastText: t.LastText}
			if t.State == core.ThreadBlocked {
				qt.Pend = t.Pend.String()
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
	return q
}

package mailq

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"zsched/core"
)

// Secs formats a duration in whole seconds: "12s".
func Secs(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) + "s" }

// Age formats a duration as ZMailer's saytime does in its short form:
// days and hours, and minutes and seconds unless both of those are there —
// "0s", "2m53s", "1h2m", "3d4h", "1d5m7s".
func Age(d time.Duration) string {
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

// HostBound is ZMailer's /0 or /1 after a ring's or thread's name.
func HostBound(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Agents are the core's agents as the views name them: their views by id,
// and PID, their process ids (0 for one gone).
type Agents struct {
	Views map[int]core.AgentView
	PID   func(id int) int
}

// NewAgents indexes views by id.
func NewAgents(views []core.AgentView, pid func(id int) int) Agents {
	m := make(map[int]core.AgentView, len(views))
	for _, a := range views {
		m[a.ID] = a
	}
	return Agents{Views: m, PID: pid}
}

// ThreadLine is one thread's summary as the thread report gives it
// (zmailer-facts.md §7.3), with zsched's window and state after.
// With pad, N=, R= and A= have ZMailer's column widths, which scripts
// reading its report count on; THREADS2 splits on blanks instead.
func ThreadLine(now time.Time, t core.ThreadView, agents Agents, pad bool) string {
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
			a := agents.Views[id]
			pids = append(pids, strconv.Itoa(agents.PID(id)))
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
			fa = Secs(now.Sub(fed))
		}
		fmt.Fprintf(&b, " P={%s} HA=%s FA=%s OF=%d S=%s UF=%d", strings.Join(pids, ","),
			Secs(now.Sub(heard)), fa, over, state, max(t.Vertices-jobs, 0))
	}
	if t.Wake.After(now) {
		fmt.Fprintf(&b, " W=%s", Secs(t.Wake.Sub(now)))
	}
	if t.State == core.ThreadBlocked {
		fmt.Fprintf(&b, " pend=%s", t.Pend)
	}
	if !t.Oldest.IsZero() {
		fmt.Fprintf(&b, " QA=%s", Age(now.Sub(t.Oldest)))
	}
	fmt.Fprintf(&b, " window=%d/%d", t.Window, t.MaxThr)
	if t.Borrowed > 0 {
		// Sessions held by jobs of agents attached elsewhere (feed =
		// "message"): P={} does not list them, yet they fill the window.
		fmt.Fprintf(&b, " busy=%d borrowed=%d", t.Busy, t.Borrowed)
	}
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
		// Sessions node by node, one blank-free field: bynode=mx1:2,mx2:3.
		for i, n := range c.ByNode {
			if i == 0 {
				b.WriteString(" bynode=")
			} else {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s:%d", n.Node, n.Leases)
		}
		if c.Fallback {
			b.WriteString(" cluster:fallback")
		}
	}
	fmt.Fprintf(&b, " state=%s", t.State)
	return b.String()
}

// Rings is the thread report's part on the rings (SHOW QUEUE THREADS; short:
// SHOW QUEUE SHORT), laid out as ZMailer's thread_report: each ring's
// head, its threads unless short, and its totals.
func Rings(now time.Time, rings []core.RingView, agents Agents, short bool) []string {
	var out []string
	for _, r := range rings {
		head := fmt.Sprintf("%s/%d", ClauseHead(r.Select), HostBound(r.HostBound))
		if r.Host != "" {
			head += "\t" + r.Host
		}
		out = append(out, head)
		if !short {
			for _, t := range r.Threads {
				name := fmt.Sprintf("    %s/%s/%d", t.Channel, t.Host, HostBound(r.HostBound))
				out = append(out, name+ThreadPad(name)+ThreadLine(now, t, agents, true))
			}
		}
		out = append(out, fmt.Sprintf("	Threads: %4d Msgs: %5d Procs: %3d Idle: %3d Plim: %3d Flim: %3d Tlim: %3d",
			len(r.Threads), r.Msgs, r.Agents, r.Idle, r.MaxRing, r.Overfeed, r.MaxThr)+ThrottleNote(now, r))
	}
	return out
}

// Threads2 is SHOW QUEUE THREADS2: a line per thread, its fields split by
// tabs.
func Threads2(now time.Time, rings []core.RingView, agents Agents) []string {
	var out []string
	for _, r := range rings {
		for _, t := range r.Threads {
			out = append(out, t.Channel+"\t"+t.Host+"\t"+strings.ReplaceAll(ThreadLine(now, t, agents, false), " ", "\t"))
		}
	}
	return out
}

// ThreadPad is what ZMailer writes after a thread's name: tabs to the
// fifth tab stop, or a blank past it.
func ThreadPad(name string) string {
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

// ThrottleNote is the ring line's note on a throttled transport (issue 16):
// " throttled=12s" while the back-off runs, " throttled=probe" while one
// agent at a time is tried; then the failure.
func ThrottleNote(now time.Time, r core.RingView) string {
	switch {
	case r.Throttled.After(now):
		return fmt.Sprintf(" throttled=%s (%s)", Secs(r.Throttled.Sub(now)), r.ThrottleText)
	case r.Probing:
		return " throttled=probe (" + r.ThrottleText + ")"
	}
	return ""
}

// ClauseHead writes a select pattern as channel/host.
func ClauseHead(sel string) string {
	if !strings.Contains(sel, "/") {
		return sel + "/*"
	}
	return sel
}

// Summary is what the global summary lines say.
type Summary struct {
	Agents   int // the core's agents
	Gauges   core.Gauges
	Counters core.Counters
	Uptime   time.Duration
}

// Global are ZMailer's two summary lines; snmp gives the uptime in
// seconds, as ZMailer's SHOW SNMP does.
func Global(s Summary, snmp bool) []string {
	g, c := &s.Gauges, &s.Counters
	idle := g.Agents["idle"] + g.Agents["idling"]
	threads := 0
	for _, n := range g.Threads {
		threads += n
	}
	out := c.Delivered + c.Failed + c.Expired
	uptime := Age(s.Uptime)
	if snmp {
		uptime = fmt.Sprintf("%d sec", int64(s.Uptime/time.Second))
	}
	return []string{
		fmt.Sprintf("Kids: %d  Idle: %2d  Msgs: %3d  Thrds: %3d  Rcpnts: %4d  Uptime: %s",
			s.Agents, idle, g.Messages, threads, g.Recipients, uptime),
		fmt.Sprintf("Msgs in %d out %d stored %d Rcpnts in %d out %d stored %d",
			c.Arrived, max(c.Arrived-int64(g.Messages), 0), g.Messages, out+int64(g.Recipients), out, g.Recipients),
	}
}

// CounterSet is what SHOW COUNTERS says: the core's counters, gauges and
// dispatch latencies, and the daemon's uptime and the timing of its
// control commands (how long each waited for the loop, and ran on it).
type CounterSet struct {
	Counters    core.Counters
	Gauges      core.Gauges
	Dispatch    *core.Latency
	Uptime      time.Duration
	ControlWait *core.Latency
	ControlRun  *core.Latency
}

// Counters is SHOW COUNTERS: a line "name value" per counter, gauge and
// quantile, then the threads by state and the agents by state (sorted).
func Counters(s CounterSet) []string {
	c, g, l := &s.Counters, &s.Gauges, s.Dispatch
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
		fmt.Sprintf("sessions_borrowed %d", g.Borrowed),
		fmt.Sprintf("dispatched %d", l.Count()),
		fmt.Sprintf("dispatch_latency_p50 %s", l.Quantile(0.5)),
		fmt.Sprintf("dispatch_latency_p99 %s", l.Quantile(0.99)),
		fmt.Sprintf("uptime %s", Age(s.Uptime)),
		fmt.Sprintf("control_commands %d", s.ControlRun.Count()),
		fmt.Sprintf("control_wait_p50 %s", s.ControlWait.Quantile(0.5)),
		fmt.Sprintf("control_wait_p99 %s", s.ControlWait.Quantile(0.99)),
		fmt.Sprintf("control_run_p50 %s", s.ControlRun.Quantile(0.5)),
		fmt.Sprintf("control_run_p99 %s", s.ControlRun.Quantile(0.99)),
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

// ThreadHead is SHOW THREAD's first line: the thread's name and summary.
func ThreadHead(now time.Time, t core.ThreadView, agents Agents) string {
	return fmt.Sprintf("#%s/%s/%d\t%s", t.Channel, t.Host, HostBound(t.HostBound), ThreadLine(now, t, agents, true))
}

// ThreadRows are SHOW THREAD's lines for a vertex, one per recipient, with
// MAILQ v2's ten TAB-separated fields: path, index in its vertex, error
// address (errorAddr, "-" when not known), offset, expiry, the thread's
// wake-up, the vertex's last feed, attempts, what it waits for, the last
// agent text.
func ThreadRows(now time.Time, v core.VertexView, errorAddr func(offset int64) string) [][]string {
	epoch := func(x time.Time) string {
		if x.IsZero() {
			return "0"
		}
		return strconv.FormatInt(x.Unix(), 10)
	}
	wait := ""
	switch v.Why.Reason {
	case core.ReasonRetry, core.ReasonBackoff, core.ReasonDead:
		wait = "retry in " + Secs(v.Why.Until.Sub(now))
	case core.ReasonMaxTA, core.ReasonMaxChannel, core.ReasonForkRate:
		wait = "channel"
	case core.ReasonMaxRing, core.ReasonWindow:
		wait = "thread"
	case core.ReasonDue, core.ReasonRunning:
	default:
		wait = v.Why.Reason.String()
	}
	rows := make([][]string, 0, len(v.Rcpts))
	for i, r := range v.Rcpts {
		addr := "-"
		if errorAddr != nil {
			addr = errorAddr(r.Offset)
		}
		rows = append(rows, []string{v.Path, strconv.Itoa(i), addr,
			strconv.FormatInt(r.Offset, 10), epoch(v.Expires), epoch(v.Wake), epoch(v.Fed), strconv.Itoa(v.Attempts), wait, v.LastText})
	}
	return rows
}

// ShapeBuckets are Postfix qshape's age columns, in minutes.
var ShapeBuckets = []int{5, 10, 20, 40, 80, 160, 320, 640, 1280}

// ShapeDurations are ShapeBuckets as the core's Shape takes them.
func ShapeDurations() []time.Duration {
	bs := make([]time.Duration, len(ShapeBuckets))
	for i, m := range ShapeBuckets {
		bs[i] = time.Duration(m) * time.Minute
	}
	return bs
}

// Shape is QSHAPE's table, as Postfix's qshape lays it out: a head of age
// columns, then a line per host with its total and counts.
func Shape(rows []core.ShapeRow) []string {
	head := fmt.Sprintf("%-30s %6s", "", "T")
	for _, m := range ShapeBuckets {
		head += fmt.Sprintf(" %5d", m)
	}
	head += fmt.Sprintf(" %5s", strconv.Itoa(ShapeBuckets[len(ShapeBuckets)-1])+"+")
	out := []string{head}
	for _, r := range rows {
		line := fmt.Sprintf("%30s %6d", r.Host, r.Total)
		for _, n := range r.Counts {
			line += fmt.Sprintf(" %5d", n)
		}
		out = append(out, line)
	}
	return out
}

// Why is WHY for a message in core: a head line, then one line per
// recipient, TAB-separated: offset, address, channel/host, reason word,
// the reason in words, attempts, and the last agent message. pid maps an
// agent's id to its process id.
func Why(now time.Time, qid string, m core.MessageView, pid func(id int) int) []string {
	held := ""
	if m.Held {
		held = ", held"
	}
	out := []string{fmt.Sprintf("message %s (%s), queued %s ago, %d recipients pending%s",
		qid, m.Path, Age(now.Sub(m.Arrival)), m.Pending, held)}
	for _, v := range m.Vertices {
		text := v.Why.String()
		if v.Why.Reason == core.ReasonRunning {
			text += fmt.Sprintf(" (pid %d)", pid(v.Why.Agent))
		}
		for _, r := range v.Rcpts {
			out = append(out, strings.Join([]string{strconv.FormatInt(r.Offset, 10), r.User,
				v.Channel + "/" + v.Host, v.Why.Reason.String(), text,
				"attempts=" + strconv.Itoa(v.Attempts), "last=" + strconv.Quote(v.LastText)}, "\t"))
		}
	}
	return out
}

// Waiting is a control file known to the scheduler and not in core: why
// it waits, since when, and when it is read again.
type Waiting struct {
	Name        string // its path under transport/
	Why         string
	Since, Next time.Time
}

// MaxWaiting bounds the footer's list; WHY names any file.
const MaxWaiting = 20

// WaitingFooter is the thread report's footer: every file known to the
// scheduler and not in core, total of them, with why it waits, so that
// none is invisible: ws are the first (by name), at most MaxWaiting
// shown; past them, how many more.
func WaitingFooter(now time.Time, ws []Waiting, total int) []string {
	if total == 0 {
		return nil
	}
	out := []string{fmt.Sprintf("Waiting to be read: %d", total)}
	for i, w := range ws {
		if i == MaxWaiting {
			break
		}
		out = append(out, fmt.Sprintf("    %s\twaiting: %s; read again in %s", w.Name, w.Why, Age(max(w.Next.Sub(now), 0))))
	}
	if shown := min(len(ws), MaxWaiting); total > shown {
		out = append(out, fmt.Sprintf("    … and %d more (scheduler why NAME)", total-shown))
	}
	return out
}

// WhyWaiting is WHY for a file that waits outside the core.
func WhyWaiting(now time.Time, w Waiting) []string {
	return []string{fmt.Sprintf("message %s, not in core: waiting: %s; read again in %s (waiting %s)",
		w.Name, w.Why, Age(max(w.Next.Sub(now), 0)), Age(now.Sub(w.Since)))}
}

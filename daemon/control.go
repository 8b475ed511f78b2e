package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"zsched/control"
	"zsched/core"
	"zsched/ctlfile"
	"zsched/mailq"
)

// operator is how the outside reaches the loop, the agents and the spool
// aside: the control server and its verbs' handlers, the calls other
// goroutines (metrics scrapes) run inside the loop, reload requests, the
// second TERM, and metrics. Everything here that touches the core runs on
// the loop.
type operator struct {
	ctl      *control.Server
	handlers map[string]controlHandler // by verb: control.Verbs, carried out
	calls    chan func()
	reload   chan struct{}
	loaded   chan loaded // a reload's file, read and checked beside the loop (reload.go)
	reloads  reloads
	hurry    chan struct{} // a second TERM: shutdown kills the agents now
	metrics  *metrics
	started  time.Time
	// Control commands: how long each waited for the loop (from the
	// server reading its line) and how long the loop spent on it.
	ctlWait, ctlRun core.Latency
}

// slowControl is how long a control command may take, waiting for the
// loop and running on it, before it is logged: issue 9's bound on mailq
// and WHY.
const slowControl = 100 * time.Millisecond

// startOperator opens the control socket (and its optional TCP listener) and the
// metrics listener.
func (d *Daemon) startOperator() error {
	d.operator.handlers = controlHandlers()
	d.operator.calls = make(chan func())
	d.operator.reload = make(chan struct{}, 1)
	d.operator.loaded = make(chan loaded, 1) // one read at a time: its sender never waits
	d.operator.hurry = make(chan struct{}, 1)
	d.operator.started = d.now()
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
		d.operator.ctl = ctl
	}
	m, err := d.startMetrics()
	if err != nil {
		d.stopOperator()
		return err
	}
	d.operator.metrics = m
	return nil
}

// stopControl closes the control server: waiting clients are told the
// scheduler is shutting down.
func (d *Daemon) stopControl() {
	if d.operator.ctl != nil {
		d.operator.ctl.Close()
	}
}

func (d *Daemon) stopOperator() {
	d.stopControl()
	d.operator.metrics.close()
}

// requests is the control server's request channel; nil (never ready)
// without one.
func (d *Daemon) requests() <-chan *control.Request {
	if d.operator.ctl == nil {
		return nil
	}
	return d.operator.ctl.Requests()
}

// ControlTCPAddr returns the TCP control listener's address, or nil.
func (d *Daemon) ControlTCPAddr() string {
	if d.operator.ctl == nil || d.operator.ctl.TCPAddr() == nil {
		return ""
	}
	return d.operator.ctl.TCPAddr().String()
}

// Reload asks the loop to re-read the configuration file (SIGHUP). It never
// blocks; reloads asked for while one is pending are one reload.
func (d *Daemon) Reload() {
	select {
	case d.operator.reload <- struct{}{}:
	default:
	}
}

// Hurry makes a shutdown under way, or the next one, kill the agents at
// once instead of waiting shutdown_timeout for them (a second SIGTERM). It
// never blocks.
func (d *Daemon) Hurry() {
	select {
	case d.operator.hurry <- struct{}{}:
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
	case d.operator.calls <- func() { f(); close(done) }:
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
	if h := d.operator.handlers[req.Verb]; h != nil {
		rep = h(d, d.now(), req)
	} else {
		rep = control.Fail("MAILQ2 Unknown command: " + req.Verb)
	}
	d.apply()
	if rep.OK || rep.Text != "" || rep.Multi {
		req.Respond(rep)
	} // else answered later by the handler (beside the loop, or once a reload is applied)
	ran := time.Since(start)
	var waited time.Duration
	if !req.Received.IsZero() {
		waited = max(start.Sub(req.Received), 0)
	}
	d.operator.ctlWait.Observe(waited)
	d.operator.ctlRun.Observe(ran)
	if waited+ran >= slowControl {
		d.log.Warn("slow control command", "verb", req.Verb, "waited", waited.String(), "ran", ran.String(),
			"lines", len(rep.Lines))
	}
}

// controlHandler carries out one verb on the loop. It returns the reply,
// or the zero Reply when it answers the request itself later: beside the
// loop (what reads files), or once a reload is applied.
type controlHandler func(d *Daemon, now time.Time, req *control.Request) control.Reply

// controlHandlers are the handlers of every verb in control.Verbs
// (TestEveryVerbIsHandled).
func controlHandlers() map[string]controlHandler {
	listing := func(f func(d *Daemon, now time.Time) []string) controlHandler {
		return func(d *Daemon, now time.Time, _ *control.Request) control.Reply { return control.Listing(f(d, now)) }
	}
	bulk := func(v opVerb) controlHandler {
		return func(d *Daemon, _ time.Time, req *control.Request) control.Reply {
			return d.bulk(v, req.Args, peerArgs(req.Peer))
		}
	}
	single := func(v opVerb) controlHandler {
		return func(d *Daemon, _ time.Time, req *control.Request) control.Reply {
			d.single(req, v, arg(req, 0)) // queue.go: in core or on disk
			return control.Reply{}
		}
	}
	return map[string]controlHandler{
		control.VerbShowThreads:  listing(func(d *Daemon, now time.Time) []string { return d.threadReport(now, false) }),
		control.VerbShowShort:    listing(func(d *Daemon, now time.Time) []string { return d.threadReport(now, true) }),
		control.VerbShowThreads2: listing(func(d *Daemon, now time.Time) []string { return mailq.Threads2(now, d.core.Rings(now), d.agents()) }),
		control.VerbShowJSON: func(d *Daemon, now time.Time, _ *control.Request) control.Reply {
			b, err := json.Marshal(d.Queue(now))
			if err != nil {
				return control.Fail(err.Error())
			}
			return control.Listing([]string{string(b)})
		},
		control.VerbShowCounters:  listing((*Daemon).counters),
		control.VerbShowSNMP:      listing(func(d *Daemon, now time.Time) []string { return d.globalLines(now, true) }),
		control.VerbShowQshape:    (*Daemon).ctlQshape,
		control.VerbShowThread:    (*Daemon).ctlShowThread,
		control.VerbETRN:          (*Daemon).ctlETRN,
		control.VerbKillMsg:       single(opKill),
		control.VerbFlush:         (*Daemon).ctlFlush,
		control.VerbHoldThread:    (*Daemon).ctlHoldThread,
		control.VerbReleaseThread: (*Daemon).ctlHoldThread,
		control.VerbHoldMsg:       single(opHold),
		control.VerbReleaseMsg:    single(opRelease),
		control.VerbWhy:           (*Daemon).ctlWhy,
		control.VerbShowMessages:  func(d *Daemon, _ time.Time, req *control.Request) control.Reply { return d.listQueue(req.Args) },
		control.VerbShowMsg:       func(d *Daemon, _ time.Time, req *control.Request) control.Reply { return d.cat(req.Args) },
		control.VerbKillMsgs:      bulk(opKill),
		control.VerbHoldMsgs:      bulk(opHold),
		control.VerbReleaseMsgs:   bulk(opRelease),
		control.VerbFlushMsgs:     bulk(opFlush),
		control.VerbReload: func(d *Daemon, _ time.Time, req *control.Request) control.Reply {
			d.askReload(reloadAsk{by: peerArgs(req.Peer), req: req})
			return control.Reply{} // answered once the file is read and applied (reload.go)
		},
	}
}

// arg is the request's argument i, or "" (the verb's arity allows fewer).
func arg(req *control.Request, i int) string {
	if i < len(req.Args) {
		return req.Args[i]
	}
	return ""
}

func (d *Daemon) ctlQshape(now time.Time, req *control.Request) control.Reply {
	top := 20
	if a := arg(req, 0); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return control.Fail(control.VerbShowQshape + ": want a number of hosts, not " + strconv.Quote(a))
		}
		top = n
	}
	return control.Listing(d.qshape(now, top))
}

// ctlShowThread answers SHOW THREAD beside the loop: the error addresses
// are in the control files, read there; the loop answers for the rest.
func (d *Daemon) ctlShowThread(now time.Time, req *control.Request) control.Reply {
	st, ok := d.showThread(now, req.Args[0], req.Args[1])
	if !ok {
		return control.Fail("no thread " + req.Args[0] + "/" + req.Args[1] + " in core")
	}
	go func() { asHelper(); req.Respond(control.Listing(st.finish(d.spool.TransportDir()))) }()
	return control.Reply{}
}

func (d *Daemon) ctlETRN(now time.Time, req *control.Request) control.Reply {
	name := arg(req, 0)
	if _, err := core.ParseDest(name); err != nil || strings.Contains(name, "/") {
		return control.Fail(control.VerbETRN + " " + name + ": want a host, @domain or a host glob")
	}
	n := d.core.ETRN(now, strings.Join(req.Args, " "))
	d.log.Info("etrn", append([]any{"name", name, "started", n}, peerArgs(req.Peer)...)...)
	if n > 0 {
		return control.OK("OK; an ETRN started something.")
	}
	// MAILQ v2's words: its clients compare them. `scheduler etrn`
	// exits 1 on this one.
	return control.OK("OK; an ETRN didn't start anything.")
}

func (d *Daemon) ctlFlush(now time.Time, req *control.Request) control.Reply {
	sel := arg(req, 0)
	n, err := d.core.Flush(now, sel)
	if err != nil {
		return control.Fail(err.Error())
	}
	d.log.Info("flush", append([]any{"select", sel, "threads", n}, peerArgs(req.Peer)...)...)
	if n == 0 {
		if sel == "" {
			return control.Fail("no thread in core to flush")
		}
		return control.Fail("no thread in core matches " + strconv.Quote(sel))
	}
	return control.OK(fmt.Sprintf("flushed %d threads", n))
}

// ctlHoldThread is HOLD THREAD and RELEASE THREAD.
func (d *Daemon) ctlHoldThread(now time.Time, req *control.Request) control.Reply {
	p, err := core.ParseDest(arg(req, 0))
	if err != nil || !strings.Contains(arg(req, 0), "/") {
		return control.Fail("want channel/host (globs allowed), not " + strconv.Quote(arg(req, 0)))
	}
	if req.Verb == control.VerbHoldThread {
		return d.holdDest(now, p, peerArgs(req.Peer))
	}
	return d.releaseDest(now, p, peerArgs(req.Peer))
}

func (d *Daemon) ctlWhy(now time.Time, req *control.Request) control.Reply {
	lines, err := d.why(now, arg(req, 0))
	if errors.Is(err, core.ErrNoMessage) {
		d.whyOnDisk(req, arg(req, 0)) // queue.go: answered off the loop
		return control.Reply{}
	}
	if err != nil {
		return control.Fail(err.Error())
	}
	return control.Listing(lines)
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

// age is mailq.Age: ZMailer's saytime, for the daemon's own lines.
func age(d time.Duration) string { return mailq.Age(d) }

// agents are the core's agents with their process ids, for the views.
func (d *Daemon) agents() mailq.Agents { return mailq.NewAgents(d.core.AgentViews(), d.pid) }

// threadReport is SHOW QUEUE THREADS (short: SHOW QUEUE SHORT), laid out
// as ZMailer's thread_report, with what lies outside the core after it.
func (d *Daemon) threadReport(now time.Time, short bool) []string {
	out := mailq.Rings(now, d.core.Rings(now), d.agents(), short)
	out = append(out, d.globalLines(now, false)...)
	out = append(out, d.spoolLines(now)...)    // census.go: the whole spool, unrouted mail
	return append(out, d.waitingLines(now)...) // intake.go: files not in core, and why
}

// globalLines are ZMailer's two summary lines (snmp: SHOW SNMP's), then
// the cluster's.
func (d *Daemon) globalLines(now time.Time, snmp bool) []string {
	lines := mailq.Global(mailq.Summary{Agents: d.core.Agents(), Gauges: d.core.Gauges(now, 0),
		Counters: d.core.Counters(), Uptime: now.Sub(d.operator.started)}, snmp)
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
// per recipient with MAILQ v2's ten fields (mailq.ThreadRows), the error
// address left to finish.
func (d *Daemon) showThread(now time.Time, channel, host string) (*threadListing, bool) {
	t, ok := d.core.Thread(now, channel, host)
	if !ok {
		return nil, false
	}
	st := &threadListing{head: mailq.ThreadHead(now, t, d.agents())}
	for _, v := range d.core.ThreadVertices(now, channel, host) {
		for i, fields := range mailq.ThreadRows(now, v, nil) {
			st.rows = append(st.rows, threadRow{path: v.Path, offset: v.Rcpts[i].Offset, fields: fields})
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

// counters is SHOW COUNTERS (mailq.Counters lays it out).
func (d *Daemon) counters(now time.Time) []string {
	return mailq.Counters(mailq.CounterSet{Counters: d.core.Counters(), Gauges: d.core.Gauges(now, 0),
		Dispatch: d.core.Latency(), Uptime: now.Sub(d.operator.started),
		ControlWait: &d.operator.ctlWait, ControlRun: &d.operator.ctlRun})
}

// qshapeBuckets are QSHAPE's age columns, in minutes (census.go counts
// the spool in them).
var qshapeBuckets = mailq.ShapeBuckets

// qshape is QSHAPE: Postfix qshape's table over the spool (census.go)
// and which part of it is in core.
func (d *Daemon) qshape(now time.Time, top int) []string {
	out := mailq.Shape(d.shapeSpool(d.core.Shape(now, mailq.ShapeDurations(), 0), top)) // census.go
	return append(out, d.qshapeNote(now))
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
	return mailq.Why(now, lk.QID, m, d.pid), nil
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
	// ByNode is Leases node by node, as the store last counted them;
	// absent in fallback, when only this node counts.
	ByNode map[string]int `json:"by_node,omitempty"`
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
	Channel    string `json:"channel"`
	Host       string `json:"host"`
	State      string `json:"state"`
	Pend       string `json:"pend,omitempty"`
	Vertices   int    `json:"vertices"`
	Recipients int    `json:"recipients"`
	Attempts   int    `json:"attempts"`
	Pids       []int  `json:"pids"`
	Window     int    `json:"window"`
	MaxThr     int    `json:"maxthr"`
	// Busy is its sessions: its agents (Pids) and Borrowed, the jobs fed
	// to agents attached to other destinations (feed = "message").
	Busy      int        `json:"busy"`
	Borrowed  int        `json:"borrowed"`
	Ceiling   int        `json:"ceiling,omitempty"`
	Confirmed bool       `json:"ceiling_confirmed,omitempty"`
	Wake      *time.Time `json:"wake,omitempty"`
	Backoff   *time.Time `json:"backoff_until,omitempty"`
	Oldest    *time.Time `json:"oldest,omitempty"`
	QueueOnly bool       `json:"queueonly,omitempty"`
	Turned    bool       `json:"turned,omitempty"`
	Held      bool       `json:"held,omitempty"`
	LastText  string     `json:"last_text,omitempty"`
	// Cluster is the destination's shared window; absent without [cluster].
	Cluster *QueueShared `json:"cluster,omitempty"`
}

// QueueAgent is one transport agent in Queue.
type QueueAgent struct {
	Pid     int    `json:"pid"`
	Channel string `json:"channel"`
	Host    string `json:"host"`
	State   string `json:"state"`
	Jobs    int    `json:"jobs"`
	// Borrowed is how many of Jobs hold a session of another destination
	// than its thread's (feed = "message").
	Borrowed int        `json:"borrowed,omitempty"`
	Heard    time.Time  `json:"heard"`
	Fed      *time.Time `json:"fed,omitempty"`
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
	q := Queue{Time: now.UTC(), Uptime: age(now.Sub(d.operator.started)), Counters: d.core.Counters(),
		Rings: []QueueRing{}, Agents: []QueueAgent{}}
	for _, r := range d.core.Rings(now) {
		qr := QueueRing{Select: r.Select, Channel: r.Channel, Host: r.Host, HostBound: r.HostBound,
			Msgs: r.Msgs, Agents: r.Agents, Idle: r.Idle, MaxRing: r.MaxRing, Overfeed: r.Overfeed,
			MaxThr: r.MaxThr, Threads: []QueueThread{},
			Throttled: timePtr(r.Throttled), ThrottleProbe: r.Probing, ThrottleReason: r.ThrottleText}
		for _, t := range r.Threads {
			qt := QueueThread{Channel: t.Channel, Host: t.Host, State: t.State.String(),
				Vertices: t.Vertices, Recipients: t.Recipients, Attempts: t.Attempts, Pids: []int{},
				Window: t.Window, MaxThr: t.MaxThr, Busy: t.Busy, Borrowed: t.Borrowed, Ceiling: t.Ceiling, Confirmed: t.Confirmed, Wake: timePtr(t.Wake), Backoff: timePtr(t.Backoff),
				Oldest: timePtr(t.Oldest), QueueOnly: t.QueueOnly, Turned: t.ETRN, Held: t.Held,
				LastText: t.LastText}
			if t.State == core.ThreadBlocked {
				qt.Pend = t.Pend.String()
			}
			if c := t.Cluster; c != nil {
				qt.Cluster = &QueueShared{Window: c.Window, Leases: c.Leases, Mine: c.Mine, Nodes: c.Nodes,
					Fallback: c.Fallback, Denied: c.Denied}
				if len(c.ByNode) > 0 {
					qt.Cluster.ByNode = make(map[string]int, len(c.ByNode))
					for _, n := range c.ByNode {
						qt.Cluster.ByNode[n.Node] = n.Leases
					}
				}
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
			State: a.State, Jobs: a.Jobs, Borrowed: a.Borrowed, Heard: a.Heard.UTC(), Fed: timePtr(a.Fed)})
	}
	if st, ok := d.ClusterStatus(); ok {
		q.Cluster = &QueueCluster{Node: st.Node, Store: st.Store, Mode: st.Mode.String(), Since: st.Since.UTC(),
			Nodes: st.Nodes, Leases: st.Leases, Error: st.Err, Fallbacks: st.Fallbacks, Reconnects: st.Reconnects}
	}
	q.Spool = d.spoolTotals(now)
	q.Unrouted = append([]core.Unrouted{}, d.core.UnroutedViews()...)
	return q
}

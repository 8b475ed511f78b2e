// Package daemon owns the running scheduler: one goroutine that holds the
// core and selects over agent events, notify datagrams, its timer, the
// directory scan and shutdown, and carries out the core's actions on real
// processes and files. Everything that decides lives in package core; this
// package only translates between it and the world.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/admission"
	"zsched/agent"
	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
	"zsched/vertex"
)

// killGrace is how long a killed agent has between SIGTERM and SIGKILL.
const killGrace = 5 * time.Second

// Options configure a Daemon beyond its config file.
type Options struct {
	// Drain makes Run return once the queue is empty and no agent is busy.
	Drain bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Seed seeds the core's random source; 0 means the time.
	Seed int64
	// Notify, when set, is told the service states systemd's sd_notify
	// knows: "READY=1" once the control socket listens and the startup
	// read has begun, "RELOADING=1…" and "READY=1" around a reload,
	// "STOPPING=1" when shutdown begins.
	Notify func(state string)
	// OnBatch, when set, sees each batch of the core's effects and
	// observations before the daemon carries it out, on the daemon's
	// goroutine; it must not keep the batch (the lab measures with it).
	OnBatch func(r *core.Ready)
	// OnDrained, when set with Drain, is called on the daemon's goroutine
	// when the queue drained, before the shutdown (the bench samples the
	// process's own CPU time there, the agents still running).
	OnDrained func()
	// LoopThread locks Run's goroutine to one OS thread for the whole run
	// and counts that thread's CPU time outside the loop's blocking select
	// (LoopCPU): the loop-only benchmark's measure. Off in production,
	// where a goroutine bound to one thread only costs hand-offs.
	LoopThread bool
	// GCHeadroom, when not 0, is how much the heap may grow between two
	// collections at least, whatever the live heap (gcfloor.go): the
	// run command gives DefaultGCHeadroom. Process-wide while Run runs.
	GCHeadroom uint64
}

// Daemon is a running scheduler.
type Daemon struct {
	cfg   *config.Config
	opt   Options
	log   hclog.Logger
	spool *ctlfile.Spool
	core  *core.Core
	now   func() time.Time
	// coreLog is the core's logger; observe.go logs its observations
	// there too.
	coreLog hclog.Logger
	// stats are the figures of the run (stats.go).
	stats RunStats
	// outcomeLine is logOutcome's key/value list, reused line to line,
	// when there is no outcomes writer (outside Run).
	outcomeLine *outcomeLine
	// outcomes writes the outcome lines beside the loop while Run runs.
	outcomes *outcomeLog

	// unwritten holds d lines whose append failed (disk full, I/O error),
	// per control file, retried before the message completes: a lost d line
	// would drop its recipient from the DSN.
	unwritten map[string][]ctlfile.Diag
	// appendDiags appends d lines; nil means d.spool.AppendDiags (tests
	// inject failures here).
	appendDiags func(rel string, ds []ctlfile.Diag) error

	procs  map[int]*agent.Proc
	events chan agent.Event
	// tails, gone and syncing: agents.go.
	tails   map[int]*tail
	gone    map[int]goneAgent
	syncing map[int]bool
	// lines and agentOrder are write's scratch space.
	lines      map[int][]string
	agentOrder []int
	notify     chan string
	conn       *net.UnixConn
	pidfile    string

	in     intake   // control files on their way into the core (intake.go)
	rm     *remover // completed messages' files being removed (remove.go)
	debris debris   // the spool's sweeps (sweep.go)
	noise  *rateLog // conditions that recur, logged once an hour (ratelog.go)
	// ownsLock, when set, says whether a PID is one of our agents' for
	// judging locks (admission.JudgeLocks); nil: one of d.procs.
	ownsLock func(pid int) bool
	// procStarted, when set, says when a process started, for judging
	// locks; nil: procStart (from /proc).
	procStarted func(pid int) time.Time
	// procHasOpen, when set, says whether a process has a control file
	// open, for judging locks; nil: hasFileOpen (from /proc).
	procHasOpen func(pid int, id ctlfile.FileID) admission.FileOpen
	stopped     bool
	clock       loopClock // the loop's own CPU time, with Options.LoopThread

	operator operator // control socket and its handlers, reload, metrics (control.go, metrics.go)

	state stateFile // learned destination state (state.go)

	cluster  *clusterLink // the shared windows' store, nil without [cluster] (cluster.go)
	holds    *holdStore   // operator holds kept on disk (holds.go)
	retry    *journal     // retry state kept on disk (retry.go)
	statelog *stateLog    // the per-attempt log (statelog.go)
	census   censusState  // what waits on disk beyond the core (census.go)
	orphans  orphanWaits  // killed earlier schedulers' agents waited for (orphan.go)
}

// New prepares a daemon for cfg: it creates the spool directories, the pid
// file and the notify socket. Run starts it.
func New(cfg *config.Config, log hclog.Logger, opt Options) (*Daemon, error) {
	if cfg.Scheduler.Postoffice == "" {
		return nil, errors.New("daemon: no postoffice configured")
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	seed := opt.Seed
	if seed == 0 {
		seed = now().UnixNano()
	}
	d := &Daemon{
		cfg:    cfg,
		opt:    opt,
		log:    log,
		spool:  &ctlfile.Spool{Root: cfg.Scheduler.Postoffice, Hash: cfg.Scheduler.Hash},
		now:    now,
		procs:  make(map[int]*agent.Proc),
		events: make(chan agent.Event, 1024),
		notify: make(chan string, 1024),
		in:     newIntake(&cfg.Scheduler),
		noise:  newRateLog(rateEvery),
	}
	d.spool.SetMaxControlSize(int64(cfg.Scheduler.MaxControlSize))
	d.coreLog = log.Named("core")
	d.core = core.New(cfg, d.coreLog, rand.New(rand.NewSource(seed)))
	d.core.SetRingCap(now(), d.in.startup.RingCap()) // the startup read (intake.go)
	if err := d.spool.Init(); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if err := d.startCluster(); err != nil {
		return nil, err
	}
	// First, so that a second scheduler on the postoffice stops here,
	// before it touches the running one's pid file and notify socket.
	if err := d.startOperator(); err != nil {
		d.stopCluster()
		return nil, err
	}
	d.pidfile = filepath.Join(cfg.Scheduler.Postoffice, ".pid.scheduler")
	if err := os.WriteFile(d.pidfile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		d.stopOperator()
		d.stopCluster()
		return nil, fmt.Errorf("daemon: pid file: %w", err)
	}
	if err := d.listenNotify(); err != nil {
		d.stopOperator()
		d.stopCluster()
		return nil, err
	}
	d.loadState()
	d.seedCluster()
	// Before the first read of the queue: nothing held goes out, and no
	// deferred recipient is tried before its time.
	d.loadHolds()
	d.loadJournal()
	if err := d.openStateLog(); err != nil {
		d.retry.close()
		d.stopOperator()
		return nil, err
	}
	return d, nil
}

// listenNotify opens the notify socket the router (and enqueue) sends
// "NEW <relpath>" datagrams to.
func (d *Daemon) listenNotify() error {
	path := d.cfg.Scheduler.NotifySocket
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("daemon: notify socket: %w", err)
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("daemon: notify socket: %w", err)
	}
	d.conn = conn
	go func() {
		asHelper()
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(d.notify)
				return
			}
			msg := strings.TrimSpace(string(buf[:n]))
			if rel, ok := strings.CutPrefix(msg, "NEW "); ok {
				d.notify <- strings.TrimSpace(rel)
			} else {
				d.log.Warn("unknown notify datagram", "datagram", msg)
			}
		}
	}()
	return nil
}

// Core exposes the scheduling core (for tests and the control socket).
func (d *Daemon) Core() *core.Core { return d.core }

// Run runs the scheduler until ctx is cancelled or, with Drain, the queue
// is empty. Shutdown ends every agent gracefully within the configured
// bound, then kills what is left; nothing else needs saving.
func (d *Daemon) Run(ctx context.Context) error {
	asLoop()
	defer pprof.SetGoroutineLabels(ctx) // the caller's again
	if d.opt.LoopThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		d.clock.start()
		defer d.clock.stop()
	}
	defer startGCFloor(d.opt.GCHeadroom).stop() // started now, stopped when Run returns
	defer d.close()
	defer d.saveState() // after shutdown: the agents' last reports count
	// What a stop interrupted between a message's two unlinks, before the
	// remover's logs take new batches.
	removed, err := d.spool.FinishRemovals()
	for _, p := range removed {
		d.log.Info("removed the body of a message whose removal a stop interrupted", "file", p)
	}
	if err != nil {
		d.log.Warn("finishing interrupted removals", "error", err)
	}
	d.outcomes = newOutcomeLog(d.log)
	defer func() { d.outcomes.close(); d.outcomes = nil }()
	d.rm = newRemover(d.spool, d.log, d.now, d.noise)
	// First: a drain removes the files of the last completions too.
	defer func() { d.rm.close(d.opt.Drain) }()
	d.startSweep(d.now())
	defer d.waitSweep()
	d.startScan(d.now())
	d.censusStart(d.now())
	d.sdNotify("READY=1")
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	notify := d.notify
	for {
		d.serveWaiting()
		d.intakeStep()
		d.apply()
		d.censusCheck(d.now())
		d.commitHoldsDue() // holds of messages that left the spool (holds.go)
		if d.opt.Drain && d.intakeIdle() && d.core.Idle() && d.rm.idle() {
			d.outcomes.sync() // they come before the summary
			l := d.core.Latency()
			c := d.core.Counters()
			st := &Drained{Delivered: c.Delivered, Failed: c.Failed, Deferred: c.Deferred,
				AgentsStarted: c.Spawned, Dispatched: l.Count(), DispatchP50: l.Quantile(0.5), DispatchP99: l.Quantile(0.99)}
			d.stats.Drained = st
			d.log.Info("queue drained", "delivered", st.Delivered, "failed", st.Failed,
				"deferred", st.Deferred, "agents_started", st.AgentsStarted, "dispatched", st.Dispatched,
				"dispatch_p50", st.DispatchP50.String(), "dispatch_p99", st.DispatchP99.String())
			d.clock.stop() // the drain's, not the agents' ending
			if d.opt.OnDrained != nil {
				d.opt.OnDrained()
			}
			return d.shutdown()
		}
		now := d.now()
		wake := d.intakeWake(d.core.NextWakeup())
		wait := wake.Sub(now)
		if d.intakeBusy() {
			wait = 0
		}
		timer.Reset(max(wait, 0))
		d.clock.sleep()
		select {
		case <-ctx.Done():
			d.clock.woke()
			d.log.Info("shutting down", "reason", context.Cause(ctx))
			return d.shutdown()
		case ev := <-d.events:
			d.clock.woke()
			// One clock read for the events taken together (agentEvent),
			// read again after the core has acted on them: the core never
			// sees time go back.
			now := d.now()
			d.agentEvent(now, ev)
			// Take whatever else is ready before acting on any of it: the
			// job lines for one agent then leave in one write, and the
			// core's actions are carried out once per batch.
			for n := 1; n < 512; n++ {
				if n%64 == 0 {
					// An operator waits on a busy loop at most this long.
					d.apply()
					d.serveWaiting()
					now = d.now()
				}
				select {
				case ev := <-d.events:
					d.agentEvent(now, ev)
					continue
				default:
				}
				break
			}
			d.apply()
		case evs := <-d.bookEvents():
			d.clock.woke()
			d.core.Window(d.now(), evs) // cluster.go; applied at the top of the loop
		case <-d.fetchDone():
			d.clock.woke()
			// intakeStep takes the batch at the top of the loop.
		case <-d.rm.done:
			d.clock.woke()
			d.removed(d.rm.take()) // complete.go
		case <-d.orphanDone():
			d.clock.woke()
			d.orphansWaited() // resets the locks of the killed agents' files
		case rel, ok := <-notify:
			d.clock.woke()
			if !ok {
				notify = nil
				continue
			}
			d.enqueueRead(rel)
		case req := <-d.requests():
			d.clock.woke()
			d.control(req)
		case f := <-d.operator.calls:
			d.clock.woke()
			f()
		case <-d.operator.reload:
			d.clock.woke()
			d.askReload(reloadAsk{by: []any{"by", "SIGHUP"}}) // reload.go
		case l := <-d.operator.loaded:
			d.clock.woke()
			d.reloaded(l) // logs the outcome either way
		case <-timer.C:
			d.clock.woke()
			d.tick()
		}
	}
}

// LoopCPU is the CPU time Run's goroutine used for its work, user and
// system, once Run has returned with Options.LoopThread; 0 otherwise.
func (d *Daemon) LoopCPU() time.Duration { return d.clock.busy }

// serveWaiting answers the control requests already waiting, so that an
// operator's mailq or WHY waits for at most a slice of a busy turn, never
// a whole one (intake at start reads thousands of files a turn).
func (d *Daemon) serveWaiting() {
	reqs := d.requests()
	for range 16 {
		select {
		case req := <-reqs:
			d.control(req)
		default:
			return
		}
	}
}

func (d *Daemon) close() {
	d.stopCluster()
	d.stopOperator()
	d.commitHolds()
	d.retry.close()
	d.statelog.close()
	if d.conn != nil {
		d.conn.Close()
		os.Remove(d.cfg.Scheduler.NotifySocket)
	}
	os.Remove(d.pidfile)
	// The spool's directory descriptors go last: a batch still being read
	// uses them (the remover has stopped already: Run's deferred close).
	if d.in.inflight != nil {
		<-d.in.inflight.done
	}
	d.spool.Close()
}

// shutdown ends every agent and waits for them, each with its whole process
// group, within ShutdownTimeout; then kills the groups left (SIGTERM, then
// SIGKILL a second later), so no process of an agent outlives the scheduler.
func (d *Daemon) shutdown() error {
	defer d.lastUnwritten() // after the agents' last reports
	d.sdNotify("STOPPING=1")
	d.stopped = true
	d.core.Quiesce()
	d.stopControl()
	for _, p := range d.procs {
		p.End()
	}
	deadline := time.NewTimer(max(d.cfg.Scheduler.ShutdownTimeout.D(), time.Second))
	defer deadline.Stop()
	killed := false
	hurry := d.operator.hurry
	for len(d.procs) > 0 {
		select {
		case <-hurry:
			// A second TERM: the operator will not wait.
			hurry = nil
			killed = true
			d.log.Warn("second signal: killing the agents now", "agents", len(d.procs))
			for _, p := range d.procs {
				p.Kill(time.Second)
			}
			deadline.Reset(3 * time.Second)
		case ev := <-d.events:
			d.agentEvent(d.now(), ev)
			d.applyLog()
		case evs := <-d.bookEvents():
			// Grants that come now are released at once (the core is
			// stopping); reading them keeps the book renewing.
			d.core.Window(d.now(), evs)
			d.applyLog()
		case <-deadline.C:
			if killed {
				return fmt.Errorf("daemon: %d agents did not exit", len(d.procs))
			}
			killed = true
			d.log.Warn("agents did not end in time; killing them", "agents", len(d.procs))
			for _, p := range d.procs {
				p.Kill(time.Second)
			}
			deadline.Reset(3 * time.Second)
		}
	}
	return nil
}

// applyLog carries out only what is safe during shutdown: outcome logs, d
// lines, messages completed by the last reports (and killed ones), and
// re-reads of files a dead agent held (which reset its stale locks on
// disk, and are answered to the core as in apply); no new agents, no new
// work.
func (d *Daemon) applyLog() {
	for d.core.HasReady() {
		r := d.core.Ready()
		d.diags(r.Diags)
		for _, o := range r.Outcomes {
			d.logOutcome(o)
		}
		if d.outcomes != nil {
			d.outcomes.flush()
		}
		for _, c := range r.Completes {
			d.left(c.Inum)
			d.finish(c)
		}
		d.observed(r.Observations)
		if d.opt.OnBatch != nil {
			d.opt.OnBatch(&r)
		}
		now := d.now()
		for _, rr := range r.Rereads {
			d.reread(now, rr)
		}
		d.core.Advance()
	}
	clear(d.gone)
	d.pushBook()
}

func exitReason(ev agent.Event) string {
	if ev.Err != nil {
		return "agent exited: " + ev.Err.Error()
	}
	return ""
}

// etrnFile carries out a ZMailer ETRN request file ("T domain ip").
func (d *Daemon) etrnFile(rel string, f *ctlfile.File) {
	for _, t := range f.ETRNs {
		n := d.core.ETRN(d.now(), t.Domain)
		d.log.Info("etrn request file", "msg", rel, "domain", t.Domain, "client", t.IP, "started", n)
	}
	if err := d.spool.Remove(f.Files(rel)); err != nil {
		d.log.Error("cannot remove etrn request file", "msg", rel, "error", err)
	}
}

func hasPendingDiags(f *ctlfile.File) bool {
	for _, dg := range f.Diags {
		if dg.Status == ctlfile.Pending {
			return true
		}
	}
	return false
}

// arrival reduces a control file to what the core schedules.
func arrival(rel string, f *ctlfile.File) core.Arrival {
	a := core.Arrival{Inum: f.Inum, Path: rel, ID: f.ID, QID: f.QueueID(), Arrival: f.Arrival, Bounce: f.IsBounce(), Warned: warned(f), Diags: hasPendingDiags(f)}
	groups := f.Groups()
	if len(groups) == 0 {
		return a
	}
	// The groups' recipients in one array, each group's part capped at
	// its length (a vertex that grows its list copies it): two
	// allocations a message rather than one per destination and the
	// appends' regrowing, on every file read.
	n := 0
	for _, g := range groups {
		n += len(g.Rcpts)
	}
	all := make([]vertex.Rcpt, n)
	a.Groups = make([]core.Group, len(groups))
	for gi, g := range groups {
		rs := all[:len(g.Rcpts):len(g.Rcpts)]
		all = all[len(g.Rcpts):]
		for i, ri := range g.Rcpts {
			r := &f.Rcpts[ri]
			rs[i] = vertex.Rcpt{Offset: r.Offset, User: r.User, Notify: uint8(r.Notify)}
		}
		a.Groups[gi] = core.Group{Channel: g.Channel, Host: g.Host, Rcpts: rs}
	}
	return a
}

func inumOf(rel string) (int64, bool) {
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	n := 0
	for n < len(base) && base[n] >= '0' && base[n] <= '9' {
		n++
	}
	v, err := strconv.ParseInt(base[:n], 10, 64)
	return v, err == nil
}

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
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/agent"
	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
	"zsched/vertex"
)

// liveLockDelay is how long a file with a live agent's lock waits before it
// is read again (ZMailer: 32 s).
const liveLockDelay = 32 * time.Second

// readBatch bounds how many control files are read between two looks at
// agent events, so delivery starts before a long scan ends.
const readBatch = 256

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
}

// Daemon is a running scheduler.
type Daemon struct {
	cfg   *config.Config
	opt   Options
	log   hclog.Logger
	spool *ctlfile.Spool
	core  *core.Scheduler
	now   func() time.Time

	procs   map[int]*agent.Proc
	events  chan agent.Event
	notify  chan string
	conn    *net.UnixConn
	pidfile string

	queued  map[string]bool // rel paths waiting to be read
	toRead  []string        // in arrival order
	later   []delayed       // files to read again after a delay
	stopped bool
}

type delayed struct {
	rel string
	at  time.Time
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
		queued: make(map[string]bool),
	}
	d.core = core.New(cfg, log.Named("core"), rand.New(rand.NewSource(seed)))
	if err := d.spool.Init(); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	d.pidfile = filepath.Join(cfg.Scheduler.Postoffice, ".pid.scheduler")
	if err := os.WriteFile(d.pidfile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("daemon: pid file: %w", err)
	}
	if err := d.listenNotify(); err != nil {
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
func (d *Daemon) Core() *core.Scheduler { return d.core }

// Run runs the scheduler until ctx is cancelled or, with Drain, the queue
// is empty. Shutdown ends every agent gracefully within the configured
// bound, then kills what is left; nothing else needs saving.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()
	d.scan()
	scanEvery := d.cfg.Scheduler.ScanInterval.D()
	if scanEvery <= 0 {
		scanEvery = 10 * time.Second
	}
	nextScan := d.now().Add(scanEvery)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	notify := d.notify
	for {
		d.readSome()
		if d.opt.Drain && len(d.toRead) == 0 && len(d.later) == 0 && d.core.Idle() {
			l := d.core.Latency()
			c := d.core.Counters()
			d.log.Info("queue drained", "delivered", c.Delivered, "failed", c.Failed,
				"deferred", c.Deferred, "agents_started", c.Spawned, "dispatched", l.Count(),
				"dispatch_p50", l.Quantile(0.5).String(), "dispatch_p99", l.Quantile(0.99).String())
			return d.shutdown()
		}
		now := d.now()
		wake := d.core.NextWakeup()
		if wake.IsZero() || nextScan.Before(wake) {
			wake = nextScan
		}
		for _, l := range d.later {
			if l.at.Before(wake) {
				wake = l.at
			}
		}
		wait := wake.Sub(now)
		if len(d.toRead) > 0 {
			wait = 0
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			d.log.Info("shutting down", "reason", context.Cause(ctx))
			return d.shutdown()
		case ev := <-d.events:
			d.agentEvent(ev)
			// Take whatever else is ready before looking at the timer.
			for n := 0; n < 512; n++ {
				select {
				case ev := <-d.events:
					d.agentEvent(ev)
					continue
				default:
				}
				break
			}
		case rel, ok := <-notify:
			if !ok {
				notify = nil
				continue
			}
			d.enqueueRead(rel)
		case <-timer.C:
			now := d.now()
			if !now.Before(nextScan) {
				d.scan()
				nextScan = now.Add(scanEvery)
			}
			d.readLater(now)
			d.core.Tick(now)
			d.apply()
		}
	}
}

func (d *Daemon) close() {
	if d.conn != nil {
		d.conn.Close()
		os.Remove(d.cfg.Scheduler.NotifySocket)
	}
	os.Remove(d.pidfile)
}

// shutdown ends every agent and waits for them within ShutdownTimeout.
func (d *Daemon) shutdown() error {
	d.stopped = true
	for _, p := range d.procs {
		p.End()
	}
	deadline := time.NewTimer(max(d.cfg.Scheduler.ShutdownTimeout.D(), time.Second))
	defer deadline.Stop()
	killed := false
	for len(d.procs) > 0 {
		select {
		case ev := <-d.events:
			if ev.Kind == agent.Exited {
				delete(d.procs, ev.ID)
				d.core.AgentExited(d.now(), ev.ID, exitReason(ev))
			} else if ev.Kind == agent.Line {
				d.core.AgentLine(d.now(), ev.ID, ev.Line)
			}
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
// lines, and re-reads of files a dead agent held (which reset its stale
// locks on disk); no new agents, no new work.
func (d *Daemon) applyLog() {
	r := d.core.Ready()
	d.diags(r.Diags)
	for _, o := range r.Outcomes {
		d.logOutcome(o)
	}
	for _, rr := range r.Rereads {
		if _, err := d.spool.Reread(rr.Path); err != nil && !errors.Is(err, ctlfile.ErrNotFound) {
			d.log.Warn("re-reading control file", "msg", rr.Path, "error", err)
		}
	}
}

func (d *Daemon) agentEvent(ev agent.Event) {
	now := d.now()
	switch ev.Kind {
	case agent.Line:
		d.core.AgentLine(now, ev.ID, ev.Line)
	case agent.TooLong:
		d.core.AgentTooLong(now, ev.ID)
	case agent.Exited:
		delete(d.procs, ev.ID)
		if ev.Partial > 0 {
			d.log.Warn("agent output ended in a partial line", "agent", ev.ID, "lost_bytes", ev.Partial)
		}
		d.core.AgentExited(now, ev.ID, exitReason(ev))
	}
	d.apply()
}

func exitReason(ev agent.Event) string {
	if ev.Err != nil {
		return "agent exited: " + ev.Err.Error()
	}
	return ""
}

// scan queues every control file not yet in core or queued.
func (d *Daemon) scan() {
	n := 0
	err := d.spool.Scan(func(rel string) {
		if d.queued[rel] {
			return
		}
		if inum, ok := inumOf(rel); ok && d.core.Has(inum) {
			return
		}
		d.queued[rel] = true
		d.toRead = append(d.toRead, rel)
		n++
	})
	if err != nil {
		d.log.Error("scanning the queue", "error", err)
	}
	if n > 0 {
		d.log.Debug("scan found files", "new", n)
	}
}

func (d *Daemon) enqueueRead(rel string) {
	if strings.HasPrefix(rel, "/") || strings.Contains(rel, "..") {
		d.log.Warn("notify names a path outside the queue", "path", rel)
		return
	}
	if !d.queued[rel] {
		d.queued[rel] = true
		d.toRead = append(d.toRead, rel)
	}
}

func (d *Daemon) readLater(now time.Time) {
	keep := d.later[:0]
	for _, l := range d.later {
		if now.Before(l.at) {
			keep = append(keep, l)
			continue
		}
		d.enqueueRead(l.rel)
	}
	d.later = keep
}

// readSome reads up to readBatch queued control files into the core.
func (d *Daemon) readSome() {
	for n := 0; n < readBatch && len(d.toRead) > 0; n++ {
		rel := d.toRead[0]
		d.toRead = d.toRead[1:]
		delete(d.queued, rel)
		d.read(rel)
	}
	if len(d.toRead) == 0 {
		d.toRead = nil
	}
	d.apply()
}

// read reads one control file and hands it to the core. A malformed file is
// moved aside with the reason; nothing is deleted.
func (d *Daemon) read(rel string) {
	if inum, ok := inumOf(rel); ok && d.core.Has(inum) {
		return
	}
	f, err := d.spool.Read(rel)
	switch {
	case err == nil:
	case errors.Is(err, ctlfile.ErrNotFound):
		return
	case errors.Is(err, ctlfile.ErrLiveLock):
		d.log.Debug("control file locked by a live agent; reading it later", "msg", rel)
		d.later = append(d.later, delayed{rel: rel, at: d.now().Add(liveLockDelay)})
		return
	default:
		d.log.Error("bad control file moved aside", "msg", rel, "error", err)
		if qerr := d.spool.Quarantine(rel, err); qerr != nil {
			d.log.Error("cannot quarantine control file", "msg", rel, "error", qerr)
		}
		return
	}
	if len(f.Turn) > 0 && f.ID == "" {
		d.turn(rel, f)
		return
	}
	a := arrival(rel, f)
	if len(a.Groups) == 0 {
		// Nothing pending: a message completed before a restart.
		d.log.Info("complete", "msg", rel)
		d.finish(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum, Diags: hasPendingDiags(f), Bounce: f.IsBounce()})
		return
	}
	if err := d.core.Arrive(d.now(), a); err != nil && !errors.Is(err, core.ErrDuplicate) {
		d.log.Error("cannot schedule message", "msg", rel, "error", err)
	}
}

// turn handles a ZMailer ETRN request file ("T domain ip").
func (d *Daemon) turn(rel string, f *ctlfile.File) {
	for _, t := range f.Turn {
		d.log.Info("etrn request file", "msg", rel, "domain", t.Domain, "client", t.IP)
	}
	if err := d.spool.Remove(rel, ""); err != nil {
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
	a := core.Arrival{Inum: f.Inum, Path: rel, ID: f.ID, Arrival: f.Arrival, Bounce: f.IsBounce()}
	for _, g := range f.Groups() {
		cg := core.Group{Channel: g.Channel, Host: g.Host, Rcpts: make([]vertex.Rcpt, len(g.Rcpts))}
		for i, ri := range g.Rcpts {
			r := &f.Rcpts[ri]
			cg.Rcpts[i] = vertex.Rcpt{Offset: r.Offset, User: r.User, Notify: uint8(r.Notify)}
		}
		a.Groups = append(a.Groups, cg)
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

package daemon

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"zsched/config"
	"zsched/config/preflight"
	"zsched/control"
)

// A reload (SIGHUP, or RELOAD on the control socket) has two halves. The
// file is read and the host checked for it (package preflight: stat calls,
// the password and auth files) on a goroutine of its own, since the loop
// must never wait on a file: a configuration on a hung NFS mount, or a FIFO
// put in its place, would otherwise stop every delivery and every operator
// command with it. The loop then applies what was read, at once and
// without I/O but the statelog's reopening. One read runs at a time; a
// reload asked for meanwhile reads the file again after it, since the file
// may have changed after the first read began, and all the asks waiting
// then share that one read.

// loaded is a configuration file as read and checked beside the loop.
type loaded struct {
	cfg *config.Config
	err error // the file did not load
	res preflight.Result
}

// reloadAsk is one ask for a reload: who asked (log keys), and the
// control request to answer, if it came by the socket.
type reloadAsk struct {
	by  []any
	req *control.Request
}

// reloads is the reload under way; only Run's goroutine touches it.
type reloads struct {
	reading bool        // a read is under way: its result comes on operator.loaded
	asks    []reloadAsk // what the read under way answers
	next    []reloadAsk // asked while reading: the next read answers them
}

// readConfig reads file and checks the host for it. Beside the loop.
func readConfig(file string) loaded {
	if file == "" {
		return loaded{err: errors.New("daemon: reload: the configuration was not loaded from a file")}
	}
	cfg, err := config.Load(file)
	if err != nil {
		return loaded{err: err}
	}
	return loaded{cfg: cfg, res: preflight.Check(cfg, preflight.Options{})}
}

// askReload starts a reload for a, or has the next one answer it when a
// read is under way. On the loop.
func (d *Daemon) askReload(a reloadAsk) {
	r := &d.operator.reloads
	if r.reading {
		r.next = append(r.next, a)
		return
	}
	r.reading, r.asks = true, []reloadAsk{a}
	d.sdNotify(reloading())
	file := d.cfg.File
	go func() {
		asHelper()
		d.operator.loaded <- readConfig(file)
	}()
}

// reloaded applies a read configuration, answers those who asked for it,
// and starts the read the asks made meanwhile want. On the loop.
func (d *Daemon) reloaded(l loaded) {
	r := &d.operator.reloads
	asks := r.asks
	r.reading, r.asks = false, nil
	err := d.applyReload(l, asks[0].by...)
	for _, a := range asks {
		if a.req == nil {
			continue
		}
		if err != nil {
			a.req.Respond(control.Fail(err.Error()))
		} else {
			a.req.Respond(control.OK(fmt.Sprintf("reloaded %s: %d clauses", d.cfg.File, len(d.cfg.Clauses))))
		}
	}
	if next := r.next; len(next) > 0 {
		r.next = nil
		d.askReload(next[0])
		r.asks = append(r.asks, next[1:]...)
	}
}

// reload re-reads the configuration for by and applies it, all at once:
// for tests, which drive the daemon without its loop.
func (d *Daemon) reload(by ...any) error {
	d.sdNotify(reloading())
	return d.applyReload(readConfig(d.cfg.File), by...)
}

// applyReload applies a read configuration for by and logs the outcome in
// one line either way. A file that does not load, that the host cannot
// run (package preflight) or that the core refuses leaves the running
// configuration as it was; settings that need a restart keep their
// running values, with a warning. systemd hears READY=1 after
// (RELOADING=1 went before the read), as Type=notify wants.
func (d *Daemon) applyReload(l loaded, by ...any) error {
	defer d.reopenStateLog() // for logrotate, whatever becomes of the file
	defer d.sdNotify("READY=1")
	if err := d.reconfigure(l); err != nil {
		// One event, one line: a file with several errors is still one.
		d.log.Error("reload refused; the running configuration stays",
			append(by, "error", strings.ReplaceAll(err.Error(), "\n", "; "))...)
		return err
	}
	d.log.Info("configuration reloaded", append(by, "file", d.cfg.File, "clauses", len(d.cfg.Clauses))...)
	return nil
}

// reloading is the RELOADING=1 notification with the monotonic time
// systemd 253 and later want beside it.
func reloading() string {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return "RELOADING=1"
	}
	return fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", ts.Nano()/1000)
}

func (d *Daemon) reconfigure(l loaded) error {
	if l.err != nil {
		return l.err
	}
	cfg := l.cfg
	old := d.cfg.Scheduler
	restart := config.RestartKeys()
	for _, k := range restart {
		now, _ := cfg.Scheduler.Value(k.Key)
		was, _ := old.Value(k.Key)
		if k.Fixed && now != was {
			return fmt.Errorf("daemon: reload: %s changed (%s → %s); restart the scheduler for that", k.Key, was, now)
		}
	}
	if err := l.res.Err(); err != nil {
		return err
	}
	for _, w := range l.res.Warnings {
		d.log.Warn("reload: check", "problem", w.Error())
	}
	for _, k := range restart {
		now, _ := cfg.Scheduler.Value(k.Key)
		was, _ := old.Value(k.Key)
		if !k.Fixed && now != was {
			d.log.Warn("reload: setting needs a restart; keeping the running value", "key", k.Key, "running", was, "file", now)
			cfg.Scheduler.Keep(k.Key, &old)
		}
	}
	if a, b := d.cfg.Cluster, cfg.Cluster; (a == nil) != (b == nil) || a != nil && *a != *b {
		// The node's link to the store and its leases are the running
		// [cluster]'s: a new one needs a restart.
		d.log.Warn("reload: [cluster] changed; keeping the running one until a restart")
	}
	cfg.Cluster = d.cfg.Cluster
	if err := d.core.Reconfigure(d.now(), cfg); err != nil {
		return err
	}
	d.cfg = cfg
	d.in.gate.Limits = limits(&cfg.Scheduler)
	if lvl := hclog.LevelFromString(cfg.Scheduler.LogLevel); lvl != hclog.NoLevel {
		d.log.SetLevel(lvl)
	}
	d.apply()
	return nil
}

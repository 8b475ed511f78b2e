package daemon

import (
	"maps"
	"slices"
	"time"
)

// The spool's debris, swept beside the loop at start and every
// debrisEvery after (ctlfile.Spool.SweepTemp, SweepBodies):
//
//   - temporary files an enqueue killed midway left (queue/.new-*,
//     transport/.N.tmp), once older than debrisAge;
//   - bodies without their control file — a router that died between the
//     two, a removal a machine crash interrupted, an operator's rm — once
//     debrisAge has passed since they were written into queue/ (their
//     status-change time): a router writes the body first and the control
//     file a moment later, so a younger one may be a message on its way.
//     (A removal a stop or SIGKILL interrupted is finished at once, from
//     the remover's logs: Run, remove.go.)
//
// debrisAge and debrisEvery are constants: no router takes an hour
// between a message's two files, and debris costs only disk space.
type debris struct {
	at   time.Time     // when the next sweep is due (zero before Run)
	done chan struct{} // closed when the last sweep started has ended
}

const (
	debrisAge   = time.Hour
	debrisEvery = 30 * time.Minute
)

// startSweep starts a sweep unless one runs.
func (d *Daemon) startSweep(now time.Time) {
	if d.debris.done != nil {
		select {
		case <-d.debris.done:
		default:
			d.debris.at = now.Add(time.Minute) // still at it: look again
			return
		}
	}
	done := make(chan struct{})
	d.debris.done = done
	d.debris.at = now.Add(debrisEvery)
	go d.sweep(now, done)
}

// sweepDue starts the periodic sweep when it is due (the loop's timer).
func (d *Daemon) sweepDue(now time.Time) {
	if !d.debris.at.IsZero() && !now.Before(d.debris.at) {
		d.startSweep(now)
	}
}

// waitSweep waits for the sweep that runs, if any.
func (d *Daemon) waitSweep() {
	if d.debris.done != nil {
		<-d.debris.done
	}
}

// sweep is one sweep, as of now. Files that cannot be removed are logged
// once, then hourly (rateLog): they fail again at every sweep.
func (d *Daemon) sweep(now time.Time, done chan<- struct{}) {
	asHelper()
	defer close(done)
	cutoff := now.Add(-debrisAge)
	removed, err := d.spool.SweepTemp(cutoff)
	for _, p := range removed {
		d.log.Info("removed a temporary file left by an interrupted enqueue", "file", p)
	}
	if err != nil {
		d.log.Warn("sweeping temporary files", "error", err)
	}
	bodies, failed, err := d.spool.SweepBodies(cutoff)
	for _, p := range bodies {
		d.log.Info("removed a message body no control file refers to", "file", p)
	}
	for _, p := range slices.Sorted(maps.Keys(failed)) {
		if ok, n := d.noise.allow("sweep:"+p, now); ok {
			d.log.Error("cannot remove a message body no control file refers to", "file", p, "error", failed[p], "times", n+1)
		}
	}
	if err != nil {
		d.log.Warn("sweeping message bodies", "error", err)
	}
}

package daemon

import (
	"context"
	"runtime/pprof"
	"time"

	"golang.org/x/sys/unix"
)

// Profiler labels. Run's goroutine, which holds the core and takes every
// decision, carries zsched=loop; the goroutines beside it (control file
// readers, removers, sweeps, the outcome logger, the agents' readers and
// writers) carry zsched=helper. A CPU profile of a drain then tells the
// loop's share of the scheduler's CPU (`go tool pprof -tags`, or
// `-tagfocus zsched=loop`), which bounds the rate the loop alone sustains
// however many cores the rest gets. Goroutines inherit their creator's
// labels, so every goroutine the loop starts sets its own first.
var (
	loopLabels   = pprof.WithLabels(context.Background(), pprof.Labels("zsched", "loop"))
	helperLabels = pprof.WithLabels(context.Background(), pprof.Labels("zsched", "helper"))
)

// asHelper labels the calling goroutine as one beside the loop; the first
// call of every goroutine the daemon starts.
func asHelper() { pprof.SetGoroutineLabels(helperLabels) }

// asLoop labels the calling goroutine as the loop.
func asLoop() { pprof.SetGoroutineLabels(loopLabels) }

// offLoop calls start, which starts goroutines in another package (an
// agent's), with the helper label, so that they inherit it rather than the
// loop's; the caller is labelled the loop again afterwards.
func offLoop(start func()) {
	asHelper()
	defer asLoop()
	start()
}

// loopClock counts the CPU time of Run's thread (Options.LoopThread: the
// goroutine is locked to it) outside the select where the loop waits: the
// loop's own work. The wait itself is left out, because on a locked thread
// it is the runtime's hand-off of the processor to and from the thread, a
// cost the unlocked loop of production does not have. Two clock reads a
// turn, and none when off.
type loopClock struct {
	on    bool
	begun time.Duration // thread CPU at start
	slept time.Duration // thread CPU when the current wait began
	idle  time.Duration // thread CPU spent in waits
	busy  time.Duration // the result, set by stop
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (c *loopClock) start() { c.on, c.begun = true, threadCPU() }

func (c *loopClock) stop() {
	if c.on {
		c.busy = threadCPU() - c.begun - c.idle
		c.on = false
	}
}

// sleep is called just before the loop's select, woke first in each of its
// cases.
func (c *loopClock) sleep() {
	if c.on {
		c.slept = threadCPU()
	}
}

func (c *loopClock) woke() {
	if c.on {
		c.idle += threadCPU() - c.slept
	}
}

package daemon

import (
	"context"
	"runtime/pprof"
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

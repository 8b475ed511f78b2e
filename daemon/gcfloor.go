package daemon

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
)

// The collector's pace (Options.GCHeadroom). Go collects when the heap
// has grown by GOGC percent (100) of what the last collection left live.
// The scheduler's live heap is small and bounded by the active limits
// (tens of MiB at the defaults: the core and the batches being read),
// while what it allocates is proportional to the mail that passes (each
// file read and parsed, each outcome line): at 20 MiB live it collected
// every 20 MiB of allocation, some sixteen times in bench's 100 000
// recipients, a tenth of the scheduler's CPU. gcFloor lets the heap grow
// by at least a fixed headroom between collections: GOGC is raised to
// headroom/live after each collection while that is more than the base
// (the GOGC the process started with), and left at the base once the live
// heap exceeds the headroom, so a large core is collected exactly as
// before. The cost is at most headroom more peak memory; GOMEMLIMIT, if
// set, still bounds the heap (the runtime collects harder near it).

// DefaultGCHeadroom is the headroom the scheduler's run command gives
// (unless GOGC is set in its environment: then the operator's pace
// stands).
const DefaultGCHeadroom = 64 << 20

// minHeap is the runtime's least heap goal at GOGC=100.
const minHeap = 4 << 20

// gcFloor keeps the headroom after each collection until stopped.
type gcFloor struct {
	headroom uint64
	base     int // the GOGC the process had
	sample   []rtmetrics.Sample

	mu      sync.Mutex
	stopped bool
	percent int // last set
}

// gcSentinel is a heap object whose cleanup runs after each collection
// that finds it unreachable: the next one is made then.
type gcSentinel struct{ _ [16]byte }

// startGCFloor starts keeping headroom bytes; nil when the collector is
// off (GOGC=off) or headroom is 0.
func startGCFloor(headroom uint64) *gcFloor {
	if headroom == 0 {
		return nil
	}
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	if base <= 0 {
		return nil
	}
	g := &gcFloor{headroom: headroom, base: base, percent: base,
		sample: []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	g.tune()
	g.arm()
	return g
}

// arm makes the sentinel the next collection finds.
func (g *gcFloor) arm() {
	runtime.AddCleanup(&gcSentinel{}, func(g *gcFloor) {
		if g.tune() {
			g.arm()
		}
	}, g)
}

// tune sets GOGC from the live heap the last collection left; false once
// stopped.
func (g *gcFloor) tune() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	rtmetrics.Read(g.sample)
	live := uint64(0)
	if g.sample[0].Value.Kind() == rtmetrics.KindUint64 {
		live = g.sample[0].Value.Uint64()
	}
	// The runtime's least heap goal is 4 MiB times GOGC/100: a live heap
	// below that counts as 4 MiB, lest a tiny one (or none yet, at start)
	// make the goal far more than the headroom.
	live = max(live, minHeap)
	p := max(g.base, int(g.headroom*100/live))
	if p != g.percent {
		debug.SetGCPercent(p)
		g.percent = p
	}
	return true
}

// stop gives the process its GOGC back.
func (g *gcFloor) stop() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	debug.SetGCPercent(g.base)
}

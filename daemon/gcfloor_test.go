package daemon

import (
	"runtime/debug"
	"testing"
)

// gcPercent is the process's GOGC now.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestGCFloorRaisesAndRestores: with a headroom, Run's collector waits for
// at least that much growth — GOGC is raised to headroom over the live
// heap (a small one counting as the runtime's 4 MiB) — and the process's
// own GOGC is back when Run returns; with the collector off, nothing is
// touched.
func TestGCFloorRaisesAndRestores(t *testing.T) {
	agents := bins.AgentsFor(t)
	defer debug.SetGCPercent(gcPercent())
	debug.SetGCPercent(100)
	d := intakeDaemon(t, agents["sink"], 100, 100, 20, 2, true)
	d.opt.GCHeadroom = 64 << 20
	during := 0
	d.opt.OnDrained = func() { during = gcPercent() }
	if err := d.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The test binary's live heap is far below 64 MiB: GOGC is at least
	// 64 MiB over the live heap, at most 64 MiB over 4 MiB.
	if during <= 100 || during > 1600 {
		t.Errorf("GOGC during Run %d; want above 100, at most 1600", during)
	}
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC after Run %d; want the process's 100 back", p)
	}

	debug.SetGCPercent(-1)
	if g := startGCFloor(64 << 20); g != nil {
		g.stop()
		t.Error("a floor was kept with the collector off")
	}
	if p := gcPercent(); p != -1 {
		t.Errorf("GOGC %d after a floor with the collector off; want -1 (off) untouched", p)
	}
	debug.SetGCPercent(100)
	if g := startGCFloor(0); g != nil {
		t.Error("a floor was kept with no headroom")
	}
}

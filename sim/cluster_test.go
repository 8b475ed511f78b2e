package sim

import (
	"fmt"
	"testing"
	"time"

	"zsched/window"
)

// TestClusterSharesOneWindow: two nodes over one Board share a window of
// 3 (maxthr): the first node's agents hold the 3 sessions while its
// queue lasts, the second is denied and starts the moment they are
// released (the Free event its book holds is handed to its core), not at
// its denial's retry time; never more than 3 sessions run at once across
// both nodes.
func TestClusterSharesOneWindow(t *testing.T) {
	cfg := testConfig(t, "[defaults]\nslow_start = false # the window of 3 from the start")
	ns := []*Sim{New(cfg, slow, 1), New(cfg, slow, 2)}
	c := NewCluster(ns)
	board := window.NewBoard(30 * time.Second)
	c.Share([]window.Book{board.Node("mx1"), board.Node("mx2")}, 10*time.Second)
	for _, s := range ns {
		s.Check = true
		for i := range 6 {
			s.Enqueue(fmt.Sprintf("smtp/lim.test/u%d", i))
		}
	}
	peak := 0
	for len(ns[0].Completed)+len(ns[1].Completed) < 12 {
		if !c.Step() {
			t.Fatal("the cluster stopped with messages left")
		}
		if err := c.Err(); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, ns[0].Busy["lim.test"]+ns[1].Busy["lim.test"])
	}
	if peak > 3 {
		t.Errorf("%d sessions at once across the nodes, want at most the shared window of 3", peak)
	}
	// 6 messages of 10 s on 3 sessions, twice.
	if d := c.Now.Sub(Epoch); d != 40*time.Second {
		t.Errorf("drained in %v, want 40s: the second node starts when the first releases its sessions", d)
	}
	if ns[1].JobLog[0].At.Sub(Epoch) != 20*time.Second {
		t.Errorf("the second node's first job at %v, want 20s", ns[1].JobLog[0].At.Sub(Epoch))
	}
}

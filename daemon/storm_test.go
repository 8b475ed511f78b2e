package daemon

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/ctlfile"
	"zsched/testagents"
)

var stormHosts = flag.Int("storm.hosts", 1, "fork-storm figure: destinations the 300 messages go to")

var stormFor = flag.Duration("storm.for", 0, "fork-storm figure (issue 16): run a scheduler with command [\"/bin/false\"] over 300 queued messages this long, on the real clock, and print the agents started and the lines logged")

// lineCounter counts log lines.
type lineCounter struct{ n atomic.Int64 }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(strings.Count(string(p), "\n")))
	return len(p), nil
}

// TestStormFigure measures issue 16's fork storm: a daemon at the default
// settings and log level (info), command = ["/bin/false"], 300 messages to
// one destination (-storm.hosts: more), run for -storm.for. It is a figure, not a check: the
// regression tests are TestBrokenTransport* (containment_test.go).
//
//	go test ./daemon -run StormFigure -storm.for 30s -v
func TestStormFigure(t *testing.T) {
	if *stormFor == 0 {
		t.Skip("a figure, run on demand: -storm.for 30s")
	}
	dir := t.TempDir()
	po := filepath.Join(dir, "po")
	testagents.LeakCheck(t, filepath.Join(po, "transport"))
	file := filepath.Join(dir, "scheduler.toml")
	text := fmt.Sprintf("[scheduler]\npostoffice = %q\n\n[[clause]]\nselect = \"smtp/*\"\ncommand = [\"/bin/false\"]\n", po)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	sp := &ctlfile.Spool{Root: cfg.Scheduler.Postoffice, NoSync: true}
	if err := sp.Init(); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		m := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: t\n"), Body: []byte("b\n"),
			Rcpts: []ctlfile.Address{{Channel: "smtp", Host: fmt.Sprintf("d%d.test", i%max(*stormHosts, 1)), User: fmt.Sprintf("u%d@x", i)}}}
		if _, err := sp.Enqueue(m); err != nil {
			t.Fatal(err)
		}
	}
	var lines lineCounter
	d, err := New(cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &lines}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *stormFor)
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	th, _ := d.core.Thread(time.Now(), "smtp", "d0.test")
	c := d.core.Counters()
	t.Logf("%s, 300 messages to %d destinations, command /bin/false: %d agents started, %d log lines, %d throttles, window of d0.test %d (%s)",
		*stormFor, *stormHosts, c.Spawned, lines.n.Load(), c.Throttles, th.Window, th.State)
}

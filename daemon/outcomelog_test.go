package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/agent"
	"zsched/config"
	"zsched/core"
)

// lockedBuffer is a log output the loop's helpers may write concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOutcomeLogOrderAndSync: the writer beside the loop logs every
// outcome handed to it, in the order given, across batches, each with the
// queue id and pid it was given; sync returns only once all of them are
// out.
func TestOutcomeLogOrderAndSync(t *testing.T) {
	var buf lockedBuffer
	l := newOutcomeLog(hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &buf}))
	defer l.close()
	const n = 3*outcomeBatch + 7
	for i := range n {
		l.add(core.Outcome{Path: fmt.Sprintf("A/%d", i), Offset: int64(i), Status: "ok", Channel: "smtp", Host: "h"},
			fmt.Sprintf("Q%d", i), 100+i%3, nil)
		if i%100 == 0 {
			l.flush()
		}
	}
	l.sync()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines after sync, want %d", len(lines), n)
	}
	for i, line := range lines {
		if !strings.Contains(line, fmt.Sprintf("msg=Q%d rcpt=%d ", i, i)) || !strings.Contains(line, fmt.Sprintf("ta=%d ", 100+i%3)) {
			t.Fatalf("line %d is %q", i, line)
		}
	}
}

// TestDrainLogsEveryOutcomeBeforeSummary drains a queue with sink agents
// through Run: every delivered recipient has its outcome line, and all of
// them come before the "queue drained" summary that scripts wait for.
// With LoopThread the loop's CPU is counted.
func TestDrainLogsEveryOutcomeBeforeSummary(t *testing.T) {
	agents := bins.AgentsFor(t)
	d := intakeDaemon(t, agents["sink"], 1000, 1000, 100, 4, true)
	var buf lockedBuffer
	d.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &buf})
	d.opt.LoopThread = true
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the queue did not drain in time")
	}
	out := buf.String()
	summary := strings.Index(out, "queue drained")
	if summary < 0 {
		t.Fatal("no summary line")
	}
	delivered := d.core.Counters().Delivered
	if delivered != 250 {
		t.Fatalf("delivered %d of 250", delivered)
	}
	if got := strings.Count(out[:summary], "outcome: msg="); int64(got) != delivered {
		t.Errorf("%d outcome lines before the summary, %d after; want %d before", got, strings.Count(out[summary:], "outcome: msg="), delivered)
	}
	if d.LoopCPU() <= 0 {
		t.Errorf("loop CPU %v with LoopThread", d.LoopCPU())
	}
}

// gate is a log output that holds the outcome lines until it is opened.
type gate struct {
	open chan struct{}
	lockedBuffer
}

func (g *gate) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("outcome:")) {
		<-g.open
	}
	return g.lockedBuffer.Write(p)
}

// TestOutcomeLogReopenStateLog: outcomes handed to the writer before a
// reload reach the statelog that was open when they were logged, although
// the writer is still busy when the reload reopens the file (logrotate has
// moved it): the reload waits for them rather than close the file under
// the writer.
func TestOutcomeLogReopenStateLog(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Config{}
	cfg.Scheduler.StateLog = filepath.Join(dir, "state.log")
	g := &gate{open: make(chan struct{})}
	// The daemon's own lines go elsewhere: hclog holds a logger's lock
	// while it writes.
	var own lockedBuffer
	d := &Daemon{cfg: cfg, log: hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &own})}
	if err := d.openStateLog(); err != nil {
		t.Fatal(err)
	}
	d.outcomes = newOutcomeLog(hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: g}))
	const n = 20
	for i := range n {
		d.outcomes.add(core.Outcome{Path: "A/1", Offset: int64(i), Status: "ok", Channel: "smtp", Host: "h"}, "Q1", 7, d.statelog)
	}
	d.outcomes.flush()
	waitFor(t, "the writer to take the batch", func() bool { return len(d.outcomes.batches) == 0 })
	// The writer now waits on the main log, within the batch.
	if err := os.Rename(cfg.Scheduler.StateLog, cfg.Scheduler.StateLog+".1"); err != nil {
		t.Fatal(err)
	}
	reopened := make(chan struct{})
	go func() {
		d.reopenStateLog()
		close(reopened)
	}()
	// Open the log once the reload waits for the writer (its sync is
	// queued) or, wrongly, has reopened the statelog without waiting.
	waitFor(t, "the reload", func() bool {
		select {
		case <-reopened:
			return true
		default:
			return len(d.outcomes.batches) > 0
		}
	})
	close(g.open)
	<-reopened
	d.outcomes.close()
	d.statelog.close()
	old, err := os.ReadFile(cfg.Scheduler.StateLog + ".1")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(old), "outcome: msg=Q1"); got != n {
		t.Errorf("%d outcome lines in the rotated statelog, want %d:\n%s", got, n, old)
	}
}

// waitFor polls cond, failing the test if it does not hold within a
// generous deadline (a guard, not a synchronisation).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// checkingLogger stands for cmd/scheduler's logger: it counts the lines
// that went through its checks and gives the logger beneath.
type checkingLogger struct {
	hclog.Logger
	checked *int
}

func (l checkingLogger) Info(msg string, args ...any) {
	*l.checked++
	l.Logger.Info(msg, args...)
}

func (l checkingLogger) Unchecked() hclog.Logger { return l.Logger }

// TestOutcomeLineUnchecked: an outcome line whose strings are each one
// line skips the logger's per-value checks (it goes to the logger beneath,
// the same line); one whose text spans lines goes through them.
func TestOutcomeLineUnchecked(t *testing.T) {
	var buf bytes.Buffer
	checked := 0
	log := checkingLogger{hclog.New(&hclog.LoggerOptions{Name: "zsched", Level: hclog.Info, Output: &buf}), &checked}
	d := &Daemon{cfg: &config.Config{}, log: log, procs: map[int]*agent.Proc{}}
	m, err := d.startMetrics()
	if err != nil {
		t.Fatal(err)
	}
	d.operator.metrics = m
	o := core.Outcome{Path: "A/B/5308609", Offset: 150, User: "carol@example.net", Channel: "smtp",
		Host: "example.net", Status: "ok3", Attempts: 1, Text: "delivered to the sink"}
	d.logOutcome(o)
	if checked != 0 {
		t.Errorf("a line of one-line values went through the checks")
	}
	if !strings.Contains(buf.String(), `zsched: outcome: msg=A/B/5308609 rcpt=150 to=carol@example.net`) {
		t.Errorf("the line: %q", buf.String())
	}
	o.Text = "agent died:\nexit status 1"
	d.logOutcome(o)
	if checked != 1 {
		t.Errorf("a text spanning lines went through the checks %d times, want 1", checked)
	}
}

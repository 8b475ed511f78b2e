package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

// plainOutLogger stands for cmd/scheduler's run logger: a plain-format
// hclog logger without times whose output a caller may write lines to.
type plainOutLogger struct {
	hclog.Logger
	out io.Writer
}

func (l plainOutLogger) Unchecked() hclog.Logger { return l.Logger }
func (l plainOutLogger) PlainOutput() io.Writer  { return l.out }

// TestOutcomeLinePlain: the outcome line the writer formats itself for a
// logger with a plain output (writePlain) is byte for byte the one hclog
// writes, for values that need no quotes, quotes, an empty string, and
// those it leaves to hclog (a quote, a tab, a byte past ASCII, DEL); only
// those go through hclog, and a logger above info writes nothing.
func TestOutcomeLinePlain(t *testing.T) {
	texts := []string{"delivered to the sink", "", "250-2.0.0", "a=b,c;d", "quoted \"word\"", "tab\there",
		"café", "del\x7f", "~!#$%&'()*+,", "x"}
	users := []string{"carol@example.net", "o'brien+tag@example.net", "\"a b\"@example.net", "Ünïcode@example.net"}
	var outcomes []core.Outcome
	for i, text := range texts {
		outcomes = append(outcomes, core.Outcome{Offset: int64(100 + i), User: users[0], Channel: "smtp",
			Host: "d7.test", Status: []string{"ok3", "deferred", "error"}[i%3], Delay: time.Duration(i) * 1234567 * time.Microsecond,
			Attempts: i, Text: text})
	}
	for i, user := range users[1:] {
		outcomes = append(outcomes, core.Outcome{Offset: int64(200 + i), User: user, Channel: "local",
			Host: "d8.test", Status: "ok", Text: "x"})
	}
	outcomes[1].Next = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, name := range []string{"zsched", ""} {
		var want, got, hc bytes.Buffer
		ref := newOutcomeLine()
		refLog := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: &want, DisableTime: true})
		// The plain line's logger: hclog's lines to hc, its own to got.
		hlog := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: &hc, DisableTime: true})
		plog := plainOutLogger{hlog, &got}
		line := newOutcomeLine()
		line.usePlain(plog)
		for i := range outcomes {
			ref.write(refLog, nil, nil, &outcomes[i], "5308609.3kq7m2c", 4242+i%2)
			line.write(plog, plog.Logger, nil, &outcomes[i], "5308609.3kq7m2c", 4242+i%2)
		}
		// Put the lines in order: each went to one of the two outputs.
		gotLines := strings.SplitAfter(got.String(), "\n")
		hcLines := strings.SplitAfter(hc.String(), "\n")
		var merged strings.Builder
		for _, w := range strings.SplitAfter(want.String(), "\n") {
			switch {
			case len(gotLines) > 0 && gotLines[0] == w:
				merged.WriteString(gotLines[0])
				gotLines = gotLines[1:]
			case len(hcLines) > 0 && hcLines[0] == w:
				merged.WriteString(hcLines[0])
				hcLines = hcLines[1:]
			}
		}
		if merged.String() != want.String() {
			t.Errorf("name %q: lines:\n%s%s\nwant:\n%s", name, got.String(), hc.String(), want.String())
		}
		if n := strings.Count(got.String(), "\n"); n != 7 {
			t.Errorf("name %q: %d lines formatted here, want 7 (six left to hclog):\n%s", name, n, got.String())
		}
		hlog.SetLevel(hclog.Warn)
		got.Reset()
		hc.Reset()
		line.write(plog, plog.Logger, nil, &outcomes[0], "5308609.3kq7m2c", 4242)
		if got.Len()+hc.Len() != 0 {
			t.Errorf("name %q: a line at warn: %q %q", name, got.String(), hc.String())
		}
	}
}

// BenchmarkOutcomeLine is the outcome writer's work for one line: hclog's
// formatting (a logger without a plain output), and the line formatted
// here (plain), each into a buffer that discards it.
//
//	go test -run '^$' -bench OutcomeLine ./daemon
func BenchmarkOutcomeLine(b *testing.B) {
	o := core.Outcome{Path: "A/B/5308609", Offset: 150, User: "carol@example.net", Channel: "smtp",
		Host: "example.net", Status: "ok3", Attempts: 1, Delay: 362 * time.Millisecond, Text: "delivered to the sink"}
	for _, plain := range []bool{false, true} {
		b.Run(map[bool]string{false: "hclog", true: "plain"}[plain], func(b *testing.B) {
			hlog := hclog.New(&hclog.LoggerOptions{Name: "zsched", Level: hclog.Info, Output: io.Discard, DisableTime: true})
			var log hclog.Logger = checkingLogger{hlog, new(int)}
			if plain {
				log = plainOutLogger{hlog, io.Discard}
			}
			line := newOutcomeLine()
			line.usePlain(log)
			unchecked := uncheckedOf(log)
			b.ReportAllocs()
			for b.Loop() {
				line.write(log, unchecked, nil, &o, "5308609.3kq7m2c", 4242)
			}
		})
	}
}

package daemon

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/core"
	"zsched/testagents"
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
// pid it was given; sync returns only once all of them are out.
func TestOutcomeLogOrderAndSync(t *testing.T) {
	var buf lockedBuffer
	l := newOutcomeLog(hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: &buf}))
	defer l.close()
	const n = 3*outcomeBatch + 7
	for i := range n {
		l.add(core.Outcome{Path: fmt.Sprintf("A/%d", i), Offset: int64(i), Status: "ok", Channel: "smtp", Host: "h"}, 100+i%3)
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
		if !strings.Contains(line, fmt.Sprintf("msg=A/%d rcpt=%d ", i, i)) || !strings.Contains(line, fmt.Sprintf("ta=%d ", 100+i%3)) {
			t.Fatalf("line %d is %q", i, line)
		}
	}
}

// TestDrainLogsEveryOutcomeBeforeSummary drains a queue with sink agents
// through Run: every delivered recipient has its outcome line, and all of
// them come before the "queue drained" summary that scripts wait for.
// With LoopThread the loop's CPU is counted.
func TestDrainLogsEveryOutcomeBeforeSummary(t *testing.T) {
	agents, err := testagents.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
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

package daemon

import (
	"bytes"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/agent"
	"zsched/config"
	"zsched/core"
)

// outcomeDaemon is a daemon with just what logOutcome uses: the production
// logger set-up (plain format, Info) writing to buf, and metrics.
func outcomeDaemon(tb testing.TB, buf *bytes.Buffer) *Daemon {
	d := &Daemon{
		cfg:   &config.Config{},
		log:   hclog.New(&hclog.LoggerOptions{Name: "zsched", Level: hclog.Info, Output: buf}),
		procs: map[int]*agent.Proc{},
	}
	m, err := d.startMetrics()
	if err != nil {
		tb.Fatal(err)
	}
	d.operator.metrics = m
	return d
}

// TestLogOutcomeLine checks the outcome line, key by key, over a sequence
// in which every value that logOutcome keeps from line to line changes, and
// changes back.
func TestLogOutcomeLine(t *testing.T) {
	var buf bytes.Buffer
	d := outcomeDaemon(t, &buf)
	next := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	os := []core.Outcome{
		{Path: "A/B/5308609", Offset: 150, User: "carol@example.net", Channel: "smtp", Host: "example.net", Status: "ok3",
			Delay: 362*time.Millisecond + 417*time.Microsecond, Attempts: 1, Text: "delivered to the sink"},
		{Path: "A/B/5308609", Offset: 190, User: "dave@example.org", Channel: "smtp", Host: "example.org", Status: "deferred",
			Delay: 2 * time.Second, Attempts: 2, Next: next, Text: "451 try later"},
		{Path: "C/D/77", Offset: 90, User: "root", Channel: "local", Host: "localhost", Status: "ok3",
			Delay: 0, Attempts: 300, Text: ""},
		{Path: "C/D/77", Offset: 400, User: "x y", Channel: "smtp", Host: "example.net", Status: "ok3",
			Delay: time.Minute, Attempts: 1, Text: "delivered to the sink"},
	}
	want := []string{
		`msg=A/B/5308609 rcpt=150 to=carol@example.net channel=smtp host=example.net ta=0 status=ok3 delay=362ms attempts=1 next="" text="delivered to the sink"`,
		`msg=A/B/5308609 rcpt=190 to=dave@example.org channel=smtp host=example.org ta=0 status=deferred delay=2s attempts=2 next=2026-03-04T05:06:07Z text="451 try later"`,
		`msg=C/D/77 rcpt=90 to=root channel=local host=localhost ta=0 status=ok3 delay=0s attempts=300 next="" text=""`,
		`msg=C/D/77 rcpt=400 to="x y" channel=smtp host=example.net ta=0 status=ok3 delay=1m0s attempts=1 next="" text="delivered to the sink"`,
	}
	for _, o := range os {
		d.logOutcome(o)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		_, got, ok := strings.Cut(l, " [INFO]  zsched: outcome: ")
		if !ok || got != want[i] {
			t.Errorf("line %d:\n got %s\nwant ... [INFO]  zsched: outcome: %s", i, l, want[i])
		}
	}
}

// BenchmarkLogOutcome is the per-recipient outcome line, in the drain
// benchmark's shape: every recipient its own message path, address, host,
// offset and delay; the channel, status and text (a new string from each
// agent line) the same.
func BenchmarkLogOutcome(b *testing.B) {
	var buf bytes.Buffer
	d := outcomeDaemon(b, &buf)
	os := make([]core.Outcome, 1000)
	for i := range os {
		n := strconv.Itoa(5308609 + i)
		os[i] = core.Outcome{
			Path: "A/B/" + n, Offset: int64(150 + 40*i), User: "u" + n + "@d" + n + ".test",
			Channel: "smtp", Host: "d" + n + ".test", Agent: 1, Status: "ok3",
			Delay: time.Duration(i) * 3 * time.Millisecond, Attempts: 1,
			Text: strings.Clone("delivered to the sink"),
		}
	}
	b.ReportAllocs()
	defer cpuPerOp(b)()
	i := 0
	for b.Loop() {
		d.logOutcome(os[i%len(os)])
		i++
		if buf.Len() > 1<<20 {
			buf.Reset()
		}
	}
}

// cpuPerOp reports the process's CPU time per op (GC included): on a
// shared machine wall time per op says more about the neighbours.
func cpuPerOp(b *testing.B) func() {
	before := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

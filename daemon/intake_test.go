package daemon

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
	"zsched/testagents"
)

// intakeDaemon writes a config with the given active limits and one smtp
// clause (command: the agent, or a program that is never started when
// agent is ""), queues msgs messages with 1 + i%maxRcpts recipients each,
// and returns a daemon on it.
func intakeDaemon(t testing.TB, agent string, msgLimit, rcptLimit, msgs, maxRcpts int, drain bool) *Daemon {
	t.Helper()
	dir := t.TempDir()
	if agent == "" {
		agent = "/bin/false"
	}
	cfg, err := config.Parse("test.toml", fmt.Appendf(nil, `[scheduler]
postoffice = %q
log_level = "warn"
message_active_limit = %d
recipient_active_limit = %d
scaninterval = "1h"
shutdown_timeout = "5s"

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp"]
maxring = 4
overfeed = 2
`, filepath.Join(dir, "po"), msgLimit, rcptLimit, agent))
	if err != nil {
		t.Fatal(err)
	}
	spool := &ctlfile.Spool{Root: cfg.Scheduler.Postoffice, NoSync: true}
	if err := spool.Init(); err != nil {
		t.Fatal(err)
	}
	for i := range msgs {
		m := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: t\n"), Body: []byte("b\n")}
		for r := range 1 + i%maxRcpts {
			host := fmt.Sprintf("d%d.test", (i+r)%5)
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: host, User: fmt.Sprintf("u%d.%d@%s", i, r, host)})
		}
		if _, err := spool.Enqueue(m); err != nil {
			t.Fatal(err)
		}
	}
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})
	d, err := New(cfg, log, Options{Drain: drain})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// TestIntakeBoundsCoreAndDrains drains a queue far larger than the active
// limits and the name FIFO with real sink agents, checking after every
// intake step that the core never holds more than the limits allow (one
// message may overshoot the recipient limit by less than its own size),
// that the recipient count never undercounts what the core holds, that the
// FIFO stays bounded, and that delivery began while the first scan pass was
// still under way.
func TestIntakeBoundsCoreAndDrains(t *testing.T) {
	agents, err := testagents.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const msgLimit, rcptLimit, msgs, maxRcpts = 9, 20, 150, 4
	d := intakeDaemon(t, agents["sink"], msgLimit, rcptLimit, msgs, maxRcpts, true)
	d.in.max = 16
	var maxMsgs, maxRcptsInCore, maxPending, turns int
	deliveredDuringScan := false
	var failed error
	d.in.onStep = func() {
		turns++
		now := d.now()
		inCore := d.core.Gauges(now, 0).Recipients
		maxMsgs = max(maxMsgs, d.core.Messages())
		maxRcptsInCore = max(maxRcptsInCore, inCore)
		maxPending = max(maxPending, d.in.pending())
		if d.in.total < inCore && failed == nil {
			failed = fmt.Errorf("turn %d: counted %d recipients, the core holds %d", turns, d.in.total, inCore)
		}
		if d.in.initial && d.in.scan != nil && d.core.Latency().Count() > 0 {
			deliveredDuringScan = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the queue did not drain in time")
	}
	if failed != nil {
		t.Error(failed)
	}
	if maxMsgs > msgLimit {
		t.Errorf("core held %d messages, limit %d", maxMsgs, msgLimit)
	}
	if maxRcptsInCore >= rcptLimit+maxRcpts {
		t.Errorf("core held %d recipients, limit %d + less than one message of at most %d", maxRcptsInCore, rcptLimit, maxRcpts)
	}
	if maxMsgs < msgLimit-1 && maxRcptsInCore < rcptLimit {
		t.Errorf("the core never filled up (%d messages, %d recipients): the test shows nothing", maxMsgs, maxRcptsInCore)
	}
	if maxPending > d.in.max {
		t.Errorf("FIFO held %d names, capacity %d", maxPending, d.in.max)
	}
	if !deliveredDuringScan {
		t.Error("no job line was dispatched before the first scan pass ended")
	}
	if d.in.total != 0 || len(d.in.rcpts) != 0 {
		t.Errorf("after the drain the count is %d over %d messages", d.in.total, len(d.in.rcpts))
	}
	want := 0
	for i := range msgs {
		want += 1 + i%maxRcpts
	}
	if c := d.core.Counters(); c.Delivered != int64(want) {
		t.Errorf("delivered %d recipients", c.Delivered)
	}
	left, err := os.ReadDir(filepath.Join(d.cfg.Scheduler.Postoffice, "transport"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if e.Name()[0] != '.' {
			t.Errorf("left in the queue: %s", e.Name())
		}
	}
}

// TestIntakeNotifyOverflow fills the FIFO with announced names while a
// pass runs: one more is dropped, not held, and when the pass ends another
// is scheduled at once, since the running pass may already have gone past
// the dropped file; a name already waiting is not queued twice.
func TestIntakeNotifyOverflow(t *testing.T) {
	d := intakeDaemon(t, "", 1000, 1000, 0, 1, false)
	t.Cleanup(d.close)
	d.in.max = 3
	now := d.now()
	d.startScan(now)
	for _, rel := range []string{"11", "12", "12", "13", "14", "15"} {
		d.enqueueRead(rel)
	}
	if got := d.in.fifo[d.in.head:]; fmt.Sprint(got) != "[11 12 13]" {
		t.Fatalf("FIFO = %v, want [11 12 13] in arrival order", got)
	}
	if !d.in.rescan {
		t.Fatal("a dropped name did not ask for another pass")
	}
	for d.in.pending() > 0 {
		d.in.pop() // read (the files do not exist)
	}
	d.scanSome(now)
	if d.in.scan != nil {
		t.Fatal("the pass over an empty queue did not end")
	}
	if d.in.scanAt.After(now) {
		t.Errorf("next pass at %v, want at once (%v) after a dropped name", d.in.scanAt, now)
	}
	d.intakeTick(now)
	if d.in.scan == nil || d.in.rescan {
		t.Errorf("the tick did not start the extra pass (scan %v, rescan %v)", d.in.scan != nil, d.in.rescan)
	}
}

// TestIntakeWaitsOnDisk: with the core full, a pass stops taking names once
// the FIFO is full and resumes where it stopped when room frees; no file is
// queued twice and none is lost.
func TestIntakeWaitsOnDisk(t *testing.T) {
	const msgs = 40
	d := intakeDaemon(t, "", 5, 1000, msgs, 1, false)
	t.Cleanup(d.close)
	d.in.max = 8
	d.startScan(d.now())
	for range 10 {
		step(d)
		d.core.Ready() // the agents are never started
	}
	if got := d.core.Messages(); got != 5 {
		t.Fatalf("core holds %d messages, limit 5", got)
	}
	if d.in.pending() != 8 || d.in.scan == nil {
		t.Fatalf("FIFO %d names, pass running %v: want a full FIFO and a paused pass", d.in.pending(), d.in.scan != nil)
	}
	if d.intakeBusy() {
		t.Error("intake busy with the core full: the loop would spin")
	}
	// Raise the limit as if messages had left: the rest comes in.
	d.cfg.Scheduler.MessageActiveLimit = msgs
	for i := 0; i < 20 && !d.intakeIdle(); i++ {
		step(d)
		d.core.Ready()
	}
	if got := d.core.Messages(); got != msgs {
		t.Errorf("core holds %d of %d messages", got, msgs)
	}
	if !d.intakeIdle() {
		t.Error("intake not idle after the pass")
	}
}

// step is one intake turn as Run's loop takes it: once the batch being
// read, if any, is ready (Run selects on fetchDone).
func step(d *Daemon) {
	if done := d.fetchDone(); done != nil {
		<-done
	}
	d.intakeStep()
}

// BenchmarkIntake reads a queue of 20 000 one-recipient control files
// into a fresh core per iteration (scan, read, parse, stat the body,
// place), without agents: the rate at which a scheduler takes up a queue
// it finds at start.
func BenchmarkIntake(b *testing.B) {
	const files = 20_000
	d := intakeDaemon(b, "", files, files, files, 1, false)
	b.Cleanup(d.close)
	b.ResetTimer()
	for range b.N {
		d.core = core.New(d.cfg, nil, rand.New(rand.NewSource(1)))
		d.in = newIntake()
		d.startScan(d.now())
		for !d.intakeIdle() {
			step(d)
			d.core.Ready()
		}
		if got := d.core.Messages(); got != files {
			b.Fatalf("read %d of %d files", got, files)
		}
	}
	b.ReportMetric(float64(files*b.N)/b.Elapsed().Seconds(), "files/s")
}

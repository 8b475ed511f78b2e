package daemon

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/admission"
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
	testagents.LeakCheck(t, filepath.Join(dir, "po", "transport"))
	if agent == "" {
		agent = "/bin/false"
	}
	text := fmt.Appendf(nil, `[scheduler]
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
slow_start = false # the ring's limits bind, not the windows of agents that never deliver
`, filepath.Join(dir, "po"), msgLimit, rcptLimit, agent)
	file := filepath.Join(dir, "test.toml") // for reload
	if err := os.WriteFile(file, text, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
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
	agents := bins.AgentsFor(t)
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
		if d.in.gate.Recipients() < inCore && failed == nil {
			failed = fmt.Errorf("turn %d: counted %d recipients, the core holds %d", turns, d.in.gate.Recipients(), inCore)
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
	if d.in.gate.Recipients() != 0 || d.in.gate.Messages() != 0 {
		t.Errorf("after the drain the count is %d over %d messages", d.in.gate.Recipients(), d.in.gate.Messages())
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
		discard(d.core) // the agents are never started
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
	d.in.gate.Limits = limits(&d.cfg.Scheduler)
	for i := 0; i < 20 && !d.intakeIdle(); i++ {
		step(d)
		discard(d.core)
	}
	if got := d.core.Messages(); got != msgs {
		t.Errorf("core holds %d of %d messages", got, msgs)
	}
	if !d.intakeIdle() {
		t.Error("intake not idle after the pass")
	}
}

// step is one intake turn as Run's loop takes it: once the batch being
// read, if any, is ready (Run selects on fetchDone). Every batch is read
// off the loop, so the first turn only starts reading; while the core is
// empty step also takes the turn Run's loop takes when that is read.
func step(d *Daemon) {
	if done := d.fetchDone(); done != nil {
		<-done
	}
	d.intakeStep()
	if done := d.fetchDone(); done != nil && len(d.in.ready) == 0 && d.core.Messages() == 0 {
		<-done
		d.intakeStep()
	}
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
	cpu := cpuTime()
	for range b.N {
		d.core = core.New(d.cfg, nil, rand.New(rand.NewSource(1)))
		d.in = newIntake(&d.cfg.Scheduler)
		d.startScan(d.now())
		for !d.intakeIdle() {
			step(d)
			discard(d.core)
		}
		if got := d.core.Messages(); got != files {
			b.Fatalf("read %d of %d files", got, files)
		}
	}
	b.ReportMetric(float64(files*b.N)/b.Elapsed().Seconds(), "files/s")
	// CPU per file (all goroutines): on a shared machine files/s mostly
	// measures the neighbours.
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(files*b.N), "cpu-ns/file")
}

// startupAgents is what the core's only ring holds, if it exists yet:
// agents and maxring.
func startupAgents(t *testing.T, d *Daemon) (agents, maxring int) {
	t.Helper()
	rs := d.core.Rings(d.now())
	if len(rs) > 1 {
		t.Fatalf("%d rings, want 1", len(rs))
	}
	for _, r := range rs {
		agents, maxring = r.Agents, r.MaxRing
	}
	return agents, maxring
}

// TestStartupReadHasPriority: while the queue found at start is read, the
// ring runs at most startup_maxring (2) of its maxring (4) agents, and
// delivery starts after the first batch; once the pass is in core the ring
// opens to maxring. The agents are never started (the core's spawns are
// dropped): they stay "starting", so each new one is a spawn the policy
// allowed, and none is ever freed.
func TestStartupReadHasPriority(t *testing.T) {
	const msgs = 40
	d := intakeDaemon(t, "", 1000, 1000, msgs, 1, false)
	t.Cleanup(d.close)
	d.in.max = 8 // the pass takes several turns
	d.startScan(d.now())
	turns := 0
	for d.in.startup.On() {
		step(d)
		discard(d.core)
		turns++
		agents, maxring := startupAgents(t, d)
		if d.in.startup.On() && (agents != 2 || maxring != 2) {
			t.Fatalf("turn %d of the startup read: %d agents, maxring %d; want 2 and 2", turns, agents, maxring)
		}
		if turns > 50 {
			t.Fatal("the startup read did not end")
		}
	}
	if turns < 3 {
		t.Fatalf("the pass took %d turns: the test shows nothing", turns)
	}
	if d.in.initial || d.core.Messages() != msgs {
		t.Fatalf("the startup read ended before the queue was read (%d messages in core)", d.core.Messages())
	}
	if agents, maxring := startupAgents(t, d); agents != 4 || maxring != 4 {
		t.Errorf("after the startup read: %d agents, maxring %d; want 4 and 4", agents, maxring)
	}
}

// TestStartupReadEndsWhenCoreFull: on a queue larger than
// message_active_limit the startup read ends when the core first fills,
// while the pass is still under way: from then on reading waits on
// delivery, which must not be held back.
func TestStartupReadEndsWhenCoreFull(t *testing.T) {
	d := intakeDaemon(t, "", 10, 1000, 40, 1, false)
	t.Cleanup(d.close)
	d.in.max = 8
	d.startScan(d.now())
	for i := 0; d.in.startup.On(); i++ {
		if agents, _ := startupAgents(t, d); agents > 2 {
			t.Fatalf("turn %d: %d agents during the startup read", i, agents)
		}
		if i > 50 {
			t.Fatal("the startup read did not end")
		}
		step(d)
		discard(d.core)
	}
	if d.core.Messages() != 10 || !d.in.initial {
		t.Fatalf("ended with %d messages in core, pass still running %v: want 10 and true", d.core.Messages(), d.in.initial)
	}
	if agents, maxring := startupAgents(t, d); agents != 4 || maxring != 4 {
		t.Errorf("with the core full: %d agents, maxring %d; want 4 and 4", agents, maxring)
	}
}

// TestStartupReadTimeLimit: a startup read that lasts admission.StartupMax (a slow
// disk) ends there, the pass still running; the loop's wake-up includes
// that time.
func TestStartupReadTimeLimit(t *testing.T) {
	d := intakeDaemon(t, "", 1000, 1000, 40, 1, false)
	t.Cleanup(d.close)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return now }
	d.in.max = 8
	d.startScan(now)
	step(d)
	discard(d.core)
	if !d.in.startup.On() || d.in.scan == nil {
		t.Fatalf("after one turn: startup %v, pass running %v", d.in.startup.On(), d.in.scan != nil)
	}
	if wake := d.intakeWake(now.Add(time.Hour)); !wake.Equal(now.Add(admission.StartupMax)) {
		t.Errorf("wake at %v, want the end of the startup read %v", wake, now.Add(admission.StartupMax))
	}
	now = now.Add(admission.StartupMax)
	step(d)
	discard(d.core)
	if d.in.startup.On() || !d.in.initial {
		t.Fatalf("at the time limit: startup %v, first pass running %v; want false, true", d.in.startup.On(), d.in.initial)
	}
	if agents, maxring := startupAgents(t, d); agents != 4 || maxring != 4 {
		t.Errorf("after the time limit: %d agents, maxring %d; want 4 and 4", agents, maxring)
	}
}

// TestStartupReadReload: a reload during the startup read takes the file's
// new values but keeps the startup limit; its end opens the ring to them.
func TestStartupReadReload(t *testing.T) {
	d := intakeDaemon(t, "", 1000, 1000, 40, 1, false)
	t.Cleanup(d.close)
	d.in.max = 8
	d.startScan(d.now())
	step(d)
	discard(d.core)
	b, err := os.ReadFile(d.cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.cfg.File, bytes.Replace(b, []byte("maxring = 4"), []byte("maxring = 6"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.reload(); err != nil {
		t.Fatal(err)
	}
	if agents, maxring := startupAgents(t, d); !d.in.startup.On() || agents != 2 || maxring != 2 {
		t.Fatalf("reloaded during the startup read: %d agents, maxring %d; want 2 and 2", agents, maxring)
	}
	for i := 0; d.in.startup.On(); i++ {
		if i > 50 {
			t.Fatal("the startup read did not end")
		}
		step(d)
		discard(d.core)
	}
	if agents, maxring := startupAgents(t, d); agents != 6 || maxring != 6 {
		t.Errorf("after the startup read: %d agents, maxring %d; want the reloaded 6 and 6", agents, maxring)
	}
}

// TestArrivalAllocs: the arrival made of each file read lays its groups'
// recipients out in one array: a message of five destinations costs the
// groups' two allocations, two more and its queue id, not one per
// destination.
func TestArrivalAllocs(t *testing.T) {
	d := intakeDaemon(t, "", 10, 100, 1, 1, false)
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	f, err := d.spool.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 5; i++ {
		r := f.Rcpts[0]
		r.Host = fmt.Sprintf("other%d.test", i)
		f.Rcpts = append(f.Rcpts, r)
	}
	a := arrival(rel, f)
	if len(a.Groups) != 5 {
		t.Fatalf("%d groups; want 5", len(a.Groups))
	}
	if n := testing.AllocsPerRun(100, func() { arrival(rel, f) }); n > 5 {
		t.Errorf("arrival of 5 destinations: %v allocations; want at most 5", n)
	}
}

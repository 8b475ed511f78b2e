package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/agent"
	"zsched/config"
	"zsched/ctlfile"
	"zsched/testagents"
)

// Issue 16's transport-agent containment, with real agent processes.

// containLog is a daemon's log, kept for assertions and passed to t.Log.
type containLog struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *containLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// lines returns the logged lines that contain all of subs.
func (l *containLog) lines(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// fakeClock is a daemon clock that moves only when told.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// containEnv is a daemon on a fresh postoffice whose agents the test must
// not leak.
type containEnv struct {
	t     *testing.T
	d     *Daemon
	log   *containLog
	spool *ctlfile.Spool
	po    string
	clock *fakeClock // nil: the real clock
}

// newContain writes a configuration with the given clauses ({name} is the
// test agent of that name, {dir} a scratch directory) and returns a daemon
// on it, not yet running. With fake set, the daemon's clock is the test's.
func newContain(t *testing.T, sched, clauses string, fake bool) *containEnv {
	t.Helper()
	agents := bins.AgentsFor(t)
	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "zs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	for name, path := range agents {
		clauses = strings.ReplaceAll(clauses, "{"+name+"}", path)
	}
	clauses = strings.ReplaceAll(clauses, "{dir}", dir)
	po := filepath.Join(dir, "po")
	text := fmt.Sprintf(`[scheduler]
postoffice = %q
control_socket = %q
scaninterval = "1h"
shutdown_timeout = "5s"
%s
%s`, po, filepath.Join(sockDir, "ctl"), sched, clauses)
	file := filepath.Join(dir, "scheduler.toml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	e := &containEnv{t: t, log: &containLog{t: t}, po: po,
		spool: &ctlfile.Spool{Root: cfg.Scheduler.Postoffice, NoSync: true}}
	if err := e.spool.Init(); err != nil {
		t.Fatal(err)
	}
	// First: it must run after the daemon's own stop.
	testagents.LeakCheck(t, e.spool.TransportDir())
	opt := Options{Seed: 1}
	if fake {
		e.clock = &fakeClock{}
		e.clock.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		opt.Now = e.clock.now
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "zsched", Level: hclog.Debug, Output: e.log})
	e.d, err = New(cfg, log, opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// enqueue queues n messages of one recipient each to channel/host; a host
// with a %d in it names a destination per message.
func (e *containEnv) enqueue(n int, channel, hostFmt string) []string {
	e.t.Helper()
	var rels []string
	for i := range n {
		host := hostFmt
		if strings.Contains(hostFmt, "%d") {
			host = fmt.Sprintf(hostFmt, i)
		}
		m := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: t\n"), Body: []byte("b\n"),
			Rcpts: []ctlfile.Address{{Channel: channel, Host: host, User: fmt.Sprintf("u%d@%s", i, host)}}}
		rel, err := e.spool.Enqueue(m)
		if err != nil {
			e.t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	return rels
}

// run runs the daemon's loop until the test ends, which stops it and wants
// a clean stop.
func (e *containEnv) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.d.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("daemon: %v", err)
		}
	})
}

// onLoop runs f on the running loop.
func (e *containEnv) onLoop(f func()) {
	e.t.Helper()
	if !e.d.inLoop(f, 10*time.Second) {
		e.t.Fatal("the loop did not answer")
	}
}

// waitFor polls cond, read on the loop, with a generous failure deadline.
func (e *containEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		e.onLoop(func() { ok = cond() })
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling real processes
	}
}

// intake reads the whole queue into the core, by hand (the loop is not
// running), carrying out the core's actions as it goes.
func (e *containEnv) intake() {
	e.t.Helper()
	e.d.startScan(e.d.now())
	for i := 0; !e.d.intakeIdle(); i++ {
		if i > 10000 {
			e.t.Fatal("intake does not end")
		}
		step(e.d)
		e.d.apply()
	}
}

// event takes one agent event, by hand, and carries out what it causes.
func (e *containEnv) event() agent.Event {
	e.t.Helper()
	select {
	case ev := <-e.d.events:
		e.d.agentEvent(e.d.now(), ev)
		e.d.apply()
		return ev
	case <-time.After(30 * time.Second):
		e.t.Fatal("no agent event within 30s")
	}
	panic("unreachable")
}

// settleAgents takes agent events until no agent process is left.
func (e *containEnv) settleAgents() {
	e.t.Helper()
	for len(e.d.procs) > 0 {
		e.event()
	}
}

// stop ends a daemon driven by hand as Run would, and closes it.
func (e *containEnv) stop() {
	e.t.Helper()
	if err := e.d.shutdown(); err != nil {
		e.t.Error(err)
	}
	e.d.close()
}

// TestAgentChildIsKilledWithItsGroup (item 4): an agent that forks a child
// to deliver (ZMailer's sm style) hangs past jobtimeout. Before, only the
// agent was killed: its locks were reset and the recipient given to a new
// agent while the orphan child went on, and both delivered. Now the kill
// reaches the child, and the locks are reset only once the group is gone:
// one delivery, no process left.
func TestAgentChildIsKilledWithItsGroup(t *testing.T) {
	e := newContain(t, "", `[[clause]]
select = "smtp/*"
command = ["{forker}", "-c", "smtp", "-log", "{dir}/deliveries", "-go", "{dir}/go"]
jobtimeout = "1s"
interval = "1s"
retries = [1]
`, false)
	e.enqueue(1, "smtp", "a.test")
	e.run()
	// The first agent is killed as silent; the recipient is fed again.
	e.waitFor("the hung agent to be killed and the recipient fed again", func() bool {
		c := e.d.core.Counters()
		return c.Killed >= 1 && c.Spawned >= 2
	})
	goFile := filepath.Join(filepath.Dir(e.po), "go")
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the message to be delivered", func() bool { return e.d.core.Messages() == 0 && e.d.core.Counters().Delivered == 1 })
	// A child the first agent left behind sees the go file too: it
	// delivers and exits. Wait until no process is left but the agents'.
	e.waitFor("no process but the agents", func() bool {
		for _, pid := range testagents.ProcessesIn(e.spool.TransportDir()) {
			ours := false
			for _, p := range e.d.procs {
				ours = ours || p.Pid() == pid
			}
			if !ours {
				return false
			}
		}
		return true
	})
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(e.po), "deliveries"))
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Fatalf("the recipient was delivered %d times:\n%s", n, b)
	}
}

// TestStallIsNotSilence (item 9): the scheduler itself stalls (SIGSTOP, a
// long turn) past jobtimeout while a busy agent writes: its line sits
// unread. The sweep must read it before it judges the agent silent.
func TestStallIsNotSilence(t *testing.T) {
	e := newContain(t, "", `[[clause]]
select = "smtp/*"
command = ["MARK={dir}/written", "/bin/sh", "-c", "echo '#hungry'; read job; echo '# working on it'; : > \"$MARK\"; read x"]
jobtimeout = "3s"
`, true)
	defer e.stop()
	e.enqueue(1, "smtp", "a.test")
	e.intake()
	if len(e.d.procs) != 1 {
		t.Fatalf("%d agents started, want 1", len(e.d.procs))
	}
	mark := filepath.Join(filepath.Dir(e.po), "written")
	deadline := time.Now().Add(30 * time.Second)
	for _, err := os.Stat(mark); err != nil; _, err = os.Stat(mark) {
		if time.Now().After(deadline) {
			t.Fatal("the agent did not take its job")
		}
		time.Sleep(10 * time.Millisecond) // polling a real process
	}
	// The agent has written its comment (and its first #hungry); the loop
	// has not looked. 7 seconds pass, as under SIGSTOP, and the timer
	// fires first.
	e.clock.advance(7 * time.Second)
	e.d.tick()
	if k := e.d.core.Counters().Killed; k != 0 {
		t.Fatalf("%d agents killed as silent whose words waited unread", k)
	}
	if len(e.d.procs) != 1 {
		t.Fatalf("%d agents, want the busy one still there", len(e.d.procs))
	}
	// Silence does count once it is real.
	e.clock.advance(3 * time.Second)
	e.d.tick()
	if k := e.d.core.Counters().Killed; k != 1 {
		t.Fatalf("%d agents killed after 3s of real silence, want 1", k)
	}
	e.settleAgents()
}

// brokenTransport is a clause whose agent cannot run: it says why on
// stderr (the protocol stream) and exits, as a missing library does.
const brokenTransport = `[[clause]]
select = "smtp/*"
command = ["/bin/sh", "-c", "echo 'smtp: error while loading shared libraries: libzs.so.1: cannot open shared object file' >&2; exit 127"]
`

// TestBrokenTransportDoesNotStorm (item 10): 300 messages for a transport
// whose agents die at once, on a clock that does not move. Before, every
// failure started the next agent: one per recipient, a log line each, and
// the window grew on the "deliveries". Now the first batch fails, the ring
// is throttled, logged once with the agent's own words, and each end of
// the back-off starts one probe, failing twice as long each time.
func TestBrokenTransportDoesNotStorm(t *testing.T) {
	e := newContain(t, `log_level = "info"`, brokenTransport, true)
	defer e.stop()
	e.enqueue(300, "smtp", "dest.test")
	e.intake()
	e.settleAgents()
	now := e.d.now()
	c := e.d.core.Counters()
	th, _ := e.d.core.Thread(now, "smtp", "dest.test")
	warns := e.log.lines("transport unavailable")
	t.Logf("frozen clock: %d agents started for 300 messages, %d throttles, window %d, %d throttle lines",
		c.Spawned, c.Throttles, th.Window, len(warns))
	if c.Spawned > 5 {
		t.Fatalf("%d agents started for a transport that dies at once; want the first batch (initial window 5)", c.Spawned)
	}
	if th.Window > 5 {
		t.Errorf("window %d grew on agents that died", th.Window)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "libzs.so.1: cannot open shared object file") ||
		!strings.Contains(warns[0], `clause="smtp/*"`) || !strings.Contains(warns[0], "backoff=1s") ||
		!strings.Contains(warns[0], "before its first #hungry") {
		t.Fatalf("throttle logged %d times, want once with the agent's words:\n%s", len(warns), strings.Join(warns, "\n"))
	}
	// mailq's ring line and the metric say so.
	if rep := strings.Join(e.d.threadReport(now, true), "\n"); !strings.Contains(rep, "throttled=1s") {
		t.Errorf("mailq ring line without the throttle:\n%s", rep)
	}
	if g := e.d.core.Gauges(now, 0); g.Throttled != 1 {
		t.Errorf("gauge: %d rings throttled, want 1", g.Throttled)
	}
}

// TestBrokenTransportProbesWithBackoff (item 10): at each end of the
// back-off one probe is started; it fails and the ring waits twice as long.
// Meanwhile WHY says the transport is unavailable. (A destination per
// message: on one, negative feedback soon declares it dead, and a dead
// destination wants no probe.)
func TestBrokenTransportProbesWithBackoff(t *testing.T) {
	e := newContain(t, `log_level = "info"`, brokenTransport+"maxring = 3\n", true)
	defer e.stop()
	rels := e.enqueue(50, "smtp", "d%d.test")
	e.intake()
	e.settleAgents()
	first := e.d.core.Counters().Spawned
	if first != 3 {
		t.Fatalf("%d agents in the first batch, want maxring 3", first)
	}
	// The messages no agent took wait for the transport (the three fed
	// wait for their retry time).
	waiting := 0
	for _, rel := range rels {
		why, err := e.d.why(e.d.now(), rel)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.Join(why, "\n"), "transport unavailable until ") {
			waiting++
		}
	}
	if waiting != len(rels)-3 {
		t.Errorf("WHY says %d of %d messages wait for the transport, want all but the 3 fed", waiting, len(rels))
	}
	for i, backoff := range []string{"2s", "4s", "8s", "16s"} {
		e.clock.advance(e.d.core.NextWakeup().Sub(e.d.now()))
		e.d.tick()
		e.settleAgents()
		if got := e.d.core.Counters().Spawned; got != first+int64(i)+1 {
			t.Fatalf("%d agents after back-off %d, want one probe more (%d)", got, i+1, first+int64(i)+1)
		}
		if got := e.log.lines("transport unavailable", "backoff="+backoff); len(got) != 1 {
			t.Fatalf("%d throttle lines with backoff=%s, want 1", len(got), backoff)
		}
	}
}

// TestMissingAgentProgramIsThrottled (item 10): an agent that cannot be
// started at all throttles its ring the same way, logged with the error.
func TestMissingAgentProgramIsThrottled(t *testing.T) {
	e := newContain(t, `log_level = "info"`, `[[clause]]
select = "smtp/*"
command = ["/nonexistent/smtp", "-c", "smtp"]
`, true)
	defer e.stop()
	e.enqueue(50, "smtp", "dest.test")
	e.intake()
	if c := e.d.core.Counters(); c.Spawned > 5 || c.Throttles != 1 {
		t.Fatalf("%d agents asked for, %d throttles: want at most the first batch and one throttle", c.Spawned, c.Throttles)
	}
	warns := e.log.lines("transport unavailable")
	if len(warns) != 1 || !strings.Contains(warns[0], "no such file or directory") || !strings.Contains(warns[0], "start failed") {
		t.Fatalf("want one throttle line naming the start failure:\n%s", strings.Join(warns, "\n"))
	}
}

// TestWorkingAgentClearsTheThrottle (item 10): once the agent works again
// (the library is back), the next probe completes a job and the ring opens.
func TestWorkingAgentClearsTheThrottle(t *testing.T) {
	e := newContain(t, `log_level = "info"`, `[[clause]]
select = "smtp/*"
command = ["LIB={dir}/lib", "/bin/sh", "-c", "test -e \"$LIB\" || { echo 'smtp: libzs.so.1: not found' >&2; exit 127; }; exec \"$0\" \"$@\"", "{sink}", "-c", "smtp"]
maxring = 3
`, true)
	defer e.stop()
	e.enqueue(20, "smtp", "d%d.test")
	e.intake()
	e.settleAgents()
	if c := e.d.core.Counters(); c.Throttles != 1 || c.Delivered != 0 {
		t.Fatalf("throttles %d delivered %d, want a throttle and nothing delivered", c.Throttles, c.Delivered)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(e.po), "lib"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.clock.advance(time.Second)
	e.d.tick()
	for e.d.core.Counters().Delivered < 15 {
		e.event()
	}
	if got := e.log.lines("transport works again"); len(got) != 1 {
		t.Fatalf("%d lines say the transport works again, want 1", len(got))
	}
	for _, r := range e.d.core.Rings(e.d.now()) {
		if !r.Throttled.IsZero() || r.Probing {
			t.Fatalf("ring still throttled: %+v", r)
		}
	}
	if g := e.d.core.Gauges(e.d.now(), 0); g.Throttled != 0 {
		t.Errorf("gauge: %d rings throttled, want 0", g.Throttled)
	}
}

// TestAgentWordsReachTheOperator (item 11): a real agent that writes a
// warning to its stderr with every job. In socketpair mode the warning is
// in the protocol stream: before, the agent was killed after 100 of them
// and every one was a warning line; now it is never killed for it and the
// warnings are logged rate-limited, with the clause and the destination.
// In pipes mode stderr is its own stream: before, logged at debug only.
func TestAgentWordsReachTheOperator(t *testing.T) {
	for _, stdio := range []string{"socketpair", "pipes"} {
		t.Run(stdio, func(t *testing.T) {
			e := newContain(t, `log_level = "info"`, fmt.Sprintf(`[[clause]]
select = "smtp/*"
command = ["{sink}", "-c", "smtp", "-warn", "smtp: warning: no smtp.conf, using defaults"]
stdio = %q
maxring = 1
`, stdio), false)
			e.d.opt.Drain = true
			e.enqueue(150, "smtp", "dest.test")
			if err := e.d.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			c := e.d.core.Counters()
			if c.Delivered != 150 || c.Killed != 0 {
				t.Fatalf("delivered %d, killed %d: want 150 delivered by one agent never killed", c.Delivered, c.Killed)
			}
			said := e.log.lines("[INFO]", "no smtp.conf, using defaults")
			if stdio == "socketpair" {
				said = e.log.lines("[WARN]", "no smtp.conf, using defaults")
			}
			if len(said) == 0 || len(said) > 10*2 {
				t.Fatalf("%d of 150 warnings logged, want some, at most 10 a minute", len(said))
			}
			if !strings.Contains(said[0], `clause="smtp/*"`) || !strings.Contains(said[0], "host=dest.test") {
				t.Errorf("logged without the clause and destination: %s", said[0])
			}
		})
	}
}

var outcomeTA = regexp.MustCompile(`outcome: .* ta=(\d+) status=deferred`)

// TestDeadAgentsOutcomeNamesItsPid (item 13): the outcome line of a job
// whose agent died named no agent (ta=0): the pid was dropped with the
// process before the line was written.
func TestDeadAgentsOutcomeNamesItsPid(t *testing.T) {
	e := newContain(t, "", `[[clause]]
select = "smtp/*"
command = ["{crash}", "-c", "smtp", "-after", "0"]
`, true)
	defer e.stop()
	e.enqueue(1, "smtp", "dest.test")
	e.intake()
	e.settleAgents()
	var lines []string
	for _, l := range e.log.lines("outcome:", "status=deferred") {
		if m := outcomeTA.FindStringSubmatch(l); m != nil {
			lines = append(lines, l)
			if pid, _ := strconv.Atoi(m[1]); pid == 0 {
				t.Errorf("outcome of the dead agent's job without its pid: %s", l)
			}
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d deferred outcomes, want 1", len(lines))
	}
}

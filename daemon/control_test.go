package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/control"
	"zsched/ctlfile"
	"zsched/testagents"
)

// controlledEnv is a running in-process scheduler with real test agents,
// driven over its real control socket.
type controlledEnv struct {
	t      *testing.T
	dir    string
	config string
	cfg    *config.Config
	d      *Daemon
	spool  *ctlfile.Spool
	c      *control.Client
}

// startControlled writes a configuration (the [scheduler] extras and the clauses,
// in which {sink}, {hang}, … name the test agents), starts a daemon on it
// and connects to its control socket. The daemon is stopped, and must stop
// cleanly, when the test ends.
func startControlled(t *testing.T, agents map[string]string, sched, clauses string) *controlledEnv {
	t.Helper()
	dir := t.TempDir()
	// A short socket path: sun_path holds 108 bytes, test names are long.
	sockDir, err := os.MkdirTemp("", "zs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	for name, path := range agents {
		clauses = strings.ReplaceAll(clauses, "{"+name+"}", path)
	}
	// Agents left running when the test ends are a failure (issue 16).
	testagents.LeakCheck(t, filepath.Join(dir, "po", "transport"))
	e := &controlledEnv{t: t, dir: dir, config: filepath.Join(dir, "scheduler.toml")}
	e.write(fmt.Sprintf(`[scheduler]
postoffice = %q
control_socket = %q
scaninterval = "200ms"
log_level = "debug"
shutdown_timeout = "1s"
%s
%s`, filepath.Join(dir, "po"), filepath.Join(sockDir, "ctl"), sched, clauses))
	e.cfg, err = config.Load(e.config)
	if err != nil {
		t.Fatal(err)
	}
	e.spool = &ctlfile.Spool{Root: e.cfg.Scheduler.Postoffice}
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}})
	e.d, err = New(e.cfg, log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	e.c, err = control.Dial(e.cfg.Scheduler.ControlSocket, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.c.Close() })
	return e
}

func (e *controlledEnv) write(text string) {
	e.t.Helper()
	if err := os.WriteFile(e.config, []byte(text), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// enqueue queues one message to channel/host/user recipients, as
// `scheduler enqueue` does, and returns its path under transport/.
func (e *controlledEnv) enqueue(rcpts ...string) string {
	e.t.Helper()
	m := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: t\n"), Body: []byte("b\n")}
	for _, r := range rcpts {
		f := strings.SplitN(r, "/", 3)
		m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: f[0], Host: f[1], User: f[2]})
	}
	rel, err := e.spool.Enqueue(m)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := ctlfile.NotifyScheduler(e.cfg.Scheduler.NotifySocket, rel); err != nil {
		e.t.Fatal(err)
	}
	return rel
}

func (e *controlledEnv) do(cmd string) control.Reply {
	e.t.Helper()
	rep, err := e.c.Do(cmd)
	if err != nil {
		e.t.Fatalf("%s: %v", cmd, err)
	}
	return rep
}

func (e *controlledEnv) ok(cmd string) control.Reply {
	e.t.Helper()
	rep := e.do(cmd)
	if !rep.OK {
		e.t.Fatalf("%s: -%s", cmd, rep.Text)
	}
	return rep
}

func (e *controlledEnv) queue() Queue {
	e.t.Helper()
	rep := e.ok("SHOW QUEUE JSON")
	var q Queue
	if err := json.Unmarshal([]byte(strings.Join(rep.Lines, "\n")), &q); err != nil {
		e.t.Fatalf("SHOW QUEUE JSON: %v\n%s", err, rep.Lines)
	}
	return q
}

func (q Queue) thread(host string) (QueueThread, bool) {
	for _, r := range q.Rings {
		for _, t := range r.Threads {
			if t.Host == host {
				return t, true
			}
		}
	}
	return QueueThread{}, false
}

// waitFor polls cond until it holds: the scheduler runs real processes.
func (e *controlledEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// why returns the reason word and text WHY gives for each recipient of
// msg; nil while msg is not in core.
func (e *controlledEnv) why(msg string) []string {
	e.t.Helper()
	rep := e.do("WHY " + msg)
	if !rep.OK && strings.Contains(rep.Text, "no such message") {
		return nil
	}
	if !rep.OK {
		e.t.Fatalf("WHY %s: -%s", msg, rep.Text)
	}
	var words []string
	for _, l := range rep.Lines[1:] {
		f := strings.Split(l, "\t")
		if len(f) < 5 {
			e.t.Fatalf("WHY line %q", l)
		}
		words = append(words, f[3]+": "+f[4])
	}
	return words
}

func (e *controlledEnv) waitWhy(msg, reason string) string {
	e.t.Helper()
	var got []string
	e.waitFor("WHY "+msg+" to say "+reason, func() bool {
		got = e.why(msg)
		return len(got) == 1 && strings.HasPrefix(got[0], reason+": ")
	})
	return got[0]
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestOperations(t *testing.T) {
	agents := bins.AgentsFor(t)
	t.Run("mailq", func(t *testing.T) { t.Parallel(); testMailq(t, agents) })
	t.Run("why", func(t *testing.T) { t.Parallel(); testWhy(t, agents) })
	t.Run("etrn", func(t *testing.T) { t.Parallel(); testETRN(t, agents) })
	t.Run("kill", func(t *testing.T) { t.Parallel(); testKill(t, agents) })
	t.Run("reload", func(t *testing.T) { t.Parallel(); testReload(t, agents) })
	t.Run("metrics", func(t *testing.T) { t.Parallel(); testMetrics(t, agents) })
	t.Run("second", func(t *testing.T) { t.Parallel(); testSecondScheduler(t, agents) })
}

// testMailq: the thread report, THREADS2, SHOW THREAD and the JSON show the
// threads that exist and the agents working them, with their real pids.
func testMailq(t *testing.T, agents map[string]string) {
	e := startControlled(t, agents, "", `
[[clause]]
select = "smtp/*"
command = ["{hang}", "-c", "smtp"]
maxring = 10
slow_start = false # two sessions on a.test before any delivery ends
`)
	a1 := e.enqueue("smtp/a.test/u1@a.test")
	a2 := e.enqueue("smtp/a.test/u2@a.test")
	b1 := e.enqueue("smtp/b.test/u3@b.test", "smtp/b.test/u4@b.test")
	var q Queue
	e.waitFor("three agents busy on a.test and b.test", func() bool {
		q = e.queue()
		ta, _ := q.thread("a.test")
		tb, _ := q.thread("b.test")
		working := 0
		for _, a := range q.Agents {
			if a.State == "working" {
				working++
			}
		}
		return len(ta.Pids) == 2 && len(tb.Pids) == 1 && working == 3
	})
	if len(q.Rings) != 1 || q.Rings[0].Select != "smtp/*" || q.Rings[0].Agents != 3 || q.Rings[0].Msgs != 3 || len(q.Rings[0].Threads) != 2 {
		t.Fatalf("rings %+v", q.Rings)
	}
	ta, _ := q.thread("a.test")
	tb, _ := q.thread("b.test")
	if ta.Vertices != 2 || ta.Recipients != 2 || tb.Vertices != 1 || tb.Recipients != 2 || ta.State != "running" {
		t.Fatalf("threads a %+v b %+v", ta, tb)
	}
	if len(q.Agents) != 3 {
		t.Fatalf("agents %+v", q.Agents)
	}
	pids := map[int]string{}
	for _, a := range q.Agents {
		if a.State != "working" || a.Jobs != 1 || a.Fed == nil {
			t.Fatalf("agent %+v, want working on one job", a)
		}
		if err := syscall.Kill(a.Pid, 0); err != nil {
			t.Fatalf("agent pid %d: %v", a.Pid, err)
		}
		pids[a.Pid] = a.Host
	}
	for _, p := range append(ta.Pids, tb.Pids...) {
		if pids[p] == "" {
			t.Fatalf("thread pid %d is not an agent", p)
		}
	}

	report := strings.Join(e.ok("SHOW QUEUE THREADS").Lines, "\n")
	for _, want := range []string{
		"smtp/*/0\n",
		// ZMailer's layout: tabs to the thread's fields, padded columns.
		fmt.Sprintf("    smtp/a.test/0\t\tN=2   R=2   A=0  P={%d,%d} ", ta.Pids[0], ta.Pids[1]),
		fmt.Sprintf("    smtp/b.test/0\t\tN=1   R=2   A=0  P={%d} ", tb.Pids[0]),
		"\tThreads:    2 Msgs:     3 Procs:   3 Idle:   0 Plim:  10 Flim:   0 Tlim:  20\n",
		"Kids: 3  Idle:  0  Msgs:   3  Thrds:   2  Rcpnts:    4  Uptime: ",
	} {
		if !strings.Contains(report, want) {
			t.Fatalf("thread report lacks %q:\n%s", want, report)
		}
	}
	// The last line counts the whole spool (issue 17).
	if short := e.ok("SHOW QUEUE SHORT").Lines; len(short) != 5 || strings.Contains(strings.Join(short, "\n"), "a.test") ||
		short[4] != "Spool: Msgs 3 Rcpnts 4; in core Msgs 3 Rcpnts 4" {
		t.Fatalf("SHOW QUEUE SHORT:\n%s", strings.Join(short, "\n"))
	}
	if t2 := e.ok("SHOW QUEUE THREADS2").Lines; len(t2) != 2 || !strings.HasPrefix(t2[0], "smtp\ta.test\tN=2\t") {
		t.Fatalf("THREADS2: %q", t2)
	}
	st := e.ok("SHOW THREAD smtp a.test").Lines
	if len(st) != 3 || !strings.HasPrefix(st[0], "#smtp/a.test/0\tN=2   R=2") {
		t.Fatalf("SHOW THREAD: %q", st)
	}
	paths := []string{strings.Split(st[1], "\t")[0], strings.Split(st[2], "\t")[0]}
	if !(slicesContain(paths, a1) && slicesContain(paths, a2)) || slicesContain(paths, b1) {
		t.Fatalf("SHOW THREAD smtp a.test lists %v, want %s and %s", paths, a1, a2)
	}
	if rep := e.do("SHOW THREAD smtp nowhere.test"); rep.OK {
		t.Fatal("SHOW THREAD of a thread not in core succeeded")
	}
	shape := e.ok("SHOW QSHAPE").Lines
	if len(shape) != 5 || !regexp.MustCompile(`^\s+TOTAL\s+4\s+4(\s+0)+$`).MatchString(shape[1]) {
		t.Fatalf("qshape:\n%s", strings.Join(shape, "\n"))
	}
	counters := strings.Join(e.ok("SHOW COUNTERS").Lines, "\n") + "\n"
	for _, want := range []string{"messages_arrived 3", "queue_recipients 4", "threads_running 2", "agents_working 3"} {
		if !strings.Contains(counters, want+"\n") {
			t.Fatalf("counters lack %q:\n%s", want, counters)
		}
	}
	// The commands before it were timed on the loop.
	if !regexp.MustCompile(`(?m)^control_commands [1-9][0-9]*$`).MatchString(counters) ||
		!regexp.MustCompile(`(?m)^control_wait_p99 \S+$`).MatchString(counters) {
		t.Fatalf("counters lack the control commands' timing:\n%s", counters)
	}
}

func slicesContain[T comparable](s []T, x T) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// testWhy: WHY names the real reason a recipient waits, for each limit, a
// dead destination and both holds.
func testWhy(t *testing.T, agents map[string]string) {
	for _, tc := range []struct {
		name, sched, clause, second, want string
	}{
		{"maxta", "maxta = 1", "", "smtp/b.test/v", "maxta: waiting for an agent: the scheduler is at maxta 1"},
		{"maxchannel", "", "maxchannel = 1", "smtp/b.test/v", "maxchannel: waiting for an agent: the channel is at maxchannel 1"},
		{"maxring", "", "maxring = 1", "smtp/b.test/v", "maxring: waiting for an agent: the ring is at maxring 1"},
		{"window", "", "maxthr = 1", "smtp/a.test/v", "window: destination concurrency window full: 1 of 1 agents busy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := startControlled(t, agents, tc.sched, fmt.Sprintf(`
[[clause]]
select = "smtp/*"
command = ["{hang}", "-c", "smtp"]
%s
`, tc.clause))
			first := e.enqueue("smtp/a.test/u")
			e.waitWhy(first, "running")
			second := e.enqueue(tc.second)
			if got := e.waitWhy(second, strings.SplitN(tc.want, ":", 2)[0]); got != tc.want {
				t.Fatalf("WHY %s: %q, want %q", second, got, tc.want)
			}
			if th, _ := e.queue().thread(strings.Split(tc.second, "/")[1]); tc.name != "window" && th.Pend != tc.name {
				t.Fatalf("mailq thread %+v, want pend=%s", th, tc.name)
			}
		})
	}
	t.Run("dead-and-held", func(t *testing.T) {
		t.Parallel()
		e := startControlled(t, agents, "", `
[[clause]]
select = "smtp/dead.test"
command = ["{deferall}", "-c", "smtp"]
initial_concurrency = 1
[[clause]]
select = "smtp/*"
command = ["{hang}", "-c", "smtp"]
`)
		dead := e.enqueue("smtp/dead.test/u")
		if got := e.waitWhy(dead, "dead"); !strings.Contains(got, "next probe at ") {
			t.Fatalf("WHY dead: %q", got)
		}
		e.ok("HOLD THREAD smtp/h.test")
		held := e.enqueue("smtp/h.test/u")
		e.waitWhy(held, "held-thread")

		// A message hold outlasts the release of its destination.
		e.ok("HOLD THREAD smtp/m.test")
		msg := e.enqueue("smtp/m.test/u")
		e.waitWhy(msg, "held-thread")
		e.ok("HOLD MSG " + msg)
		e.ok("RELEASE THREAD smtp/m.test")
		e.waitWhy(msg, "held-message")
		if th, ok := e.queue().thread("m.test"); !ok || len(th.Pids) != 0 {
			t.Fatalf("held message's thread %+v has agents", th)
		}
		e.ok("RELEASE MSG " + msg)
		e.waitWhy(msg, "running")
		if rep := e.do("WHY 999999"); rep.OK || !strings.Contains(rep.Text, "no such message") {
			t.Fatalf("WHY of an unknown message: %+v", rep)
		}
	})
}

// testETRN: ETRN from the socket and from a ZMailer T file starts exactly
// the matching queueonly threads, @domain its subdomains too.
func testETRN(t *testing.T, agents map[string]string) {
	e := startControlled(t, agents, "", `
[[clause]]
select = "smtp/*"
command = ["{sink}", "-c", "smtp"]
queueonly = true
`)
	hosts := []string{"x.test", "sub.x.test", "deep.sub.x.test", "y.test", "notx.test"}
	msgs := map[string]string{}
	for _, h := range hosts {
		msgs[h] = e.enqueue("smtp/" + h + "/u@" + h)
	}
	e.waitFor("five queueonly threads", func() bool {
		q := e.queue()
		n := 0
		for _, h := range hosts {
			if th, ok := q.thread(h); ok && th.State == "queueonly" {
				n++
			}
		}
		return n == len(hosts)
	})
	if q := e.queue(); len(q.Agents) != 0 {
		t.Fatalf("agents started for queueonly threads: %+v", q.Agents)
	}
	gone := func(h string) bool {
		_, inCore := e.queue().thread(h)
		return !inCore && !exists(filepath.Join(e.spool.TransportDir(), msgs[h]))
	}
	left := func(want ...string) {
		t.Helper()
		q := e.queue()
		for _, h := range want {
			if th, ok := q.thread(h); !ok || th.State != "queueonly" || len(th.Pids) != 0 {
				t.Fatalf("%s: %+v (in core %v), want still waiting for ETRN", h, th, ok)
			}
		}
	}

	if rep := e.ok("ETRN sub.x.test"); rep.Text != "OK; an ETRN started something." {
		t.Fatalf("ETRN reply %q", rep.Text)
	}
	e.waitFor("sub.x.test delivered", func() bool { return gone("sub.x.test") })
	left("x.test", "deep.sub.x.test", "y.test", "notx.test")
	if rep := e.ok("ETRN nothing.test"); rep.Text != "OK; an ETRN didn't start anything." {
		t.Fatalf("ETRN of an unknown host: %q", rep.Text)
	}

	// ZMailer's smtpserver drops "T domain ip" into transport/.
	tfile := filepath.Join(e.spool.TransportDir(), "900001-etrn")
	if err := os.WriteFile(tfile, []byte("T @x.test 192.0.2.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the T file's ETRN", func() bool { return gone("x.test") && gone("deep.sub.x.test") })
	left("y.test", "notx.test")
	e.waitFor("the T file removed", func() bool { return !exists(tfile) })
}

// testKill: KILL MSG removes the message from core and its control file and
// body from the spool, before it replies.
func testKill(t *testing.T, agents map[string]string) {
	e := startControlled(t, agents, "", `
[[clause]]
select = "smtp/*"
command = ["{sink}", "-c", "smtp"]
queueonly = true
`)
	keep := e.enqueue("smtp/k.test/keep")
	kill := e.enqueue("smtp/k.test/kill1", "smtp/other.test/kill2")
	e.waitFor("both messages in core", func() bool {
		th, ok := e.queue().thread("k.test")
		return ok && th.Vertices == 2
	})
	f, err := e.spool.Read(kill)
	if err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(e.spool.TransportDir(), kill)
	body := ctlfile.QueuePath(filepath.Join(e.spool.QueueDir(), kill), f.ID)
	if !exists(ctl) || !exists(body) {
		t.Fatalf("files of %s missing before the kill: %s %s", kill, ctl, body)
	}
	if rep := e.ok("KILL MSG " + kill); rep.Text != "OK; KILLed something." {
		t.Fatalf("KILL reply %q", rep.Text)
	}
	if exists(ctl) || exists(body) {
		t.Fatalf("files left after KILL: control %v body %v", exists(ctl), exists(body))
	}
	q := e.queue()
	if th, _ := q.thread("k.test"); th.Vertices != 1 {
		t.Fatalf("k.test after kill: %+v", th)
	}
	if _, ok := q.thread("other.test"); ok {
		t.Fatal("the killed message's other destination is still in core")
	}
	if rep := e.do("KILL MSG " + kill); rep.OK {
		t.Fatal("second KILL of the same message succeeded")
	}
	if !exists(filepath.Join(e.spool.TransportDir(), keep)) {
		t.Fatal("KILL removed another message's file")
	}
}

// testReload: a raised maxring takes effect at once, a lowered one as
// agents come free, no recipient is lost, and a bad file is refused with
// the running configuration kept.
func testReload(t *testing.T, agents map[string]string) {
	clause := `
[[clause]]
select = "smtp/*"
command = ["{slow}", "-c", "smtp", "-d", "150ms"]
maxring = %d
`
	e := startControlled(t, agents, "", fmt.Sprintf(clause, 1))
	base, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	for i := range n {
		e.enqueue(fmt.Sprintf("smtp/h%d.test/u%d", i, i))
	}
	busy := func(q Queue) int {
		k := 0
		for _, a := range q.Agents {
			if a.Jobs > 0 {
				k++
			}
		}
		return k
	}
	e.waitFor("an agent at work", func() bool { return busy(e.queue()) == 1 })
	if q := e.queue(); len(q.Agents) != 1 || q.Rings[0].MaxRing != 1 {
		t.Fatalf("under maxring 1: %d agents, ring %+v", len(q.Agents), q.Rings[0])
	}

	e.write(strings.Replace(string(base), "maxring = 1", "maxring = 4", 1))
	if rep := e.ok("RELOAD"); !strings.HasPrefix(rep.Text, "reloaded ") {
		t.Fatalf("RELOAD: %q", rep.Text)
	}
	peak := 0
	e.waitFor("four agents after raising maxring", func() bool {
		q := e.queue()
		peak = max(peak, len(q.Agents))
		return busy(q) == 4
	})

	// A broken file is refused; the running configuration stays.
	e.write(string(base) + "\n[[clause]]\nselect = \"local/*\"\nmaxring = 0\n")
	if rep := e.do("RELOAD"); rep.OK || !strings.Contains(rep.Text, "maxring") {
		t.Fatalf("RELOAD of a bad file: %+v", rep)
	}
	if q := e.queue(); len(q.Rings) == 0 || q.Rings[0].MaxRing != 4 {
		t.Fatalf("after a refused reload: %+v", q.Rings)
	}

	e.write(strings.Replace(string(base), "maxring = 1", "maxring = 2", 1))
	e.d.Reload() // as SIGHUP
	e.waitFor("the ring shrunk to 2", func() bool {
		q := e.queue()
		return len(q.Rings) > 0 && q.Rings[0].MaxRing == 2 && busy(q) <= 2
	})
	e.waitFor("the queue drained", func() bool {
		q := e.queue()
		return q.Counters.Delivered == n && len(q.Rings) <= 1 && (len(q.Rings) == 0 || len(q.Rings[0].Threads) == 0)
	})
	if peak > 4 {
		t.Fatalf("%d agents at once under maxring 4", peak)
	}
	t.Logf("maxring 1 → 4 → 2 by RELOAD and SIGHUP: at most %d agents seen, %d of %d delivered", peak, e.queue().Counters.Delivered, n)
	// Completed messages' files are unlinked beside the loop (remove.go):
	// the counters can say delivered a moment before the last file goes.
	e.waitFor("the completed messages' control files removed", func() bool {
		left := 0
		e.spool.Scan(func(string) { left++ })
		return left == 0
	})
}

// testMetrics reads /metrics over HTTP after a drain and checks it against
// what was delivered.
func testMetrics(t *testing.T, agents map[string]string) {
	e := startControlled(t, agents, `metrics_listen = "127.0.0.1:0"`, `
[[clause]]
select = "smtp/*"
command = ["{sink}", "-c", "smtp"]
`)
	const msgs, hosts = 10, 3
	for i := range msgs {
		var rcpts []string
		for h := range hosts {
			rcpts = append(rcpts, fmt.Sprintf("smtp/d%d.test/u%d.%d", h, i, h))
		}
		e.enqueue(rcpts...)
	}
	e.waitFor("the queue drained", func() bool { return e.queue().Counters.Delivered == msgs*hosts })
	var m map[string]float64
	e.waitFor("messages gone from core in /metrics", func() bool {
		m = scrape(t, "http://"+e.d.MetricsAddr()+"/metrics")
		return m["zsched_queue_messages"] == 0
	})
	delivered := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, `zsched_outcomes_total{status="ok`) {
			delivered += v
		} else if strings.HasPrefix(k, "zsched_outcomes_total") {
			t.Errorf("unexpected outcome %s %v", k, v)
		}
	}
	counters := e.queue().Counters
	for name, want := range map[string]float64{
		"delivered outcomes":                    msgs * hosts,
		"zsched_messages_arrived_total":         msgs,
		"zsched_dispatch_latency_seconds_count": msgs * hosts, // one job line per message × host
		"zsched_queue_recipients":               0,
		`zsched_threads{state="running"}`:       0,
		`zsched_agents{state="working"}`:        0,
		"zsched_agents_started_total":           float64(counters.Spawned),
		// The core's observations, counted: every job judged once.
		`zsched_observations_total{kind="feedback"}`: msgs * hosts,
		`zsched_dispatch_latency_seconds_bucket`:     -1,
	} {
		got, ok := m[name]
		if name == "delivered outcomes" {
			got, ok = delivered, true
		}
		if want < 0 {
			continue
		}
		if !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	t.Logf("/metrics after the drain: %v ok outcomes (core: %d delivered), %v dispatches, %v messages arrived, latency sum %.3fs",
		delivered, counters.Delivered, m["zsched_dispatch_latency_seconds_count"], m["zsched_messages_arrived_total"],
		m["zsched_dispatch_latency_seconds_sum"])
	if float64(counters.Delivered) != delivered {
		t.Errorf("metrics count %v delivered, the core %d", delivered, counters.Delivered)
	}
	if m[`zsched_dispatch_latency_seconds_bucket{le="+Inf"}`] != msgs*hosts {
		t.Errorf("latency histogram +Inf bucket %v", m[`zsched_dispatch_latency_seconds_bucket{le="+Inf"}`])
	}
}

// scrape reads a Prometheus text exposition into series → value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		m[line[:i]] = v
	}
	return m
}

// testSecondScheduler: a second scheduler on the same postoffice stops at
// the control socket, before touching the running one's files.
func testSecondScheduler(t *testing.T, agents map[string]string) {
	e := startControlled(t, agents, "", "[[clause]]\nselect = \"smtp/*\"\ncommand = \"/bin/false\"\n")
	pid, err := os.ReadFile(filepath.Join(e.cfg.Scheduler.Postoffice, ".pid.scheduler"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(e.cfg, hclog.NewNullLogger(), Options{})
	if !errors.Is(err, control.ErrRunning) {
		t.Fatalf("second daemon: %v, want control.ErrRunning", err)
	}
	if now, _ := os.ReadFile(filepath.Join(e.cfg.Scheduler.Postoffice, ".pid.scheduler")); string(now) != string(pid) {
		t.Fatal("the second scheduler overwrote the pid file")
	}
	e.ok("SHOW COUNTERS")
}

// Every verb the control server accepts has a handler on the loop, and
// every handler is for a verb the server accepts: a verb added to
// control.Verbs without one would reach the loop and be refused there.
func TestEveryVerbIsHandled(t *testing.T) {
	h := controlHandlers()
	verbs := map[string]bool{}
	for _, v := range control.Verbs {
		verbs[v.Name] = true
		if h[v.Name] == nil {
			t.Errorf("%s: no handler", v.Name)
		}
	}
	for name := range h {
		if !verbs[name] {
			t.Errorf("handler for %q, which control.Verbs does not list", name)
		}
	}
}

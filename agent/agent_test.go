package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"zsched/internal/agentbin"
	"zsched/internal/need"
)

// echoagent is the path of testdata/echoagent, built by TestMain.
var echoagent string

// eventWait bounds every wait for an event; it is a failure deadline, not
// a synchronisation sleep.
const eventWait = 10 * time.Second

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	// As subreaper, orphaned grandchildren become our children: the tests
	// can reap them, and the leak check below sees them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "subreaper:", err)
		return 1
	}
	var bins agentbin.Set
	defer bins.Remove()
	dir, err := bins.Dir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Readable by all: one test runs the agent as another user.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if echoagent, err = bins.Program("./testdata/echoagent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if kids := children(); len(kids) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: leaked child processes: %v\n", kids)
		code = 1
	}
	return code
}

// children lists the pids whose parent is this process, zombies included.
func children() []int {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStat(pid)
		if len(f) > 1 && f[1] == strconv.Itoa(self) {
			kids = append(kids, pid)
		}
	}
	return kids
}

// procStat returns the fields of /proc/<pid>/stat after the command name:
// [0] is the state, [1] the ppid, [16] the nice value.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// logSink routes the package's logs to t.Log and keeps them for assertions.
type logSink struct {
	t   *testing.T
	mu  sync.Mutex
	buf strings.Builder
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.buf.Write(p)
	s.mu.Unlock()
	s.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func testLogger(t *testing.T) (hclog.Logger, *logSink) {
	sink := &logSink{t: t}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: sink}), sink
}

// harness runs one agent and reads its events.
type harness struct {
	t      *testing.T
	p      *Proc
	ev     chan Event
	exit   *Event
	logs   *logSink
	stderr []string // Stderr events, which exited collects aside
	// lingering is a Lingering event grandchild read before the pid line.
	lingering *Event
}

const testID = 42

// echoSpec runs echoagent with the given steps.
func echoSpec(t *testing.T, mode Stdio, steps ...string) Spec {
	return Spec{
		Argv:  append([]string{echoagent}, steps...),
		Env:   []string{"LANG=C"},
		Dir:   t.TempDir(),
		Stdio: mode,
		UID:   -1,
		GID:   -1,
	}
}

// shSpec runs a /bin/sh script; it uses builtins only, so it has no
// children of its own to hold its output open.
func shSpec(t *testing.T, mode Stdio, script string) Spec {
	s := echoSpec(t, mode)
	s.Argv = []string{"/bin/sh", "-c", script}
	return s
}

func start(t *testing.T, spec Spec) *harness {
	t.Helper()
	log, sink := testLogger(t)
	h := &harness{t: t, ev: make(chan Event, 16), logs: sink}
	p, err := Start(testID, spec, h.ev, log)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	h.p = p
	t.Cleanup(h.cleanup)
	return h
}

// cleanup checks that nothing of the agent is left: its process and its
// whole group gone, no event after Exited. An agent a passing test left
// running is a failure (a leak), killed only so that it goes no further.
func (h *harness) cleanup() {
	t := h.t
	if h.exit == nil {
		if !t.Failed() {
			t.Errorf("agent %d still running at the end of the test", h.p.Pid())
		}
		h.p.Kill(0)
		deadline := time.After(eventWait)
		for h.exit == nil {
			select {
			case e := <-h.ev:
				if e.Kind == Exited {
					h.exit = &e
				}
			case <-deadline:
				t.Errorf("agent %d: no Exited within %v of SIGKILL", h.p.Pid(), eventWait)
				return
			}
		}
	}
	if err := unix.Kill(h.p.Pid(), 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("pid %d still exists after Exited: kill(0) = %v", h.p.Pid(), err)
	}
	// The leader is reaped, so its group id is free: a process still in
	// the group (a zombie included) would still answer.
	if err := unix.Kill(-h.p.Pid(), 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("process group %d still has members after Exited: kill(0) = %v", h.p.Pid(), err)
	}
	select {
	case <-h.p.Done():
	case <-time.After(eventWait):
		t.Errorf("Done not closed after Exited")
	}
	select {
	case e := <-h.ev:
		t.Errorf("event after Exited: %+v", e)
	default:
	}
}

func (h *harness) next() Event {
	h.t.Helper()
	if h.exit != nil {
		h.t.Fatalf("event wanted after Exited %+v", *h.exit)
	}
	select {
	case e := <-h.ev:
		if e.ID != testID {
			h.t.Fatalf("event with id %d, want %d", e.ID, testID)
		}
		if e.Kind == Exited {
			h.exit = &e
		}
		return e
	case <-time.After(eventWait):
		h.t.Fatalf("no event within %v", eventWait)
	}
	panic("unreachable")
}

// expect reads the next events and wants them to be these lines.
func (h *harness) expect(lines ...string) {
	h.t.Helper()
	for _, want := range lines {
		e := h.next()
		for e.Kind == Stderr {
			h.stderr = append(h.stderr, e.Line)
			e = h.next()
		}
		if e.Kind != Line || e.Line != want {
			h.t.Fatalf("got %v %.60q (err %v), want line %.60q", e.Kind, e.Line, e.Err, want)
		}
	}
}

// exited reads until Exited and returns it with the lines before it.
func (h *harness) exited() (Event, []string) {
	h.t.Helper()
	var lines []string
	for {
		e := h.next()
		switch e.Kind {
		case Exited:
			return e, lines
		case Line:
			lines = append(lines, e.Line)
		case Stderr:
			h.stderr = append(h.stderr, e.Line)
		default:
			h.t.Fatalf("unexpected %v event %.60q", e.Kind, e.Line)
		}
	}
}

// cleanExit wants the next event to be a clean Exited.
func (h *harness) cleanExit() {
	h.t.Helper()
	e := h.next()
	if e.Kind != Exited || e.Err != nil || e.Partial != 0 {
		h.t.Fatalf("got %+v, want a clean Exited", e)
	}
}

var modes = []Stdio{Socketpair, Pipes, PTY}

// forModes runs f once per Stdio mode, in parallel.
func forModes(t *testing.T, f func(t *testing.T, mode Stdio)) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			f(t, mode)
		})
	}
}

func signalOf(t *testing.T, err error) syscall.Signal {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Exited.Err = %v, want an *exec.ExitError", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() {
		t.Fatalf("agent exited with %v, want death by a signal", err)
	}
	return ws.Signal()
}

func TestLinesInOrder(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:first", "spam:2000"))
		h.expect("first")
		for i := range 2000 {
			h.expect("line " + strconv.Itoa(i))
		}
		h.cleanExit()
	})
}

func TestInputInOrder(t *testing.T) {
	// A burst far larger than any kernel buffer: the writer must deliver
	// all of it, in order, while the agent's replies are read concurrently.
	// On a pty this also shows canonical mode throttles rather than drops.
	const n = 3000
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "echo"))
		jobs := make([]string, n)
		for i := range jobs {
			jobs[i] = fmt.Sprintf("%d/%s\thost-%d.example", i, strings.Repeat("p", 50), i)
		}
		h.p.Write(jobs...)
		h.p.End()
		for _, j := range jobs {
			h.expect("got:" + j)
		}
		h.expect("got:", "eof")
		h.cleanExit()
	})
}

func TestLineBytesExact(t *testing.T) {
	// Tabs and carriage returns pass both ways untranslated; in PTY mode
	// that needs OPOST and ICRNL off.
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:a\tb\rc\r", "echo"))
		h.expect("a\tb\rc\r")
		// An embedded newline would split one job into two: dropped.
		h.p.Write("two\nlines")
		h.p.Write("x\ty\rz")
		h.expect("got:x\ty\rz")
		h.p.End()
		h.expect("got:", "eof")
		h.cleanExit()
	})
}

func TestTooLong(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:before", "long:"+strconv.Itoa(70<<10),
			"long:"+strconv.Itoa(MaxLine), "print:after"))
		h.expect("before")
		if e := h.next(); e.Kind != TooLong || e.Line != strings.Repeat("x", tooLongPrefix) {
			t.Fatalf("got %v %.60q, want TooLong with the line's first %d bytes", e.Kind, e.Line, tooLongPrefix)
		}
		h.expect(strings.Repeat("x", MaxLine), "after")
		h.cleanExit()
	})
}

func TestStderr(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "stderr:to-stderr", "print:to-stdout"))
		_, lines := h.exited()
		if mode == Pipes {
			// Separate pipe: the agent's words, not a report line.
			if !reflect.DeepEqual(lines, []string{"to-stdout"}) {
				t.Errorf("lines %q, want only stdout's", lines)
			}
			if !reflect.DeepEqual(h.stderr, []string{"to-stderr"}) {
				t.Errorf("stderr events %q, want the stderr line", h.stderr)
			}
			return
		}
		// One stream, as ZMailer: stderr arrives among the reports.
		if !reflect.DeepEqual(lines, []string{"to-stderr", "to-stdout"}) {
			t.Errorf("lines %q, want stderr then stdout in one stream", lines)
		}
	})
}

func TestEnd(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:ready", "echo"))
		h.expect("ready")
		h.p.Write("a", "b c")
		h.p.End()
		h.p.End()
		h.p.Write("dropped after End")
		// The empty line, then EOF (half-close, close, or EOT on a pty).
		h.expect("got:a", "got:b c", "got:", "eof")
		h.cleanExit()
		if n := h.p.Backlog(); n != 0 {
			t.Errorf("Backlog after exit = %d, want 0", n)
		}
	})
}

func TestEndWithZMailerStyleShellAgent(t *testing.T) {
	// A plain shell agent speaking the protocol: #hungry before every read,
	// exit on the empty line.
	const script = `echo '#hungry'
while IFS= read -r job; do
	[ -z "$job" ] && exit 0
	echo "1/2	notary	ok $job"
	echo '#hungry'
done
exit 9`
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, shSpec(t, mode, script))
		h.expect("#hungry")
		h.p.Write("A/123\texample.com")
		h.expect("1/2\tnotary\tok A/123\texample.com", "#hungry")
		h.p.Write("124\texample.net")
		h.expect("1/2\tnotary\tok 124\texample.net", "#hungry")
		h.p.End()
		h.cleanExit()
	})
}

func TestExitStatus(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:bye", "exit:3"))
		e, lines := h.exited()
		var ee *exec.ExitError
		if !errors.As(e.Err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("Exited.Err = %v, want exit status 3", e.Err)
		}
		if !reflect.DeepEqual(lines, []string{"bye"}) {
			t.Errorf("lines %q, want the output before the exit", lines)
		}
	})
}

func TestPartialLastLine(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:whole", "raw:half a line"))
		e, lines := h.exited()
		if !reflect.DeepEqual(lines, []string{"whole"}) {
			t.Errorf("lines %q, want only the terminated one", lines)
		}
		if e.Err != nil || e.Partial != len("half a line") {
			t.Errorf("Exited %+v, want Err nil and Partial %d", e, len("half a line"))
		}
	})
}

func TestKillTerm(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:ready", "hang"))
		h.expect("ready")
		h.p.Kill(time.Minute)
		h.p.Kill(0) // idempotent: must not turn into an immediate SIGKILL
		e := h.next()
		if e.Kind != Exited {
			t.Fatalf("got %v, want Exited", e.Kind)
		}
		if sig := signalOf(t, e.Err); sig != syscall.SIGTERM {
			t.Errorf("died of %v, want SIGTERM", sig)
		}
	})
}

func TestKillIgnoringTerm(t *testing.T) {
	const grace = 300 * time.Millisecond
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "ignoreterm", "print:ready", "hang"))
		h.expect("ready")
		t0 := time.Now()
		h.p.Kill(grace)
		e := h.next()
		if e.Kind != Exited {
			t.Fatalf("got %v, want Exited", e.Kind)
		}
		if sig := signalOf(t, e.Err); sig != syscall.SIGKILL {
			t.Errorf("died of %v, want SIGKILL", sig)
		}
		if d := time.Since(t0); d < grace {
			t.Errorf("SIGKILL after %v, before the %v grace", d, grace)
		}
	})
}

func TestNeverReadsStdin(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:ready", "hang"))
		h.expect("ready")
		line := strings.Repeat("j", 99)
		batch := make([]string, 1000)
		for i := range batch {
			batch[i] = line
		}
		const total = 100 * 1000 * 100 // 10 MB
		for range 100 {
			h.p.Write(batch...)
		}
		// Reaching here at all shows Write did not wait for the agent.
		if n := h.p.Backlog(); n <= 0 || n > total {
			t.Fatalf("Backlog = %d, want in (0, %d]", n, total)
		}
		h.p.Kill(time.Minute)
		if n := h.p.Backlog(); n != 0 {
			t.Errorf("Backlog after Kill = %d, want 0 (dropped)", n)
		}
		h.p.Write("after kill")
		if n := h.p.Backlog(); n != 0 {
			t.Errorf("Write after Kill queued %d bytes", n)
		}
		e := h.next()
		if e.Kind != Exited || signalOf(t, e.Err) != syscall.SIGTERM {
			t.Fatalf("got %+v, want Exited by SIGTERM", e)
		}
	})
}

func TestClosedOutputKeepsAgentUntilExit(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "print:ready", "closeout", "hang"))
		h.expect("ready")
		// Wait until the agent has really let go of its stdio.
		fd1 := fmt.Sprintf("/proc/%d/fd/1", h.p.Pid())
		deadline := time.Now().Add(eventWait)
		for target, _ := os.Readlink(fd1); target != os.DevNull; target, _ = os.Readlink(fd1) {
			if time.Now().After(deadline) {
				t.Fatalf("agent's stdout still %q", target)
			}
			runtime.Gosched()
		}
		// Its output is at EOF, but it runs: no Exited yet.
		select {
		case e := <-h.ev:
			t.Fatalf("event %+v while the agent still runs", e)
		case <-time.After(100 * time.Millisecond):
		}
		if err := unix.Kill(h.p.Pid(), 0); err != nil {
			t.Fatalf("agent gone: %v", err)
		}
		h.p.Kill(time.Minute)
		if e := h.next(); e.Kind != Exited || signalOf(t, e.Err) != syscall.SIGTERM {
			t.Fatalf("got %+v, want Exited by SIGTERM", e)
		}
	})
}

// grandchild reads the pid the echoagent's fork step writes and has the
// test reap it when it ends (we are the subreaper: an orphan is ours). A
// Lingering event before it (the agent's exit is seen on another goroutine
// than its output) is kept in h.lingering.
func (h *harness) grandchild() int {
	h.t.Helper()
	e := h.next()
	if e.Kind == Lingering {
		l := e
		h.lingering = &l
		e = h.next()
	}
	gc, ok := strings.CutPrefix(e.Line, "grandchild:")
	if e.Kind != Line || !ok {
		h.t.Fatalf("got %+v, want the grandchild's pid", e)
	}
	pid, err := strconv.Atoi(gc)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
	})
	return pid
}

// reap waits for the orphaned grandchild and returns how it ended.
func reap(t *testing.T, pid int) unix.WaitStatus {
	t.Helper()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatalf("reaping grandchild %d: %v", pid, err)
	}
	return ws
}

// TestExitWaitsForItsGroup: an agent whose child still runs (ZMailer's sm
// forks the program that delivers) is not reported Exited when it exits
// itself, only once the child is gone: a Lingering event comes instead.
func TestExitWaitsForItsGroup(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		spec := echoSpec(t, mode, "fork", "exit:0")
		spec.Drain = 200 * time.Millisecond
		h := start(t, spec)
		gc := h.grandchild()
		e := h.lingering
		if e == nil {
			ev := h.next()
			e = &ev
		}
		switch {
		case e.Kind == Lingering && e.Line == "1":
			unix.Kill(gc, unix.SIGTERM)
			ev := h.next()
			e = &ev
		case mode == PTY && e.Kind == Exited:
			// The session leader's exit hangs the terminal up: SIGHUP may
			// have ended the grandchild before the group was looked at.
		default:
			t.Fatalf("got %+v while the grandchild %d runs, want Lingering with 1 process", *e, gc)
		}
		if e.Kind != Exited || e.Err != nil {
			t.Fatalf("got %+v, want a clean Exited once the group is empty", *e)
		}
		if !zombie(gc) {
			t.Fatalf("grandchild %d still runs after Exited", gc)
		}
		want := unix.SIGTERM
		if mode == PTY {
			want = unix.SIGHUP
		}
		if ws := reap(t, gc); !ws.Signaled() || (ws.Signal() != want && ws.Signal() != unix.SIGTERM) {
			t.Errorf("grandchild ended with %v, want %v", ws, want)
		}
	})
}

// TestKillKillsItsGroup: Kill reaches the agent's children too, gracefully
// first, and Exited comes after all of them are gone.
func TestKillKillsItsGroup(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "fork", "print:ready", "hang"))
		gc := h.grandchild()
		h.expect("ready")
		h.p.Kill(time.Minute)
		e := h.next()
		if e.Kind == Lingering {
			e = h.next() // the grandchild took longer to die than the agent
		}
		if e.Kind != Exited || signalOf(t, e.Err) != syscall.SIGTERM {
			t.Fatalf("got %+v, want Exited by SIGTERM", e)
		}
		if !zombie(gc) {
			t.Fatalf("grandchild %d still runs after Exited", gc)
		}
		// On a pty the leader's exit also hangs the terminal up: SIGHUP
		// may be taken first.
		if ws := reap(t, gc); !ws.Signaled() || ws.Signal() != unix.SIGTERM && !(mode == PTY && ws.Signal() == unix.SIGHUP) {
			t.Errorf("grandchild ended with %v, want SIGTERM", ws)
		}
	})
}

// TestKillIgnoringTermKillsItsGroup: SIGKILL after the grace period reaches
// a child that ignores SIGTERM, though the agent itself died of the
// SIGTERM.
func TestKillIgnoringTermKillsItsGroup(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		// The shell and its child both ignore SIGTERM (a Go program resets
		// an inherited SIG_IGN for TERM, hence its own step); the child
		// says so once it does.
		spec := shSpec(t, mode, `trap '' TERM; `+echoagent+` ignoreterm print:child hang & echo "grandchild:$!"; read x`)
		h := start(t, spec)
		gc := h.grandchild()
		h.expect("child")
		h.p.Kill(200 * time.Millisecond)
		for e := h.next(); e.Kind != Exited; e = h.next() {
			if e.Kind != Lingering {
				t.Fatalf("got %+v, want Lingering or Exited", e)
			}
		}
		if !zombie(gc) {
			t.Fatalf("grandchild %d still runs after Exited", gc)
		}
		if ws := reap(t, gc); !ws.Signaled() || ws.Signal() != unix.SIGKILL {
			t.Errorf("grandchild ended with %v, want SIGKILL", ws)
		}
	})
}

// TestOutputHeldOutsideTheGroup: a process that left the group (setsid) is
// not waited for; if it holds the output open, the output is read until it
// has been silent for Spec.Drain.
func TestOutputHeldOutsideTheGroup(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		spec := echoSpec(t, mode, "setsid-fork", "exit:0")
		spec.Drain = 200 * time.Millisecond
		h := start(t, spec)
		h.grandchild()
		e := h.next()
		if e.Kind != Exited {
			t.Fatalf("got %+v, want Exited", e)
		}
		if mode == PTY {
			// The session leader's exit hangs the terminal up, which ends
			// the output whether or not the grandchild survives SIGHUP.
			if e.Err != nil && !errors.Is(e.Err, ErrOutputHeld) {
				t.Errorf("Exited.Err = %v", e.Err)
			}
			return
		}
		if !errors.Is(e.Err, ErrOutputHeld) {
			t.Errorf("Exited.Err = %v, want ErrOutputHeld", e.Err)
		}
	})
}

// TestSync: every line the agent wrote before Sync comes before Synced, and
// Sync wakes a reader blocked on a silent agent.
func TestSync(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		mark := filepath.Join(t.TempDir(), "written")
		h := start(t, echoSpec(t, mode, "print:a", "print:b", "print:c", "touch:"+mark, "echo"))
		deadline := time.Now().Add(eventWait)
		for _, err := os.Stat(mark); err != nil; _, err = os.Stat(mark) {
			if time.Now().After(deadline) {
				t.Fatal("the agent did not write its lines")
			}
			runtime.Gosched()
		}
		if !h.p.Sync() || !h.p.Sync() {
			t.Fatal("Sync = false with the agent running")
		}
		h.expect("a", "b", "c")
		if e := h.next(); e.Kind != Synced {
			t.Fatalf("got %+v, want Synced", e)
		}
		// Nothing written since: a second Sync is answered at once.
		if !h.p.Sync() {
			t.Fatal("Sync = false with the agent running")
		}
		if e := h.next(); e.Kind != Synced {
			t.Fatalf("got %+v, want Synced", e)
		}
		// The reader goes on as before.
		h.p.Write("x")
		h.expect("got:x")
		h.p.End()
		h.expect("got:", "eof")
		h.cleanExit()
		if h.p.Sync() {
			t.Error("Sync = true after Exited")
		}
	})
}

func TestNice(t *testing.T) {
	// The agent's niceness is ours plus Spec.Nice. sh is single-threaded,
	// so its one thread is the whole story.
	own, err := strconv.Atoi(procStat(os.Getpid())[16])
	if err != nil {
		t.Fatal(err)
	}
	want := min(own+5, 19)
	forModes(t, func(t *testing.T, mode Stdio) {
		spec := shSpec(t, mode, `echo ready; read x; exit 0`)
		spec.Nice = 5
		h := start(t, spec)
		h.expect("ready")
		if got := procStat(h.p.Pid())[16]; got != strconv.Itoa(want) {
			t.Errorf("agent nice = %s, want %d", got, want)
		}
		h.p.End()
		h.cleanExit()
	})
}

func TestEnvDirAndRelativeProgram(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "ta"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(echoagent, filepath.Join(dir, "ta", "echo")); err != nil {
			t.Fatal(err)
		}
		env := []string{"A=1", "B=two words", "PATH=/nowhere", "TZ=UTC"}
		spec := Spec{
			Argv:  []string{"ta/echo", "env", "pwd"}, // relative to Dir, no PATH search
			Env:   env,
			Dir:   dir,
			Stdio: mode,
			UID:   -1,
			GID:   -1,
		}
		h := start(t, spec)
		e, lines := h.exited()
		if e.Err != nil {
			t.Fatalf("Exited.Err = %v", e.Err)
		}
		var gotEnv []string
		var pwd string
		for _, l := range lines {
			if v, ok := strings.CutPrefix(l, "env:"); ok {
				gotEnv = append(gotEnv, v)
			} else if v, ok := strings.CutPrefix(l, "pwd:"); ok {
				pwd = v
			}
		}
		if !reflect.DeepEqual(gotEnv, env) {
			t.Errorf("child env %q, want exactly %q", gotEnv, env)
		}
		if real, _ := filepath.EvalSymlinks(dir); pwd != real {
			t.Errorf("child dir %q, want %q", pwd, real)
		}
	})
}

func TestNilEnvIsEmpty(t *testing.T) {
	spec := echoSpec(t, Socketpair, "env", "print:done")
	spec.Env = nil
	h := start(t, spec)
	_, lines := h.exited()
	if !reflect.DeepEqual(lines, []string{"done"}) {
		t.Errorf("nil Env gave the child %q, want no environment", lines)
	}
}

func TestTerminalOnlyInPTYMode(t *testing.T) {
	forModes(t, func(t *testing.T, mode Stdio) {
		h := start(t, echoSpec(t, mode, "tty"))
		want := "tty:no"
		if mode == PTY {
			want = "tty:yes"
		}
		h.expect(want)
		h.cleanExit()
	})
}

func TestCredentials(t *testing.T) {
	need.Root(t) // to switch user
	forModes(t, func(t *testing.T, mode Stdio) {
		spec := echoSpec(t, mode, "ids")
		spec.Dir = "/"
		spec.UID, spec.GID = 65534, 65533
		h := start(t, spec)
		// setgroups drops the supplementary groups.
		h.expect("ids:65534:65533:[]")
		h.cleanExit()
	})
}

func TestStartErrors(t *testing.T) {
	log, _ := testLogger(t)
	ev := make(chan Event, 1)
	ok := echoSpec(t, Socketpair, "exit:0")

	bad := ok
	bad.Argv = nil
	if _, err := Start(1, bad, ev, log); !errors.Is(err, ErrNoArgv) {
		t.Errorf("empty argv: err = %v, want ErrNoArgv", err)
	}
	bad = ok
	bad.Stdio = 7
	if _, err := Start(1, bad, ev, log); !errors.Is(err, ErrStdio) {
		t.Errorf("stdio 7: err = %v, want ErrStdio", err)
	}
	bad = ok
	bad.Argv = []string{"no-such-agent"} // relative to Dir, not looked up in PATH
	if _, err := Start(1, bad, ev, log); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing program: err = %v, want ErrNotExist", err)
	}
	bad = ok
	bad.Argv = []string{"sh", "-c", "exit 0"} // a bare name is not searched for either
	if _, err := Start(1, bad, ev, log); err == nil {
		t.Errorf("bare name %q started: PATH was searched", bad.Argv[0])
	}
	select {
	case e := <-ev:
		t.Errorf("event %+v from a failed start", e)
	default:
	}
}

// TestNoLeaks runs agents in every mode, plus failed starts, and wants the
// goroutine and descriptor counts back where they were. It is not parallel,
// so nothing else runs meanwhile.
func TestNoLeaks(t *testing.T) {
	runAll := func() {
		for _, mode := range modes {
			h := start(t, echoSpec(t, mode, "print:x", "stderr:e", "echo"))
			h.expect("x")
			h.p.Write("y")
			h.p.End()
			if e, _ := h.exited(); e.Err != nil {
				t.Fatalf("Exited.Err = %v", e.Err)
			}
			h.cleanup()
			k := start(t, echoSpec(t, mode, "ignoreterm", "print:ready", "hang"))
			k.expect("ready")
			k.p.Write(strings.Repeat("z", 1<<20))
			k.p.Kill(10 * time.Millisecond)
			k.exited()
			k.cleanup()
			bad := echoSpec(t, mode)
			bad.Argv = []string{"/nonexistent"}
			if _, err := Start(1, bad, make(chan Event), nil); err == nil {
				t.Fatal("start of a missing program succeeded")
			}
		}
	}
	fds := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	runAll() // warm up: the runtime's poller and timers exist from here on
	g0, f0 := runtime.NumGoroutine(), fds()
	runAll()
	deadline := time.Now().Add(eventWait)
	for runtime.NumGoroutine() > g0 || fds() > f0 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d (was %d), fds %d (was %d)", runtime.NumGoroutine(), g0, fds(), f0)
		}
		runtime.Gosched()
	}
}

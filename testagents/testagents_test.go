package testagents

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/internal/agentbin"
	"zsched/report"
)

var agents map[string]string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var bins agentbin.Set
	defer bins.Remove()
	var err error
	if agents, err = bins.Agents(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func TestBuild(t *testing.T) {
	for _, name := range []string{"sink", "flaky", "deferall", "crash", "hang", "garbage", "slow", "forker", agentbin.Script} {
		p, ok := agents[name]
		if !ok {
			t.Errorf("agentbin.Agents did not return %s", name)
			continue
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: %s is not an executable file (%v)", name, p, err)
		}
	}
}

// ctl is a control file laid out as ZMailer's router writes it, with the
// offsets of its r lines and of its first header line.
type ctl struct {
	name   string
	data   []byte
	offs   []int64
	header int64
}

// newCtl builds control file name with one r line per quad ("channel host
// user priv"); a quad may end in "|NOTIFY=..." to add an N line.
func newCtl(name string, quads ...string) ctl {
	c := ctl{name: name}
	var b bytes.Buffer
	fmt.Fprintf(&b, "@ 0x00000007\ni %s\no 4\nl <%s.test@example.org>\ne sender@example.org\ns smtp example.org sender@example.org 0\n", name, name)
	for _, q := range quads {
		q, n, _ := strings.Cut(q, "|")
		c.offs = append(c.offs, int64(b.Len()))
		b.WriteString("r           " + q + "\n")
		if n != "" {
			b.WriteString("N " + n + "\n")
		}
	}
	b.WriteString("m\n")
	c.header = int64(b.Len())
	b.WriteString("From: sender@example.org\nSubject: test\n\n")
	c.data = b.Bytes()
	return c
}

// spool writes the control files into a new postoffice, each with its
// body unless its name is in noBody, and returns the transport directory.
func spool(t *testing.T, files []ctl, noBody ...string) string {
	t.Helper()
	po := t.TempDir()
	tr, q := filepath.Join(po, "transport"), filepath.Join(po, "queue")
	for _, d := range []string{tr, q} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(tr, f.name), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if !contains(noBody, f.name) {
			if err := os.WriteFile(filepath.Join(q, f.name), []byte("hdr\nbody\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return tr
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func patch(b []byte, off int64, s string) []byte {
	c := bytes.Clone(b)
	copy(c[off:], s)
	return c
}

// proc is an agent process driven over its stdin and stdout, in the
// working directory the scheduler gives it (postoffice/transport).
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
	exited chan struct{} // closed when Wait returned, with its error in werr
	werr   error
}

func start(t *testing.T, dir string, argv ...string) *proc {
	t.Helper()
	p := &proc{t: t, lines: make(chan string, 256), exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	p.cmd.Stderr = &p.stderr
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := bufio.NewReader(out)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				close(p.lines)
				// Wait only after stdout is drained, as os/exec requires.
				p.werr = p.cmd.Wait()
				close(p.exited)
				return
			}
			p.lines <- strings.TrimSuffix(l, "\n")
		}
	}()
	t.Cleanup(func() {
		p.in.Close()
		p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not exit", argv[0])
		}
		if t.Failed() && p.stderr.Len() > 0 {
			t.Logf("%s stderr:\n%s", argv[0], p.stderr.String())
		}
	})
	return p
}

const wait = 10 * time.Second

func (p *proc) send(s string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, s); err != nil {
		p.t.Fatalf("send %q: %v", s, err)
	}
}

func (p *proc) next() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatal("agent output ended")
		}
		return l
	case <-time.After(wait):
		p.t.Fatal("no line from the agent")
	}
	return ""
}

func (p *proc) expect(want ...string) {
	p.t.Helper()
	for _, w := range want {
		if got := p.next(); got != w {
			p.t.Fatalf("got %q, want %q", got, w)
		}
	}
}

// wait waits for the agent to exit, checking it wrote nothing more.
func (p *proc) wait() error {
	p.t.Helper()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				<-p.exited
				return p.werr
			}
			p.t.Errorf("unexpected line: %q", l)
		case <-time.After(wait):
			p.t.Fatal("agent did not exit")
		}
	}
}

// end sends the empty line that ends an agent and checks it exits 0.
func (p *proc) end() {
	p.t.Helper()
	p.send("\n")
	if err := p.wait(); err != nil {
		p.t.Errorf("exit: %v", err)
	}
}

func (p *proc) report() report.Line {
	p.t.Helper()
	s := p.next()
	l, err := report.Parse(s)
	if err != nil {
		p.t.Fatalf("report %q: %v", s, err)
	}
	return l
}

func TestSink(t *testing.T) {
	c := newCtl("300",
		"smtp dest.test a@dest.test 0",
		"smtp dest.test b@dest.test 0|NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;b@dest.test",
		"local - c 0",
		"smtp DEST.TEST d@dest.test 0",
	)
	dir := spool(t, []ctl{c})
	log := filepath.Join(t.TempDir(), "log")
	p := start(t, dir, agents["sink"], "-c", "smtp", "-log", log)
	p.expect("#hungry")
	p.send("300\tdest.test\n")
	want := map[int64]report.Status{c.offs[0]: report.OK3, c.offs[1]: report.OK2, c.offs[3]: report.OK3}
	for range len(want) {
		l := p.report()
		if l.Inum != 300 || want[l.Offset] != l.Status {
			t.Errorf("report %+v, want one of %v", l, want)
		}
		delete(want, l.Offset)
	}
	p.expect("#hungry")
	p.send("#idle\n")
	p.expect("#hungry")
	p.end()

	after := readFile(t, filepath.Join(dir, "300"))
	wantFile := c.data
	for _, i := range []int{0, 1, 3} {
		wantFile = patch(wantFile, c.offs[i]+1, "+      ")
	}
	// ok2 promises the d line for the success DSN.
	prefix := fmt.Sprintf("d %d:%d:%d::", c.offs[1], c.header, c.offs[1]+int64(len("r           smtp dest.test b@dest.test 0\n")))
	if !bytes.HasPrefix(after, wantFile) || !bytes.HasPrefix(after[len(wantFile):], []byte(prefix)) ||
		bytes.Count(after[len(wantFile):], []byte("\n")) != 1 {
		t.Errorf("file after:\n%q\nwant\n%q + one line %q...", after, wantFile, prefix)
	}
	wantLog := fmt.Sprintf("300/%d a@dest.test\n300/%d b@dest.test\n300/%d d@dest.test\n", c.offs[0], c.offs[1], c.offs[3])
	if got := string(readFile(t, log)); got != wantLog {
		t.Errorf("log = %q, want %q", got, wantLog)
	}
}

// TestDeferall: a refused connection as smtp reports it (O18), and the
// file is left as it was: nothing delivered, nothing locked.
func TestDeferall(t *testing.T) {
	c := newCtl("301", "smtp dest.test a@dest.test 0", "smtp dest.test b@dest.test 0", "smtp dest.test c@dest.test 0")
	dir := spool(t, []ctl{c})
	p := start(t, dir, agents["deferall"], "-c", "smtp", "dest.test")
	p.expect("#hungry")
	p.send("301\n")
	for i := range c.offs {
		l := p.report()
		want := report.RetryAt
		if i == 0 {
			want = report.DeferAll
		}
		if l.Offset != c.offs[i] || l.Status != want || (want == report.RetryAt && l.Retry != "+60") {
			t.Errorf("report %d: %+v, want %s at %d", i, l, want, c.offs[i])
		}
	}
	p.expect("#hungry")
	p.end()
	if after := readFile(t, filepath.Join(dir, "301")); !bytes.Equal(after, c.data) {
		t.Errorf("file changed:\n%s", after)
	}
}

// TestCrash: the agent dies mid-job after one report, leaving its locks.
func TestCrash(t *testing.T) {
	c := newCtl("302", "smtp dest.test a@dest.test 0", "smtp dest.test b@dest.test 0", "smtp dest.test c@dest.test 0")
	dir := spool(t, []ctl{c})
	p := start(t, dir, agents["crash"], "-c", "smtp", "-after", "1")
	p.expect("#hungry")
	p.send("302\tdest.test\n")
	if l := p.report(); l.Offset != c.offs[0] || l.Status != report.OK3 {
		t.Errorf("report %+v, want ok3 for the first recipient", l)
	}
	var ee *exec.ExitError
	if err := p.wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit: %v, want status 1", err)
	}
	lock := fmt.Sprintf("~%6d", p.cmd.Process.Pid)
	want := patch(c.data, c.offs[0]+1, "+      ")
	want = patch(want, c.offs[1]+1, lock)
	want = patch(want, c.offs[2]+1, lock)
	if after := readFile(t, filepath.Join(dir, "302")); !bytes.Equal(after, want) {
		t.Errorf("file after:\n%s\nwant\n%s", after, want)
	}
}

func TestFlakyDefersAll(t *testing.T) {
	c := newCtl("303", "smtp dest.test a@dest.test 0", "smtp dest.test b@dest.test 0")
	dir := spool(t, []ctl{c})
	p := start(t, dir, agents["flaky"], "-c", "smtp", "-p", "1", "-seed", "7")
	p.expect("#hungry")
	p.send("303\tdest.test\n")
	for range c.offs {
		if l := p.report(); l.Status != report.Deferred {
			t.Errorf("report %+v, want deferred", l)
		}
	}
	p.expect("#hungry")
	p.end()
	if after := readFile(t, filepath.Join(dir, "303")); !bytes.Equal(after, c.data) {
		t.Errorf("file changed:\n%s", after)
	}
}

// TestGarbage: every line garbage sends for a job is misformed, and every
// second job gets one #hungry too many.
func TestGarbage(t *testing.T) {
	dir := spool(t, nil)
	p := start(t, dir, agents["garbage"], "-c", "smtp")
	p.expect("#hungry")
	for job := range 2 {
		p.send("12\tdest.test\n")
		for range 3 {
			if l := p.next(); l == "#hungry" || strings.HasPrefix(l, "#") {
				t.Fatalf("job %d: got %q before the garbage", job, l)
			} else if _, err := report.Parse(l); err == nil {
				t.Errorf("job %d: %q parses as a report", job, l)
			}
		}
		p.expect("#hungry")
		if job == 1 {
			p.expect("#hungry")
		}
	}
	p.end()
}

// TestHang: the agent locks its job and is ended only by SIGKILL when it
// ignores SIGTERM.
func TestHang(t *testing.T) {
	c := newCtl("304", "smtp dest.test a@dest.test 0")
	dir := spool(t, []ctl{c})
	p := start(t, dir, agents["hang"], "-c", "smtp", "-ignore-term")
	p.expect("#hungry")
	p.send("304\tdest.test\n")
	lock := fmt.Sprintf("~%6d", p.cmd.Process.Pid)
	deadline := time.Now().Add(wait)
	for !bytes.Equal(readFile(t, filepath.Join(dir, "304")), patch(c.data, c.offs[0]+1, lock)) {
		if time.Now().After(deadline) {
			t.Fatal("the recipient was never locked")
		}
		time.Sleep(5 * time.Millisecond) // polling a real process's file, not synchronising
	}
	// The kernel shows what the process ignores; no need to wait and see.
	status := string(readFile(t, fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)))
	_, ign, _ := strings.Cut(status, "SigIgn:")
	ign, _, _ = strings.Cut(strings.TrimSpace(ign), "\n")
	mask, err := strconv.ParseUint(ign, 16, 64)
	if err != nil || mask&(1<<(syscall.SIGTERM-1)) == 0 {
		t.Errorf("SigIgn = %q (%v), want SIGTERM ignored", ign, err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Kill()
	var ee *exec.ExitError
	if err := p.wait(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("exit: %v, want killed by SIGKILL (SIGTERM ignored)", err)
	}
}

// TestScript drives the shell agent: delivery, case-insensitive host,
// #resync cases, a missing body, #idle and the end.
func TestScript(t *testing.T) {
	ok := newCtl("10002561", "smtp dest.test ok1@dest.test 0", "smtp other.test x@other.test 0", "smtp dest.test ok2@dest.test 0")
	nobody := newCtl("10002819", "smtp dest.test ok17@dest.test 0")
	dir := spool(t, []ctl{ok, nobody}, nobody.name)
	p := start(t, dir, "/bin/sh", agents[agentbin.Script], "-c", "smtp")
	p.expect("#hungry")
	p.send("10002561\tDEST.TEST\n")
	p.expect(
		fmt.Sprintf("10002561/%d\t\tok3 delivered by agent.sh", ok.offs[0]),
		fmt.Sprintf("10002561/%d\t\tok3 delivered by agent.sh", ok.offs[2]),
		"#hungry")
	p.send("10002561\tdest.test\n")
	p.expect("#resync 10002561", "#hungry")
	p.send("99999999\tdest.test\n")
	if l := p.next(); !strings.HasPrefix(l, "# agent.sh: ") {
		t.Errorf("got %q, want a # comment", l)
	}
	p.expect("#resync 99999999", "#hungry")
	p.send("10002819\tdest.test\n")
	p.expect(fmt.Sprintf("10002819/%d\t\terror message file is missing", nobody.offs[0]))
	if l := p.next(); !strings.HasPrefix(l, "# agent.sh: ") {
		t.Errorf("got %q, want a # comment", l)
	}
	p.expect("#resync 10002819", "#hungry")
	p.send("#idle\n")
	p.expect("#hungry")
	p.end()

	want := patch(ok.data, ok.offs[0]+1, "+      ")
	want = patch(want, ok.offs[2]+1, "+      ")
	if after := readFile(t, filepath.Join(dir, ok.name)); !bytes.Equal(after, want) {
		t.Errorf("file after:\n%s\nwant\n%s", after, want)
	}
	if after := readFile(t, filepath.Join(dir, nobody.name)); !bytes.Equal(after, patch(nobody.data, nobody.offs[0]+1, "-      ")) {
		t.Errorf("file after:\n%s", after)
	}
}

// leakTB records what LeakCheck does with a test.
type leakTB struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (l *leakTB) Helper()                        {}
func (l *leakTB) Cleanup(f func())               { l.cleanups = append(l.cleanups, f) }
func (l *leakTB) Errorf(format string, a ...any) { l.errs = append(l.errs, fmt.Sprintf(format, a...)) }
func (l *leakTB) Fatal(a ...any)                 { l.errs = append(l.errs, fmt.Sprint(a...)) }
func (l *leakTB) end() {
	for i := len(l.cleanups) - 1; i >= 0; i-- {
		l.cleanups[i]()
	}
}

// TestLeakCheck: a process left running in the directory fails the test
// and is killed; one that exits in time, or a zombie, does not.
func TestLeakCheck(t *testing.T) {
	dir := t.TempDir()
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}

	clean := &leakTB{TB: t}
	leakCheck(clean, dir, 5*time.Second)
	quick := start("read x < /dev/null; exit 0")
	quick.Wait()
	zombie := start("exit 0") // not reaped until after the check
	clean.end()
	zombie.Wait()
	if len(clean.errs) != 0 {
		t.Fatalf("no process left, but LeakCheck said %q", clean.errs)
	}

	leaky := &leakTB{TB: t}
	leakCheck(leaky, dir, 100*time.Millisecond)
	left := start("exec sleep 1000")
	leaky.end()
	err := left.Wait()
	if len(leaky.errs) != 1 || !strings.Contains(leaky.errs[0], strconv.Itoa(left.Process.Pid)) {
		t.Fatalf("LeakCheck said %q, want the leaked pid %d", leaky.errs, left.Process.Pid)
	}
	if ws, ok := left.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the leaked process ended with %v, want SIGKILL", err)
	}
}

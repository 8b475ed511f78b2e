package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"zsched/config"
	"zsched/control"
)

// lineLog collects a process's stderr and signals when a line containing
// a given text first appears.
type lineLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	seen  map[string]chan struct{}
	lines int
}

func (l *lineLog) watch(text string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	l.seen[text] = ch
	if strings.Contains(l.buf.String(), text) {
		close(ch)
		delete(l.seen, text)
	}
	return ch
}

func (l *lineLog) read(r *os.File) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l.mu.Lock()
		l.buf.WriteString(sc.Text() + "\n")
		for text, ch := range l.seen {
			if strings.Contains(sc.Text(), text) {
				close(ch)
				delete(l.seen, text)
			}
		}
		l.mu.Unlock()
	}
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// start runs the scheduler binary with args in the background; the test
// ends it (SIGKILL) if it is still running.
func (p *postoffice) start(args ...string) (*exec.Cmd, *lineLog, <-chan error) {
	p.t.Helper()
	cmd := p.scheduler(args...)
	r, w, err := os.Pipe()
	if err != nil {
		p.t.Fatal(err)
	}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	w.Close()
	log := &lineLog{}
	read := make(chan struct{})
	go func() { log.read(r); r.Close(); close(read) }()
	exited := make(chan struct{})
	done := make(chan error, 1)
	go func() { err := cmd.Wait(); <-read; close(exited); done <- err }()
	p.t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	return cmd, log, done
}

func waitExit(t *testing.T, done <-chan error, log *lineLog, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("scheduler exited with %v\n%s", err, tail(log.String(), 40))
		}
	case <-time.After(within):
		t.Fatalf("scheduler still running after %v\n%s", within, tail(log.String(), 40))
	}
}

func parseOutcomes(text string) []outcome {
	var outs []outcome
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, "zsched: outcome:") {
			continue
		}
		f := map[string]string{}
		for _, m := range kv.FindAllStringSubmatch(line, -1) {
			f[m[1]] = strings.Trim(m[2], `"`)
		}
		outs = append(outs, outcome{msg: f["msg"], to: f["to"], status: f["status"], ta: f["ta"], final: f["next"] == ""})
	}
	return outs
}

// TestTermDuringDrainThenRestart: SIGTERM while agents are at work exits 0
// within the shutdown bound and leaves no agent behind; a restart finishes
// the queue with every recipient delivered exactly once.
func TestTermDuringDrainThenRestart(t *testing.T) {
	p := newPostoffice(t, "")
	p.rewrite(fmt.Sprintf(`[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp", "-d", "100ms"]
maxring = 2
`, p.agent("slow")))
	rcpts := p.enqueue(30, 1, 10)
	cmd, log, done := p.start("run", "-drain")
	select {
	case <-log.watch("zsched: outcome:"):
	case <-time.After(20 * time.Second):
		t.Fatalf("no delivery\n%s", tail(log.String(), 40))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitExit(t, done, log, 15*time.Second)
	first := parseOutcomes(log.String())
	t.Logf("TERM after the first delivery: exit 0 after %v with %d of %d recipients delivered",
		time.Since(start).Round(time.Millisecond), len(first), len(rcpts))
	if len(first) >= len(rcpts) {
		t.Fatal("everything was delivered before the TERM: the test proves nothing")
	}
	if !strings.Contains(log.String(), "shutting down") {
		t.Fatalf("no shutdown logged\n%s", tail(log.String(), 20))
	}
	for _, o := range first {
		if pid, err := strconv.Atoi(o.ta); err == nil && pid > 0 {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("agent %d outlived the scheduler", pid)
			}
		}
	}
	second, _ := p.drain()
	p.checkDrained(rcpts, append(first, second...), false)
}

// TestOpsCommands drives every operator command through the CLI against a
// running scheduler.
func TestOpsCommands(t *testing.T) {
	p := newPostoffice(t, "")
	p.rewrite(fmt.Sprintf(`[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp"]
queueonly = true
`, p.agent("sink")))
	cli := func(args ...string) (string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := p.scheduler(args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			return stdout.String() + stderr.String(), err
		}
		return stdout.String(), nil
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("scheduler %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out, err := cli("mailq"); err == nil || !strings.Contains(out, "the scheduler is not running") {
		t.Fatalf("mailq without a scheduler: %v\n%s", err, out)
	}
	cfg, err := config.Load(p.config)
	if err != nil {
		t.Fatal(err)
	}
	cmd, log, done := p.start("run")
	waitFor(t, "the control socket", func() bool {
		c, err := control.Dial(cfg.Scheduler.ControlSocket, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	a := strings.TrimSpace(must("enqueue", "smtp/a.test/u@a.test"))
	b := strings.TrimSpace(must("enqueue", "smtp/b.test/v@b.test"))
	waitFor(t, "both threads in mailq", func() bool {
		out := must("mailq")
		return strings.Contains(out, "    smtp/a.test/0\t\tN=1   R=1") && strings.Contains(out, "    smtp/b.test/0\t\tN=1   R=1")
	})
	var q struct {
		Rings []struct {
			Threads []struct{ Host, State string }
		}
	}
	if err := json.Unmarshal([]byte(must("mailq", "-json")), &q); err != nil || len(q.Rings) != 1 || len(q.Rings[0].Threads) != 2 ||
		q.Rings[0].Threads[0].State != "queueonly" {
		t.Fatalf("mailq -json: %+v %v", q, err)
	}
	if out := must("why", a); !strings.Contains(out, "\tqueueonly\tqueueonly destination: waiting for ETRN\t") {
		t.Fatalf("why %s:\n%s", a, out)
	}
	must("hold", "smtp/a.test")
	if out := must("why", a); !strings.Contains(out, "\theld-thread\t") {
		t.Fatalf("why after hold:\n%s", out)
	}
	if out, err := cli("etrn", "a.test"); err == nil || !strings.Contains(out, "didn't start anything") {
		t.Fatalf("etrn of a held destination: %v\n%s", err, out)
	}
	must("release", "smtp/a.test")
	if out := must("etrn", "a.test"); !strings.Contains(out, "OK; an ETRN started something.") {
		t.Fatalf("etrn:\n%s", out)
	}
	waitFor(t, "a.test delivered", func() bool { return !strings.Contains(must("mailq"), "smtp/a.test/") })
	if out := must("qshape"); !regexp.MustCompile(`(?m)^\s+b\.test\s+1\s+1`).MatchString(out) {
		t.Fatalf("qshape:\n%s", out)
	}
	if out := must("flush"); !strings.Contains(out, "flushed 1 threads") {
		t.Fatalf("flush:\n%s", out)
	}
	// kill prints a line per message and a count (issue 17).
	if out := must("kill", b); !strings.Contains(out, "\tkilled\tin core\n") || !strings.Contains(out, "1 messages killed") {
		t.Fatalf("kill:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(p.dir, "po", "transport", b)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("control file of the killed message: %v", err)
	}
	if out, err := cli("why", b); err == nil || !strings.Contains(out, "no such message") {
		t.Fatalf("why of a killed message: %v\n%s", err, out)
	}
	if out := must("reload"); !strings.Contains(out, "reloaded") {
		t.Fatalf("reload:\n%s", out)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-log.watch("configuration reloaded: by=SIGHUP"):
	case <-time.After(10 * time.Second):
		t.Fatalf("SIGHUP did not reload\n%s", tail(log.String(), 20))
	}
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 15*time.Second)
	if out, err := cli("mailq"); err == nil || !strings.Contains(out, "the scheduler is not running") {
		t.Fatalf("mailq after the scheduler stopped: %v\n%s", err, out)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

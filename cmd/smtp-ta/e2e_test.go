package main

import (
	"bufio"
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

	"zsched/ctlfile"
	"zsched/internal/need"
	"zsched/postfix"
	"zsched/report"
)

// outcomeLog follows the scheduler's outcome lines.
type outcomeLog struct {
	mu   sync.Mutex
	byTo map[string][]string // recipient → statuses in order
	pids map[int]bool        // agent pids seen
	all  strings.Builder
}

var kvRE = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)

func (o *outcomeLog) add(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all.WriteString(line + "\n")
	if !strings.Contains(line, "zsched: outcome:") {
		return
	}
	f := map[string]string{}
	for _, m := range kvRE.FindAllStringSubmatch(line, -1) {
		f[m[1]] = strings.Trim(m[2], `"`)
	}
	o.byTo[f["to"]] = append(o.byTo[f["to"]], f["status"])
	if pid, err := strconv.Atoi(f["ta"]); err == nil && pid > 0 {
		o.pids[pid] = true
	}
}

func (o *outcomeLog) count(to, status string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, s := range o.byTo[to] {
		if s == status {
			n++
		}
	}
	return n
}

// waitFor polls cond (the scheduler's log is the observable) until it
// holds or the deadline passes.
func (o *outcomeLog) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			o.mu.Lock()
			tail := o.all.String()
			o.mu.Unlock()
			if len(tail) > 8000 {
				tail = tail[len(tail)-8000:]
			}
			t.Fatalf("%s: not after %v; scheduler log tail:\n%s", what, timeout, tail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The whole system against real Postfix servers: the scheduler feeds
// smtp-ta, which delivers 100 messages to five domains; one address is
// rejected (error2 and its d line); one destination is down (deferall,
// retried) until its server comes up, and then delivered.
func TestEndToEndWithPostfix(t *testing.T) {
	t.Parallel()
	pf := startPostfix(t, postfix.Config{Reject: map[string]string{"bad@d1.test": "550 5.1.1 user unknown"}})
	downPort, err := postfix.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	po := filepath.Join(dir, "po")
	routes := filepath.Join(dir, "routes")
	if err := os.WriteFile(routes, []byte(fmt.Sprintf("down.test [127.0.0.1]:%d\n* [%s]:%s\n",
		downPort, "127.0.0.1", strings.TrimPrefix(pf.Addr, "127.0.0.1:"))), 0o644); err != nil {
		t.Fatal(err)
	}
	agentLog := filepath.Join(dir, "smtp-ta.log")
	cfg := fmt.Sprintf(`[scheduler]
postoffice = %q
scaninterval = "1s"
log_level = "info"
shutdown_timeout = "5s"

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp", "-h", "zsched.test", "-routes", %q, "-l", %q]
interval = "1s"
retries = [1]
skew = 1
maxring = 10
`, po, binary(t, "smtp-ta"), routes, agentLog)
	cfgPath := filepath.Join(dir, "scheduler.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	sp := &spool{t: t, Spool: &ctlfile.Spool{Root: po, NoSync: true}}
	if err := sp.Init(); err != nil {
		t.Fatal(err)
	}
	var good []string
	for m := 0; m < 100; m++ {
		var rcpts []any
		for r := 0; r <= m%3; r++ {
			a := fmt.Sprintf("u%d.%d@d%d.test", m, r, (m+r)%5)
			rcpts = append(rcpts, a)
			good = append(good, a)
		}
		sp.enqueue(fmt.Sprintf("message %d\n", m), rcpts...)
	}
	mixed := sp.enqueue("mixed\n", "bad@d1.test", "held@down.test")
	var down []string
	for m := 0; m < 3; m++ {
		a := fmt.Sprintf("w%d@down.test", m)
		down = append(down, a)
		sp.enqueue("waiting\n", a)
	}
	down = append(down, "held@down.test")

	cmd := exec.Command(binary(t, "scheduler"), "run", "-config", cfgPath)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := &outcomeLog{byTo: map[string][]string{}, pids: map[int]bool{}}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			log.add(sc.Text())
		}
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		<-readDone
		cmd.Wait()
	}
	t.Cleanup(stop)

	t0 := time.Now()
	// Every good recipient delivered, the bad one failed, the down
	// destination deferred at least twice (so retried) per recipient.
	log.waitFor(t, "first pass", 60*time.Second, func() bool {
		for _, a := range good {
			if log.count(a, "ok") == 0 {
				return false
			}
		}
		for _, a := range down {
			if log.count(a, "deferall") < 2 {
				return false
			}
		}
		return log.count("bad@d1.test", "error2") == 1
	})
	t.Logf("first pass, with two rounds of deferall for down.test: %v", time.Since(t0))
	f := sp.read(mixed)
	if len(f.Diags) != 1 {
		t.Fatalf("%d d lines in the mixed message, want 1", len(f.Diags))
	}
	i, _ := f.RcptAt(f.Diags[0].RcptOffset)
	n := report.ParseNotary(f.Diags[0].Notary)
	if f.Rcpts[i].User != "bad@d1.test" || f.Rcpts[i].Status != ctlfile.Failed || n.Status != "5.1.1" || n.Action != "failed" {
		t.Errorf("d line for %s (status %q): %+v", f.Rcpts[i].User, f.Rcpts[i].Status, n)
	}
	for _, r := range f.Rcpts {
		if r.User == "held@down.test" && r.Status != ctlfile.Pending {
			t.Errorf("held@down.test marked %q while its server is down", r.Status)
		}
	}

	// The down destination's server comes up on its port.
	need.Met(t, "the postfix package, as root", postfix.Available())
	t0 = time.Now()
	pf2, err := postfix.Start(postfix.Config{Dir: reachable(t), Port: downPort})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pf2.Stop() })
	log.waitFor(t, "delivery once the server is up", 60*time.Second, func() bool {
		for _, a := range down {
			if log.count(a, "ok") == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("down.test delivered %v after its server came up", time.Since(t0))
	stop()

	// Postfix saw each recipient exactly once: no duplicates, none lost.
	s1, err := pf.WaitSent(len(good), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := pf2.WaitSent(len(down), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range good {
		if s1.Sent[a] != 1 || log.count(a, "ok") != 1 {
			t.Errorf("%s: delivered %d times, %d ok outcomes; want 1", a, s1.Sent[a], log.count(a, "ok"))
		}
	}
	for _, a := range down {
		if s2.Sent[a] != 1 {
			t.Errorf("%s: delivered %d times by the second server", a, s2.Sent[a])
		}
	}
	if s1.Sent["bad@d1.test"] != 0 || s1.Rejected["bad@d1.test"] == "" {
		t.Errorf("bad@d1.test: sent %d, rejected %q", s1.Sent["bad@d1.test"], s1.Rejected["bad@d1.test"])
	}
	// Connections were reused: far fewer sessions than messages.
	t.Logf("%d recipients in %d SMTP sessions to the first server", len(s1.Sent), s1.Connects)
	if s1.Connects >= 100 {
		t.Errorf("%d sessions for 100 messages: no connection reuse", s1.Connects)
	}
	// The queue holds none of the messages any more, and no agent is left.
	for _, sub := range []string{"transport", "queue"} {
		filepath.WalkDir(filepath.Join(po, sub), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				if cf, err := ctlfile.Parse(d.Name(), mustRead(t, p)); err == nil && !cf.IsBounce() && sub == "transport" {
					t.Errorf("control file left: %s", p)
				}
			}
			return nil
		})
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for pid := range log.pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("agent pid %d still exists after the scheduler stopped", pid)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Error(err)
	}
	return b
}

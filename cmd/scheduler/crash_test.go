package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/ctlfile"
	"zsched/testagents"
)

var (
	crashLong = flag.Bool("crash.long", false, "crash test at full size: 20 000 recipients, 10 scheduler kills")
	crashSeed = flag.Int64("crash.seed", 0, "crash test seed (0: the time)")
)

// TestCrashSafety drains a queue through a sink agent that logs every
// delivery before marking it, SIGKILLs the scheduler at random moments
// (and random agents at others) and restarts it each time. At the end every
// recipient must have been delivered at least once, and the duplicates
// (deliveries whose mark the kill prevented) must not exceed what was in
// flight at the kills: for a scheduler kill the stale locks its dead agents
// left, for an agent kill its outstanding jobs.
func TestCrashSafety(t *testing.T) {
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	msgs, schedKills, agentKills := 200, 3, 2
	if *crashLong {
		msgs, schedKills, agentKills = 2000, 10, 5
	}
	const perMsg, domains, maxring, overfeed = 10, 20, 8, 1
	seed := *crashSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d (-crash.seed to repeat)", seed)

	dir := t.TempDir()
	po := filepath.Join(dir, "po")
	testagents.LeakCheck(t, filepath.Join(po, "transport"))
	logPath := filepath.Join(dir, "deliveries.log")
	cfgPath := filepath.Join(dir, "scheduler.toml")
	cfg := fmt.Sprintf(`[scheduler]
postoffice = %q
scaninterval = "1s"
log_level = "warn"
shutdown_timeout = "5s"

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp", "-log", %q]
interval = "1s"
retries = [1]
maxring = %d
overfeed = %d
`, po, binaries.agents["sink"], logPath, maxring, overfeed)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Every recipient at its own host within its message: one recipient per
	// vertex, so jobs in flight and recipients in flight are the same count.
	spool := &ctlfile.Spool{Root: po, NoSync: true}
	if err := spool.Init(); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for m := 0; m < msgs; m++ {
		msg := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: crash\n"), Body: []byte("x\n")}
		for r := 0; r < perMsg; r++ {
			u := fmt.Sprintf("u%d.%d@d%d.test", m, r, (m+r)%domains)
			msg.Rcpts = append(msg.Rcpts, ctlfile.Address{Channel: "smtp", Host: fmt.Sprintf("d%d.test", (m+r)%domains), User: u})
			want[u] = true
		}
		if _, err := spool.Enqueue(msg); err != nil {
			t.Fatal(err)
		}
	}
	total := len(want)

	// Kill moments, as numbers of deliveries logged; true = the scheduler.
	type kill struct {
		at    int
		sched bool
	}
	var plan []kill
	for i := 0; i < schedKills+agentKills; i++ {
		plan = append(plan, kill{at: total/20 + rng.Intn(total*17/20), sched: i < schedKills})
	}
	slices.SortFunc(plan, func(a, b kill) int { return a.at - b.at })

	counter := &logCounter{path: logPath}
	run := func() (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(filepath.Join(binaries.dir, "scheduler"), "run", "-drain")
		cmd.Env = append(os.Environ(), "ZSCHED_CONFIG="+cfgPath)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, &stderr
	}
	exited := func(cmd *exec.Cmd) <-chan error {
		ch := make(chan error, 1)
		go func() { ch <- cmd.Wait() }()
		return ch
	}

	cmd, stderr := run()
	done := exited(cmd)
	sKills, aKills, inflight, finished := 0, 0, 0, false
	for _, k := range plan {
		if finished {
			break
		}
		// Poll the delivery log, the only observable progress of a
		// scheduler that logs nothing per delivery at this level.
		deadline := time.Now().Add(2 * time.Minute)
		for counter.count() < k.at && !finished {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("scheduler: %v\n%s", err, tail(stderr.String(), 30))
				}
				finished = true
			case <-time.After(2 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no progress: %d deliveries logged, waiting for %d\n%s", counter.count(), k.at, tail(stderr.String(), 30))
			}
		}
		if finished {
			break
		}
		if !k.sched {
			pids := agentsIn(po)
			if len(pids) == 0 {
				continue
			}
			syscall.Kill(pids[rng.Intn(len(pids))], syscall.SIGKILL)
			aKills++
			inflight += overfeed + 1
			continue
		}
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		sKills++
		// The orphaned agents see EOF on their input and must exit by
		// themselves; the locks they leave are what this kill had in flight.
		if left := waitGone(po, 10*time.Second); len(left) > 0 {
			killAll(left)
			t.Fatalf("agents %v outlived their scheduler by 10s", left)
		}
		n, err := staleLocks(filepath.Join(po, "transport"))
		if err != nil {
			t.Fatal(err)
		}
		inflight += n
		cmd, stderr = run()
		done = exited(cmd)
	}
	if !finished {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("scheduler: %v\n%s", err, tail(stderr.String(), 30))
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("the last run did not drain\n%s", tail(stderr.String(), 30))
		}
	}
	if left := waitGone(po, 10*time.Second); len(left) > 0 {
		killAll(left)
		t.Fatalf("agents %v outlived the drain", left)
	}

	seen, lines, err := readDeliveries(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for u := range want {
		if seen[u] == 0 {
			lost++
		}
	}
	for u := range seen {
		if !want[u] {
			t.Errorf("delivered %q, which was never queued", u)
		}
	}
	dups := lines - len(seen)
	t.Logf("recipients %d, delivered %d, lost %d, duplicates %d (bound: %d in flight at the kills), kills: scheduler %d, agent %d",
		total, len(seen), lost, dups, inflight, sKills, aKills)
	if lost > 0 {
		t.Fatalf("%d recipients lost", lost)
	}
	if dups > inflight {
		t.Fatalf("%d duplicates, more than the %d jobs in flight at the kills", dups, inflight)
	}
	if sKills == 0 {
		t.Fatal("the scheduler was never killed: the test proves nothing")
	}
	for _, sub := range []string{"transport", "queue"} {
		if n := countFiles(filepath.Join(po, sub)); n > 0 {
			t.Fatalf("%d files left in %s", n, sub)
		}
	}
}

// logCounter counts the lines of a growing file, reading only what is new.
type logCounter struct {
	path string
	off  int64
	n    int
}

func (c *logCounter) count() int {
	f, err := os.Open(c.path)
	if err != nil {
		return c.n
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, c.off, 1<<40))
	if err != nil {
		return c.n
	}
	// Only whole lines: a writer may be between its bytes and its "\n"
	// (the sink writes each line with one write, so it never is).
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		c.n += bytes.Count(b[:i+1], []byte{'\n'})
		c.off += int64(i + 1)
	}
	return c.n
}

// readDeliveries returns how often each recipient was delivered and the
// number of deliveries.
func readDeliveries(path string) (map[string]int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	seen := map[string]int{}
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		_, user, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			return nil, 0, fmt.Errorf("delivery log: bad line %q", sc.Text())
		}
		seen[user]++
		n++
	}
	return seen, n, sc.Err()
}

// staleLocks counts r lines locked by a process that no longer exists.
func staleLocks(transport string) (int, error) {
	n := 0
	err := filepath.WalkDir(transport, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "r ~") || len(l) < 9 {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimSpace(l[3:9]))
			if err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
				n++
			}
		}
		return nil
	})
	return n, err
}

// agentsIn returns the processes whose working directory is the
// postoffice's transport directory: the agents of that postoffice,
// including orphans whose scheduler is gone.
func agentsIn(po string) []int {
	want := filepath.Join(po, "transport")
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == want {
			if isZombie(pid) {
				continue // exited; its parent has yet to reap it
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// waitGone waits up to d for the postoffice's agents to exit and returns
// those still running.
func waitGone(po string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		left := agentsIn(po)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		<-time.After(10 * time.Millisecond)
	}
}

func killAll(pids []int) {
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func countFiles(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
			n++
		}
		return nil
	})
	return n
}

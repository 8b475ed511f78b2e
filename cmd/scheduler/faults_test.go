package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAgentFaults is the agent-fault matrix: for each way a transport agent
// can misbehave, a scheduler runs it on channel "bad" beside a healthy sink
// on "smtp", and must
//   - log the fault (the line each case names),
//   - contain it: the bad agent is ended and no process of it survives,
//   - reschedule the work: the bad recipients are deferred with a retry time
//     and tried again (attempts=2), never taken as delivered, and are still
//     pending in their control files after the scheduler stops,
//   - stay responsive: the healthy channel delivers meanwhile, also a
//     message queued after the fault, and TERM ends the scheduler with 0.
func TestAgentFaults(t *testing.T) {
	cases := []struct {
		name   string
		agent  string
		args   []string
		clause string // more attributes of the bad clause
		log    []string
	}{
		{name: "crash", agent: "crash", args: []string{"-after", "0"},
			log: []string{"transport unavailable", "with 1 jobs outstanding"}},
		{name: "hang-busy", agent: "hang", clause: `jobtimeout = "1s"`,
			log: []string{"killing agent", "job timeout"}},
		{name: "ignore-sigterm", agent: "hang", args: []string{"-ignore-term"}, clause: `jobtimeout = "1s"`,
			log: []string{"killing agent", "job timeout"}},
		{name: "garbage", agent: "garbage",
			log: []string{"misformed line from agent"}},
		{name: "line-over-64KiB", agent: "longline",
			log: []string{"killing agent", "line over 65536 bytes"}},
		{name: "report-other-message", agent: "wrongreport",
			log: []string{"misformed line from agent", "recipient not fed to this agent"}},
		{name: "report-nonexistent", agent: "wrongreport",
			log: []string{"misformed line from agent", "unknown message"}},
		{name: "resync-outside-postoffice", agent: "badresync",
			log: []string{"resync outside the postoffice", "/etc/passwd"}},
		{name: "stops-reading-stdin", agent: "deaf", clause: `jobtimeout = "1s"`,
			log: []string{"killing agent", "job timeout"}},
		{name: "hungry-flood-without-reading", agent: "deaf", args: []string{"-flood"},
			log: []string{"killing agent"}},
		{name: "closes-stdout", agent: "mute", clause: `jobtimeout = "1s"`,
			log: []string{"killing agent", "job timeout"}},
		{name: "closes-stdout-pipes", agent: "mute", clause: "jobtimeout = \"1s\"\nstdio = \"pipes\"",
			log: []string{"killing agent", "job timeout"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			argv := []string{strconv.Quote(binaries.agents[c.agent]), `"-c"`, `"bad"`}
			for _, a := range c.args {
				argv = append(argv, strconv.Quote(a))
			}
			p := newPostoffice(t, "")
			p.rewrite(fmt.Sprintf(`[[clause]]
select = "bad/*"
command = [%s]
interval = "1s"
retries = [1]
maxring = 2
%s

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp"]
`, strings.Join(argv, ", "), c.clause, p.agent("sink")))
			passwd, _ := os.Stat("/etc/passwd")
			f := runFault(t, p, c.log)
			if c.agent == "badresync" {
				if now, _ := os.Stat("/etc/passwd"); passwd != nil && (now == nil || !now.ModTime().Equal(passwd.ModTime())) {
					t.Error("/etc/passwd changed")
				}
				if _, err := os.Stat(filepath.Join(p.dir, "po", "x")); err == nil {
					t.Error("a file named by #resync ../x appeared")
				}
			}
			t.Logf("%s: %s; bad recipients deferred %d times, max attempts %d; healthy delivered %d",
				c.name, f.what, f.deferred, f.attempts, f.delivered)
		})
	}
}

type faultRun struct {
	what               string // the log line that showed the fault
	deferred, attempts int
	delivered          int
}

var attemptsRe = regexp.MustCompile(`attempts=(\d+)`)

// runFault queues messages with one bad and one healthy recipient each,
// runs the scheduler until the fault is logged, the bad recipients were
// retried and all healthy mail (also mail queued after the fault) went out,
// then stops it and checks what must hold afterwards.
func runFault(t *testing.T, p *postoffice, want []string) faultRun {
	t.Helper()
	const n = 3
	for i := 0; i < n; i++ {
		if out, err := p.scheduler("enqueue", "-from", "s@example.org",
			fmt.Sprintf("bad/b.test/b%d@b.test", i), fmt.Sprintf("ok%d@good.test", i)).CombinedOutput(); err != nil {
			t.Fatalf("enqueue: %v\n%s", err, out)
		}
	}
	cmd := p.scheduler("run")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	po := filepath.Join(p.dir, "po")
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var r faultRun
	var log []string
	delivered := map[string]bool{}
	late := false
	deadline := time.After(60 * time.Second)
	for r.what == "" || r.attempts < 2 || len(delivered) < n+1 {
		if r.what != "" && !late {
			// Queued after the fault: the scheduler must still take new mail.
			late = true
			if out, err := p.scheduler("enqueue", "-from", "s@example.org", "late@good.test").CombinedOutput(); err != nil {
				t.Fatalf("enqueue: %v\n%s", err, out)
			}
		}
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("scheduler exited early:\n%s", tail(strings.Join(log, "\n"), 30))
			}
			log = append(log, l)
			if r.what == "" && containsAll(l, want) {
				r.what = l[strings.Index(l, want[0]):]
				if len(r.what) > 160 {
					r.what = r.what[:160] + "…"
				}
			}
			if !strings.Contains(l, "zsched: outcome:") {
				continue
			}
			if strings.Contains(l, " channel=bad ") {
				if strings.Contains(l, "status=ok") {
					t.Fatalf("a bad recipient was taken as delivered: %s", l)
				}
				if strings.Contains(l, "status=deferred") && !strings.Contains(l, `next=""`) {
					r.deferred++
				}
				if m := attemptsRe.FindStringSubmatch(l); m != nil {
					a, _ := strconv.Atoi(m[1])
					r.attempts = max(r.attempts, a)
				}
			} else if strings.Contains(l, "status=ok") {
				for i := 0; i < n; i++ {
					if strings.Contains(l, fmt.Sprintf("to=ok%d@good.test ", i)) {
						delivered[fmt.Sprint(i)] = true
					}
				}
				if late && strings.Contains(l, "to=late@good.test ") {
					delivered["late"] = true
				}
			}
		case <-deadline:
			var good []string
			for _, l := range log {
				if !strings.Contains(l, "channel=bad") && !strings.Contains(l, "exited") {
					good = append(good, l)
				}
			}
			t.Fatalf("timed out: fault logged %q, bad attempts %d, healthy delivered %v (want %d)\n%s",
				r.what, r.attempts, delivered, n+1, tail(strings.Join(good, "\n"), 40))
		}
	}
	r.delivered = len(delivered)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		log = append(log, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scheduler after TERM: %v\n%s", err, tail(strings.Join(log, "\n"), 30))
	}
	if left := waitGone(po, 5*time.Second); len(left) > 0 {
		t.Fatalf("agent processes %v outlived the scheduler", left)
	}
	// Nothing lost: every bad recipient is still pending (blank status, no
	// stale lock left behind) in its control file.
	pending := 0
	filepath.WalkDir(filepath.Join(po, "transport"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "r ") && strings.Contains(l, " bad ") {
				if l[2] != ' ' {
					t.Errorf("%s: bad recipient not pending after the run: %q", path, l)
				}
				pending++
			}
		}
		return nil
	})
	if pending != n {
		t.Fatalf("%d bad recipients pending on disk, want %d", pending, n)
	}
	return r
}

func containsAll(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

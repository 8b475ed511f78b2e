package tacheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"zsched/agent"
	"zsched/internal/agentbin"
)

var agents map[string]string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// bins are the agents (and cmd/smtp-ta) the tests check: the agents built
// before the tests run, all removed at exit.
var bins agentbin.Set

func run(m *testing.M) int {
	defer bins.Remove()
	var err error
	if agents, err = bins.Agents(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

var allModes = []agent.Stdio{agent.Socketpair, agent.Pipes, agent.PTY}

// check runs the kit on command over every stdio mode and returns the
// results by verdict: the names of the failed and skipped cases per mode.
func check(t *testing.T, modes []agent.Stdio, command ...string) (failed, skipped map[agent.Stdio][]string, results []Result) {
	t.Helper()
	res, err := Run(context.Background(), Config{
		Command: command,
		Modes:   modes,
		// Generous: only a failing agent waits them out, and a loaded
		// machine makes a shell agent slow.
		Timeout:   20 * time.Second,
		ExitBound: 20 * time.Second,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := len(Cases()) * len(modes); len(res) != want {
		t.Fatalf("%d results, want %d (every case over every mode)", len(res), want)
	}
	failed = map[agent.Stdio][]string{}
	skipped = map[agent.Stdio][]string{}
	for _, r := range res {
		switch r.Verdict {
		case Fail:
			failed[r.Stdio] = append(failed[r.Stdio], r.Case)
		case Skip:
			skipped[r.Stdio] = append(skipped[r.Stdio], r.Case)
		case Pass:
		default:
			t.Errorf("%s/%s: verdict %v", r.Stdio, r.Case, r.Verdict)
		}
	}
	return failed, skipped, res
}

func logFailures(t *testing.T, res []Result) {
	t.Helper()
	for _, r := range res {
		if r.Verdict == Fail {
			t.Logf("%s %s: %s\n%s", r.Stdio, r.Case, r.Why, strings.Join(r.Transcript, "\n"))
		}
	}
}

// The project's own agents keep the protocol, in every case; none may even
// be skipped, since all of them read the body after locking, so the lock
// case sees their locks. The agents built on package ta share its I/O, so
// one of them (sink) goes over every stdio mode, the others over the
// default socketpair; the shell agent does its own I/O and also goes over
// a pty, the mode that changes what a read returns.
func TestProjectAgentsConform(t *testing.T) {
	sp := []agent.Stdio{agent.Socketpair}
	for _, tc := range []struct {
		modes []agent.Stdio
		cmd   []string
	}{
		{allModes, []string{agents["sink"], "-c", "$channel"}},
		{sp, []string{agents["flaky"], "-c", "$channel", "-p", "0.5"}},
		{sp, []string{agents["deferall"], "-c", "$channel"}},
		{sp, []string{agents["slow"], "-c", "$channel", "-d", "1ms"}},
		{[]agent.Stdio{agent.Socketpair, agent.PTY}, []string{agents[agentbin.Script], "-c", "$channel"}},
		// Host-bound, as a clause with a standalone $host starts it: job
		// lines then carry no host.
		{sp, []string{agents["sink"], "-c", "$channel", "$host"}},
	} {
		t.Run(filepath.Base(tc.cmd[0])+strings.Join(tc.cmd[1:], ""), func(t *testing.T) {
			t.Parallel()
			failed, skipped, res := check(t, tc.modes, tc.cmd...)
			if len(failed) > 0 || len(skipped) > 0 {
				logFailures(t, res)
				t.Errorf("failed %v, skipped %v; want every case passed", failed, skipped)
			}
		})
	}
}

// jobCases are the cases that hand the agent a job line.
func jobCases() []string {
	var out []string
	for _, c := range Cases() {
		switch c.Name {
		case "first-hungry", "end-empty-line", "end-eof", "partial-line":
		default:
			out = append(out, c.Name)
		}
	}
	return out
}

// garbage answers every job line with misformed lines, and every second
// one with an extra #hungry, but starts, idles and ends correctly: it must
// fail exactly the cases that feed it a job. (Its I/O is plain Go stdio, so
// one mode shows it.)
func TestGarbageFailsEveryJobCase(t *testing.T) {
	t.Parallel()
	modes := []agent.Stdio{agent.Socketpair}
	failed, skipped, res := check(t, modes, agents["garbage"], "-c", "$channel")
	want := jobCases()
	for _, m := range modes {
		if !slices.Equal(failed[m], want) {
			t.Errorf("%s: failed %v, want %v", m, failed[m], want)
		}
		if len(skipped[m]) > 0 {
			t.Errorf("%s: skipped %v", m, skipped[m])
		}
	}
	// A failure carries the transcript that shows it.
	for _, r := range res {
		if r.Verdict == Fail && r.Case == "report-keys" {
			if !strings.Contains(r.Why, "misformed line") || !transcriptHas(r, "TA> garbage without any tab") {
				t.Errorf("%s report-keys: why %q, transcript:\n%s", r.Stdio, r.Why, strings.Join(r.Transcript, "\n"))
			}
		}
	}
}

func transcriptHas(r Result, s string) bool {
	for _, l := range r.Transcript {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// A hand-written shell agent that leaves its PID in the r lines it marks
// breaks exactly one rule, and only the marks case may say so.
// The rule is about the file, not the stream, so one stdio mode will do.
func TestShellAgentBreakingOneRule(t *testing.T) {
	t.Parallel()
	sh, err := filepath.Abs("testdata/pidkept.sh")
	if err != nil {
		t.Fatal(err)
	}
	modes := []agent.Stdio{agent.Socketpair}
	failed, skipped, res := check(t, modes, sh, "-c", "$channel")
	for _, m := range modes {
		if !slices.Equal(failed[m], []string{"marks"}) || len(skipped[m]) > 0 {
			logFailures(t, res)
			t.Errorf("%s: failed %v, skipped %v; want only marks failed", m, failed[m], skipped[m])
		}
	}
	for _, r := range res {
		if r.Case == "marks" && !strings.Contains(r.Why, "PID columns still hold") {
			t.Errorf("%s marks: %q does not name the PID columns", r.Stdio, r.Why)
		}
	}
}

// An agent that dies in the middle of its first delivery fails the cases
// that give it a job, and shows its exit in the failure.
func TestCrashingAgentFails(t *testing.T) {
	res, err := Run(context.Background(), Config{
		Command: []string{agents["crash"], "-c", "$channel", "-after", "1"},
		Modes:   []agent.Stdio{agent.Socketpair},
		Cases:   []string{"first-hungry", "report-keys", "resync-missing"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Verdict{}
	for _, r := range res {
		got[r.Case] = r.Verdict
		if r.Case == "report-keys" && !strings.Contains(r.Why, "exited (status 1)") {
			t.Errorf("report-keys: %q does not say the agent exited", r.Why)
		}
	}
	want := map[string]Verdict{"first-hungry": Pass, "report-keys": Fail, "resync-missing": Pass}
	for c, v := range want {
		if got[c] != v {
			t.Errorf("%s: %v, want %v", c, got[c], v)
		}
	}
}

// The lock case sees a held lock only while the agent blocks on the body:
// an agent that never opens the body is skipped, not failed.
func TestLockCaseSkipsAgentThatNeverReadsTheBody(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "nobody.sh")
	// It answers every job with #resync and never opens a file: the kit
	// must neither wait for it to read the body nor fail it.
	body := "#!/bin/sh\nwhile :; do printf '#hungry\\n'; IFS= read -r l || exit 0; [ -z \"$l\" ] && exit 0; case $l in '#'*) ;; *) printf '#resync %s\\n' \"${l%%\t*}\" ;; esac; done\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{
		Command: []string{script},
		Modes:   []agent.Stdio{agent.Pipes},
		Cases:   []string{"lock"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Verdict != Skip {
		t.Fatalf("got %+v, want one Skip", res)
	}
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no command":      {},
		"no program":      {Command: []string{"A=b"}},
		"missing program": {Command: []string{"/nonexistent/agent"}},
		"unknown case":    {Command: []string{agents["sink"]}, Cases: []string{"no-such-case"}},
		"two-word host":   {Command: []string{agents["sink"]}, Host: "a b"},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: error %v, want ErrConfig", name, err)
		}
	}
	if _, err := ParseModes("socketpair,tty"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseModes(tty): %v, want ErrConfig", err)
	}
	if m, err := ParseModes("all"); err != nil || len(m) != 3 {
		t.Errorf("ParseModes(all) = %v, %v", m, err)
	}
}

// A cancelled context stops the run between cases, and every agent it
// started is gone.
func TestRunStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	res, err := Run(ctx, Config{
		Command: []string{agents["sink"], "-c", "$channel"},
		OnResult: func(Result) {
			n++
			if n == 2 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) || len(res) != 2 {
		t.Fatalf("got %d results, %v; want 2 and context.Canceled", len(res), err)
	}
}

// An agent that answers #idle with two #hungry breaks the accounting the
// scheduler's overfeed relies on. Made from agent.sh by one edit, it must
// fail the cases that send #idle and then count or feed on; end-after-work
// sends #idle too, but only judges the exit.
func TestExtraHungryIsCaught(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(agents[agentbin.Script])
	if err != nil {
		t.Fatal(err)
	}
	const loop = "'#'*) continue ;;"
	if strings.Count(string(src), loop) != 1 {
		t.Fatalf("agent.sh no longer has one %q in its main loop", loop)
	}
	broken := strings.Replace(string(src), loop, "'#idle') printf '#hungry\\n'; continue ;;\n\t"+loop, 1)
	script := filepath.Join(t.TempDir(), "twohungry.sh")
	if err := os.WriteFile(script, []byte(broken), 0o755); err != nil {
		t.Fatal(err)
	}
	// The cases that send #idle, and two that do not, as controls.
	res, err := Run(context.Background(), Config{
		Command: []string{script, "-c", "$channel"},
		Modes:   []agent.Stdio{agent.Socketpair},
		Cases:   []string{"first-hungry", "early-job", "hungry-per-line", "overfeed", "idle-resume", "end-after-work"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, r := range res {
		if r.Verdict != Pass {
			failed = append(failed, r.Case)
		}
	}
	if want := []string{"hungry-per-line", "overfeed", "idle-resume"}; !slices.Equal(failed, want) {
		logFailures(t, res)
		t.Errorf("not passed: %v; want %v", failed, want)
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/ctlfile"
)

// Issue 17's tests: against the built binary and a running daemon, over
// its control socket, as an operator would.

// queueDoc is `scheduler queue -json`.
type queueDoc struct {
	Messages []struct {
		ID         string    `json:"id"`
		Path       string    `json:"path"`
		Arrival    time.Time `json:"arrival"`
		Sender     string    `json:"sender"`
		InCore     bool      `json:"in_core"`
		Held       bool      `json:"held"`
		Recipients []struct {
			Address  string     `json:"address"`
			Host     string     `json:"host"`
			State    string     `json:"state"`
			Until    *time.Time `json:"until"`
			Attempts int        `json:"attempts"`
		} `json:"recipients"`
	} `json:"messages"`
	Total struct {
		Messages, Recipients, InCore int
	} `json:"total"`
}

// cli runs a scheduler command and returns its output and exit code.
func (p *postoffice) cli(stdin string, args ...string) (string, int) {
	p.t.Helper()
	cmd := p.scheduler(args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		p.t.Fatalf("%v: %v", args, err)
	}
	return string(out), 0
}

// mustCLI runs a command that must succeed.
func (p *postoffice) mustCLI(args ...string) string {
	p.t.Helper()
	out, code := p.cli("", args...)
	if code != 0 {
		p.t.Fatalf("scheduler %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// listing is `scheduler queue -json`, parsed.
func (p *postoffice) listing(args ...string) queueDoc {
	p.t.Helper()
	cmd := p.scheduler(append([]string{"queue", "-json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		p.t.Fatalf("queue -json: %v\n%s", err, stderr.String())
	}
	var q queueDoc
	if err := json.Unmarshal(out, &q); err != nil {
		p.t.Fatalf("queue -json is not one JSON document: %v\n%.2000s", err, out)
	}
	return q
}

// until polls cond (a failure guard, not a wait: the deadline is generous).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a synchronisation
	}
}

// waitLine waits for a line containing text in the scheduler's log.
func waitLine(t *testing.T, log *lineLog, text string) {
	t.Helper()
	select {
	case <-log.watch(text):
	case <-time.After(60 * time.Second):
		t.Fatalf("no log line with %q\n%s", text, tail(log.String(), 30))
	}
}

// delivered reads the sink's delivery log: address → times delivered.
func delivered(t *testing.T, path string) map[string]int {
	t.Helper()
	m, _, err := readDeliveries(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if m == nil {
		m = map[string]int{}
	}
	return m
}

// TestHoldsSurviveRestart: a destination held by a glob (also for mail
// that arrives later) and a held message stay held across SIGKILL and
// SIGTERM restarts, until released; each hold is logged once when set,
// released and restored.
func TestHoldsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	dlog := filepath.Join(dir, "deliveries.log")
	p := newPostoffice(t, "")
	p.rewrite(fmt.Sprintf("\n[[clause]]\nselect = \"smtp/*\"\ncommand = [%q, \"-c\", \"smtp\", \"-log\", %q]\n",
		p.agent("sink"), dlog))
	po := p.postofficeDir()

	cmd, log, done := p.start("run")
	waitLine(t, log, "queue read at start")
	// A glob: every host under held.test, on smtp.
	out := p.mustCLI("hold", "smtp/*.held.test")
	if !strings.Contains(out, "holding smtp/*.held.test") {
		t.Fatalf("hold: %s", out)
	}
	// The message to hold goes to a held destination first, so it cannot
	// leave before its own hold is set.
	p.mustCLI("hold", "smtp/msg.test")
	held := strings.TrimSpace(p.mustCLI("enqueue", "-from", "s@example.org", "m@msg.test"))
	p.mustCLI("enqueue", "-from", "s@example.org", "a@x.held.test")
	// By its bare name: unambiguous, so accepted.
	p.mustCLI("hold", held)
	p.mustCLI("release", "smtp/msg.test")

	sentinel := func(n int) {
		t.Helper()
		addr := fmt.Sprintf("s%d@free.test", n)
		p.mustCLI("enqueue", "-from", "s@example.org", addr)
		until(t, addr+" delivered", func() bool { return delivered(t, dlog)[addr] > 0 })
	}
	check := func(when string) {
		t.Helper()
		got := delivered(t, dlog)
		for _, addr := range []string{"m@msg.test", "a@x.held.test", "c@y.held.test"} {
			if got[addr] > 0 {
				t.Fatalf("%s: held mail to %s was delivered\n%s", when, addr, tail(log.String(), 30))
			}
		}
		q := p.listing("-held")
		if len(q.Messages) < 2 {
			t.Fatalf("%s: queue -held lists %d messages, want the held ones: %+v", when, len(q.Messages), q.Messages)
		}
	}
	sentinel(1)
	check("before the restarts")
	var heldID string
	for _, m := range p.listing().Messages {
		if m.Path == held {
			heldID = m.ID
		}
	}
	if !strings.HasPrefix(heldID, held+".") {
		t.Fatalf("queue id %q of %s is not its name and generation", heldID, held)
	}

	// SIGKILL: the scheduler and its agents die at once.
	cmd.Process.Signal(syscall.SIGKILL)
	<-done // start's goroutine waits for the process: one Wait only
	killAll(agentsIn(po))
	cmd, log, done = p.start("run")
	waitLine(t, log, "queue read at start")
	// Mail that arrives later for a held destination is held too.
	p.mustCLI("enqueue", "-from", "s@example.org", "c@y.held.test")
	sentinel(2)
	check("after SIGKILL")
	for _, want := range []string{`hold restored: dest="smtp/*.held.test"`, "hold restored: msg=" + heldID} {
		waitLine(t, log, want)
		if n := strings.Count(log.String(), want); n != 1 {
			t.Fatalf("after SIGKILL: %d lines %q, want 1\n%s", n, want, tail(log.String(), 30))
		}
	}

	// SIGTERM.
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 30*time.Second)
	cmd, log, done = p.start("run")
	waitLine(t, log, "queue read at start")
	sentinel(3)
	check("after SIGTERM")

	// A reload keeps them.
	p.mustCLI("reload")
	sentinel(4)
	check("after a reload")

	// Release: everything goes.
	p.mustCLI("release", "smtp/*.held.test")
	p.mustCLI("release", heldID)
	until(t, "the released mail delivered", func() bool {
		got := delivered(t, dlog)
		return got["m@msg.test"] == 1 && got["a@x.held.test"] == 1 && got["c@y.held.test"] == 1
	})
	for _, want := range []string{`release: thread="smtp/*.held.test"`, "release: msg=" + heldID + " in_core=true"} {
		waitLine(t, log, want) // the log is written in blocks at most 50 ms old
		if n := strings.Count(log.String(), want); n != 1 {
			t.Fatalf("%d lines %q, want 1\n%s", n, want, tail(log.String(), 30))
		}
	}
	if out, code := p.cli("", "release", "smtp/*.held.test"); code != 1 || !strings.Contains(out, "no hold on") {
		t.Fatalf("release of nothing held: exit %d: %s", code, out)
	}
	// Globs mean the same in flush: a bare host is every channel's.
	if out, code := p.cli("", "flush", "nothing.test"); code != 1 || !strings.Contains(out, "no thread in core matches") {
		t.Fatalf("flush of nothing: exit %d: %s", code, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 30*time.Second)
}

// TestQueueIDsUnique: 5 000 messages queued while others complete — so
// that inode numbers, and with them control file names, are reused — are
// logged under 5 000 different queue ids.
func TestQueueIDsUnique(t *testing.T) {
	p := newPostoffice(t, "")
	p.route("smtp/*")
	po := p.postofficeDir()
	cmd, log, done := p.start("run")
	waitLine(t, log, "queue read at start")
	spool := &ctlfile.Spool{Root: po, NoSync: true}
	const n = 5000
	sock := filepath.Join(po, "transport", ".scheduler.notify")
	names := map[string]int{}
	for i := range n {
		rel, err := spool.Enqueue(&ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: id\n"), Body: []byte("x\n"),
			Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "d.test", User: fmt.Sprintf("u%d@d.test", i)}}})
		if err != nil {
			t.Fatal(err)
		}
		names[rel]++
		ctlfile.NotifyScheduler(sock, rel)
	}
	until(t, "every message delivered", func() bool { return strings.Count(log.String(), "zsched: complete:") >= n })
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 30*time.Second)

	reused := 0
	for _, k := range names {
		if k > 1 {
			reused++
		}
	}
	byID := map[string]string{} // queue id → the recipient of its message
	for _, o := range parseOutcomes(log.String()) {
		if prev, ok := byID[o.msg]; ok && prev != o.to {
			t.Fatalf("queue id %s names two messages: to %s and to %s", o.msg, prev, o.to)
		}
		byID[o.msg] = o.to
	}
	if len(byID) != n {
		t.Fatalf("%d queue ids for %d messages", len(byID), n)
	}
	t.Logf("%d messages, %d names used more than once, %d queue ids", n, reused, len(byID))
	if reused == 0 {
		t.Fatal("no control file name was reused: the test shows nothing on this filesystem")
	}
}

// TestQueueBeyondActiveLimit: with message_active_limit = 10 and 60
// deferred messages, the listing shows all 60; WHY and kill work on one
// that is not in core; a bulk kill by -dest says what it would do with -n,
// then does it; a selection that matches nothing fails.
func TestQueueBeyondActiveLimit(t *testing.T) {
	p := newPostoffice(t, "")
	p.rewrite(fmt.Sprintf("\n[[clause]]\nselect = \"smtp/*\"\ncommand = [%q, \"-p\", \"1\", \"-c\", \"smtp\"]\ninterval = \"1h\"\nretries = [1]\n",
		p.agent("flaky")))
	b, _ := os.ReadFile(p.config)
	os.WriteFile(p.config, []byte(strings.Replace(string(b), "[scheduler]\n", "[scheduler]\nmessage_active_limit = 10\n", 1)), 0o644)
	po := p.postofficeDir()
	spool := &ctlfile.Spool{Root: po, NoSync: true}
	if err := spool.Init(); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		host := "a.test"
		if i%2 == 1 {
			host = "b.test"
		}
		if _, err := spool.Enqueue(&ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: q\n"), Body: []byte("x\n"),
			Rcpts: []ctlfile.Address{{Channel: "smtp", Host: host, User: fmt.Sprintf("u%d@%s", i, host)}}}); err != nil {
			t.Fatal(err)
		}
	}
	cmd, log, done := p.start("run")
	until(t, "10 messages deferred", func() bool { return strings.Count(log.String(), "status=deferred") >= 10 })

	q := p.listing()
	if len(q.Messages) != 60 || q.Total.Messages != 60 {
		t.Fatalf("queue -json lists %d messages (total %d), want 60", len(q.Messages), q.Total.Messages)
	}
	var out string
	inCore := 0
	for _, m := range q.Messages {
		if m.InCore {
			inCore++
		} else if out == "" {
			out = m.ID
		}
	}
	if inCore > 10 || out == "" {
		t.Fatalf("%d messages in core, want at most 10 and some on disk", inCore)
	}
	// mailq's totals and qshape count the whole spool, and say what is in core.
	until(t, "mailq counting the spool", func() bool {
		return strings.Contains(p.mustCLI("mailq"), "Spool: Msgs 60 Rcpnts 60; in core Msgs 10 Rcpnts 10; on disk only Msgs 50 Rcpnts 50")
	})
	if shape := p.mustCLI("qshape"); !regexp.MustCompile(`(?m)^\s+TOTAL\s+60\s`).MatchString(shape) ||
		!strings.Contains(shape, "on disk only: 50") {
		t.Fatalf("qshape:\n%s", shape)
	}
	why := p.mustCLI("why", out)
	if !strings.Contains(why, "message "+out) || !strings.Contains(why, "not in core") {
		t.Fatalf("why %s:\n%s", out, why)
	}
	name, _, _ := strings.Cut(out, ".")
	if got := p.mustCLI("cat", name); !strings.Contains(got, "*** ENVELOPE RECORDS "+out) || !strings.Contains(got, "Subject: q") {
		t.Fatalf("cat %s:\n%s", name, got)
	}
	if got := p.mustCLI("kill", out); !strings.Contains(got, out+"\tkilled\ton disk") || !strings.Contains(got, "1 messages killed") {
		t.Fatalf("kill %s:\n%s", out, got)
	}
	if _, err := os.Stat(filepath.Join(po, "transport", name)); !os.IsNotExist(err) {
		t.Fatalf("control file of %s still there: %v", out, err)
	}
	// A queue id whose message is gone is refused, also as a bare name.
	if got, code := p.cli("", "kill", out); code != 1 {
		t.Fatalf("second kill of %s: exit %d\n%s", out, code, got)
	}
	if n := len(p.listing().Messages); n != 59 {
		t.Fatalf("%d messages after the kill, want 59", n)
	}

	// Bulk by destination: -n first, then for real.
	dry := p.mustCLI("kill", "-n", "-dest", "smtp/a.*")
	if !strings.Contains(dry, "messages would be killed") || strings.Count(dry, "would be killed\t") < 29 {
		t.Fatalf("kill -n -dest:\n%s", dry)
	}
	if n := len(p.listing().Messages); n != 59 {
		t.Fatalf("kill -n changed the queue: %d messages", n)
	}
	wet := p.mustCLI("kill", "-dest", "smtp/a.*")
	var killed int
	fmt.Sscanf(lastLine(wet), "%d messages killed", &killed)
	if killed < 29 || killed > 30 {
		t.Fatalf("kill -dest: %q", lastLine(wet))
	}
	left := p.listing()
	for _, m := range left.Messages {
		if m.Recipients[0].Host == "a.test" {
			t.Fatalf("message %s to a.test left after the bulk kill", m.ID)
		}
	}
	if len(left.Messages) != 59-killed {
		t.Fatalf("%d messages left, want %d", len(left.Messages), 59-killed)
	}
	until(t, "the kill log lines", func() bool { return strings.Count(log.String(), "kill request: msg=") >= killed+1 })
	if n := strings.Count(log.String(), "kill request: msg="); n != killed+1 {
		t.Fatalf("%d kill log lines, want %d (one per message)", n, killed+1)
	}
	if got, code := p.cli("", "kill", "-dest", "smtp/nowhere.test"); code != 1 || !strings.Contains(got, "nothing matched") {
		t.Fatalf("kill of nothing: exit %d\n%s", code, got)
	}
	// Ids on standard input.
	var ids []string
	for _, m := range left.Messages[:3] {
		ids = append(ids, m.ID)
	}
	if got, code := p.cli(strings.Join(ids, "\n")+"\n", "hold", "-"); code != 0 || !strings.Contains(got, "3 messages held") {
		t.Fatalf("hold -: exit %d\n%s", code, got)
	}
	if n := len(p.listing("-held").Messages); n != 3 {
		t.Fatalf("queue -held: %d, want 3", n)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 30*time.Second)
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// TestRetryStateSurvivesRestart: 10 000 recipients deferred for an hour
// keep their attempts and next attempt times across a restart: none is
// tried again before its time.
func TestRetryStateSurvivesRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { testRetryRestart(t, sig) })
	}
}

func testRetryRestart(t *testing.T, sig syscall.Signal) {
	const msgs, per = 1000, 10
	dir := t.TempDir()
	dlog := filepath.Join(dir, "deliveries.log")
	p := newPostoffice(t, "")
	clause := func(agent string, args ...string) {
		b, _ := os.ReadFile(p.config)
		cfg := string(b)
		if i := strings.Index(cfg, "\n[[clause]]"); i >= 0 {
			cfg = cfg[:i]
		}
		os.WriteFile(p.config, []byte(cfg), 0o644)
		q := make([]string, 0, len(args))
		for _, a := range args {
			q = append(q, fmt.Sprintf("%q", a))
		}
		p.rewrite(fmt.Sprintf("\n[[clause]]\nselect = \"smtp/*\"\ncommand = [%q, %s]\ninterval = \"1h\"\nretries = [1]\n",
			agent, strings.Join(q, ", ")))
	}
	clause(p.agent("flaky"), "-p", "1", "-c", "smtp")
	po := p.postofficeDir()
	spool := &ctlfile.Spool{Root: po, NoSync: true}
	if err := spool.Init(); err != nil {
		t.Fatal(err)
	}
	for m := range msgs {
		msg := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: r\n"), Body: []byte("x\n")}
		for r := range per {
			host := fmt.Sprintf("d%d.test", (m+r)%20)
			msg.Rcpts = append(msg.Rcpts, ctlfile.Address{Channel: "smtp", Host: host, User: fmt.Sprintf("u%d.%d@%s", m, r, host)})
		}
		if _, err := spool.Enqueue(msg); err != nil {
			t.Fatal(err)
		}
	}
	cmd, log, done := p.start("run")
	until(t, "every recipient deferred once", func() bool {
		return strings.Count(log.String(), "status=deferred") >= msgs*per
	})
	before := map[string]string{} // recipient → next
	for _, o := range parseOutcomesFull(log.String()) {
		before[o["to"]] = o["next"]
	}
	if sig == syscall.SIGTERM {
		cmd.Process.Signal(sig)
		waitExit(t, done, log, 60*time.Second)
	} else {
		// The journal is written every 100 ms: wait for its last lines
		// (poll its size) before the kill.
		journal := filepath.Join(po, "state", "retry")
		until(t, "the journal written", func() bool {
			b, _ := os.ReadFile(journal)
			return bytes.Count(b, []byte("\nD ")) >= msgs*per
		})
		cmd.Process.Signal(sig)
		<-done // start's goroutine waits for the process: one Wait only
		killAll(agentsIn(po))
	}
	// Now an agent that delivers: anything tried shows.
	clause(p.agent("sink"), "-c", "smtp", "-log", dlog)
	cmd, log, done = p.start("run")
	waitLine(t, log, "queue read at start")
	p.mustCLI("enqueue", "-from", "s@example.org", "sentinel@free.test")
	until(t, "the sentinel delivered", func() bool { return delivered(t, dlog)["sentinel@free.test"] > 0 })
	if got := delivered(t, dlog); len(got) != 1 {
		t.Fatalf("%d recipients delivered after the restart, want only the sentinel (nothing deferred is due for an hour)", len(got))
	}
	q := p.listing("-deferred")
	n := 0
	for _, m := range q.Messages {
		for _, r := range m.Recipients {
			n++
			want, err := time.Parse(time.RFC3339, before[r.Address])
			if err != nil {
				t.Fatalf("no deferral logged for %s", r.Address)
			}
			if r.State != "deferred" || r.Until == nil || r.Until.Sub(want).Abs() > time.Second || r.Attempts != 1 {
				t.Fatalf("%s after the restart: %s until %v attempts %d; before: next %s attempts 1", r.Address, r.State, r.Until, r.Attempts, want)
			}
		}
	}
	if n != msgs*per {
		t.Fatalf("%d deferred recipients listed after the restart, want %d", n, msgs*per)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 60*time.Second)
}

// parseOutcomesFull returns every outcome line's fields.
func parseOutcomesFull(text string) []map[string]string {
	var outs []map[string]string
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, "zsched: outcome:") {
			continue
		}
		f := map[string]string{}
		for _, m := range kv.FindAllStringSubmatch(line, -1) {
			f[m[1]] = strings.Trim(m[2], `"`)
		}
		outs = append(outs, f)
	}
	return outs
}

// TestStatelog: the per-attempt log has one line per outcome with the
// outcome line's keys and values, and is reopened on SIGHUP after
// logrotate moved it.
func TestStatelog(t *testing.T) {
	p := newPostoffice(t, "")
	p.route("smtp/*")
	statelog := filepath.Join(p.dir, "attempts.log")
	b, _ := os.ReadFile(p.config)
	os.WriteFile(p.config, []byte(strings.Replace(string(b), "[scheduler]\n", fmt.Sprintf("[scheduler]\nstatelog = %q\n", statelog), 1)), 0o644)
	cmd, log, done := p.start("run")
	waitLine(t, log, "queue read at start")
	p.mustCLI("enqueue", "-from", "s@example.org", "one@a.test", "two@b.test")
	until(t, "two outcomes in the statelog", func() bool { return len(statelogLines(t, statelog)) == 2 })
	if err := os.Rename(statelog, statelog+".1"); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	waitLine(t, log, "statelog reopened")
	p.mustCLI("enqueue", "-from", "s@example.org", "three@c.test")
	// Mail no clause routes shows in mailq.
	p.mustCLI("enqueue", "-from", "s@example.org", "local/x.test/nobody")
	until(t, "the unrouted message in mailq", func() bool {
		return strings.Contains(p.mustCLI("mailq"), "Unrouted: local/x.test msgs 1 rcpts 1")
	})
	until(t, "the third outcome in the new statelog", func() bool { return len(statelogLines(t, statelog)) == 1 })
	if n := len(statelogLines(t, statelog+".1")); n != 2 {
		t.Fatalf("rotated statelog has %d lines, want 2", n)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 30*time.Second)
	// The same keys and values as the main log's outcome lines.
	main := parseOutcomesFull(log.String())
	state := append(parseOutcomesFull(strings.Join(statelogLines(t, statelog+".1"), "\n")),
		parseOutcomesFull(strings.Join(statelogLines(t, statelog), "\n"))...)
	if len(main) != 3 || len(state) != 3 {
		t.Fatalf("%d outcome lines in the log, %d in the statelog, want 3 each", len(main), len(state))
	}
	for i := range main {
		if fmt.Sprint(main[i]) != fmt.Sprint(state[i]) {
			t.Fatalf("statelog line %d differs from the outcome line:\n%v\n%v", i, state[i], main[i])
		}
	}
}

func statelogLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "outcome:") {
			out = append(out, sc.Text())
		}
	}
	return out
}

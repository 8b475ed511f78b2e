package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/ctlfile"
	"zsched/internal/need"
	"zsched/internal/tinyfs"
	"zsched/testagents"
)

// Disk faults at completion (issue 9), end to end on a real full
// filesystem: a tiny tmpfs holds the postoffice, a filler file takes its
// last page, and a real `scheduler run` with real sink agents completes
// messages on it. DSNs go to owner@dsn.test, which no clause routes: they
// stay in the queue, where the test reads them.

// TestDiskFullAtCompletion: message A's control file ends 24 bytes short
// of a page, so any d line appended to it needs a new page; message B's is
// small, so its d line fits but its DSN (new files) does not. Both wait
// unrouted until the disk is full; a reload then routes them to the sink,
// which delivers them (NOTIFY=SUCCESS) on the full disk:
//   - A: the agent cannot append its d line and reports ok; the scheduler's
//     append fails too; the error is logged and A is not completed, and its
//     control file is byte for byte as long as before (no torn d line);
//   - B: its d line is written, its DSN cannot be queued: the error is
//     logged, B stays queued with its d line pending, and no temporary or
//     partial DSN is left in queue/ or transport/;
//   - both are retried by the scheduler's own scan, without a restart;
//   - once the filler is removed, each gets exactly one DSN naming its
//     recipient and completes.
func TestDiskFullAtCompletion(t *testing.T) {
	fs := tinyfs.Mount(t, 1<<20)
	po := filepath.Join(fs, "po")
	p := postofficeOn(t, po, "smtp/none.test") // routes nothing yet
	const slack = 24

	// The control file's size depends on its name (the inode number) and
	// the host name: measure one, then pad A's Subject to end near a page.
	probe, _ := p.enqueueMsg("a@good.test", "probe")
	n := fileSize(t, filepath.Join(po, "transport", probe))
	removeMsg(t, po, probe)
	relA, sizeA := p.enqueueMsg("a@good.test", "probe"+strings.Repeat("x", int(4096-slack-n%4096)))
	if left := 4096 - sizeA%4096; left < 8 || left > 48 {
		t.Fatalf("control file of A is %d bytes, %d short of a page; want about %d", sizeA, left, slack)
	}
	relB, sizeB := p.enqueueMsg("b@good.test", "small")
	if sizeB%4096 > 2048 {
		t.Fatalf("control file of B is %d bytes: its d line may not fit its page", sizeB)
	}
	origA := mustRead(t, filepath.Join(po, "transport", relA))

	r := p.runOn(po)
	// Both are read and wait for a route; then the disk fills up.
	r.until(t, "A and B read", 20*time.Second, func() bool {
		return r.count("no clause matches", relA) == 1 && r.count("no clause matches", relB) == 1
	})
	free := fill(t, fs)
	p.route("smtp/good.test")
	if out, err := p.scheduler("reload").CombinedOutput(); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}

	// Twice each: the second time is the scheduler's own retry (its scan).
	r.until(t, "both failures, twice", 20*time.Second, func() bool {
		return r.count("message not completed: d lines still unwritten", relA) >= 2 &&
			r.count("cannot send delivery status notification", relB) >= 2
	})
	for _, c := range []struct{ what, msg, rcpt, status string }{
		{"cannot append d lines", relA, "", ""},
		{"cannot send delivery status notification", relB, "", ""},
		{"outcome", relA, "a@good.test", "ok"},
		{"outcome", relB, "b@good.test", "ok2"},
	} {
		l := r.find(c.what, c.msg)
		if l == nil {
			t.Fatalf("no %q line for %s", c.what, c.msg)
		}
		if c.rcpt == "" && !strings.Contains(l["error"], "no space left on device") {
			t.Fatalf("%s for %s: the error does not say why: %q", c.what, c.msg, l["error"])
		}
		if c.rcpt != "" && (l["to"] != c.rcpt || l["status"] != c.status || l["next"] != "") {
			t.Fatalf("outcome for %s: %v, want a final %s", c.msg, l, c.status)
		}
	}
	if n := r.count("complete", relA) + r.count("complete", relB) + r.count("delivery status notification queued", ""); n > 0 {
		t.Fatalf("%d completions or DSNs on a full disk:\n%s", n, tail(r.text(), 30))
	}
	// Nothing half-written, nothing lost.
	fa := parseCtl(t, po, relA)
	if got := mustRead(t, filepath.Join(po, "transport", relA)); len(got) != len(origA) || len(fa.Diags) != 0 {
		t.Fatalf("control file of A: %d bytes (was %d), %d d lines: a failed append left bytes behind:\n%q",
			len(got), len(origA), len(fa.Diags), got[len(origA)-slack:])
	}
	fb := parseCtl(t, po, relB)
	if fa.Rcpts[0].Status != ctlfile.Done || fb.Rcpts[0].Status != ctlfile.Done {
		t.Fatalf("recipients not marked delivered: A %v, B %v", fa.Rcpts[0].Status, fb.Rcpts[0].Status)
	}
	if len(fb.Diags) != 1 || fb.Diags[0].Status != ctlfile.Pending {
		t.Fatalf("B's d lines %+v, want one still pending", fb.Diags)
	}
	want := []string{"queue/" + relA, "queue/" + relB, "transport/" + relA, "transport/" + relB}
	slices.Sort(want)
	if got := sortedSpool(po); !slicesEqual(got, want) {
		t.Fatalf("spool on a full disk:\n%v\nwant only\n%v", got, want)
	}

	free()
	r.until(t, "A and B complete", 20*time.Second, func() bool {
		return r.count("complete", relA) == 1 && r.count("complete", relB) == 1
	})
	var dsns []string
	for _, c := range []struct{ msg, rcpt string }{{relA, "a@good.test"}, {relB, "b@good.test"}} {
		if n := r.count("delivery status notification queued", c.msg); n != 1 {
			t.Fatalf("%d DSNs queued for %s, want exactly one\n%s", n, c.msg, tail(r.text(), 30))
		}
		dsn := r.find("delivery status notification queued", c.msg)["dsn"]
		body := string(mustRead(t, filepath.Join(po, "queue", path.Dir(dsn), path.Base(dsn))))
		for _, s := range []string{"Final-Recipient: rfc822; " + c.rcpt, "Action: delivered"} {
			if !strings.Contains(body, s) {
				t.Fatalf("DSN %s for %s lacks %q:\n%s", dsn, c.msg, s, body)
			}
		}
		dsns = append(dsns, "queue/"+dsn, "transport/"+dsn)
	}
	slices.Sort(dsns)
	if got := sortedSpool(po); !slicesEqual(got, dsns) {
		t.Fatalf("spool after the recovery: %v, want only the DSNs %v", got, dsns)
	}
	r.stop(t)
}

// TestDSNNotDuplicatedWhenMarkFails: marking the d lines reported after
// the DSN is queued fails (the control file is made immutable: an in-place
// write into an allocated page cannot hit ENOSPC on tmpfs, so EPERM stands
// in for the EIO of a failing disk). The DSN just queued is withdrawn, so
// every retry by the scan leaves no copy behind; once the file can be
// written, exactly one DSN is queued and the message completes.
func TestDSNNotDuplicatedWhenMarkFails(t *testing.T) {
	fs := tinyfs.Mount(t, 1<<20)
	po := filepath.Join(fs, "po")
	p := postofficeOn(t, po, "smtp/none.test")
	rel, _ := p.enqueueMsg("c@good.test", "mark")
	ctl := filepath.Join(po, "transport", rel)
	// As an agent leaves a delivery with ok2: '+' and a pending d line.
	h, err := ctlfile.Open(ctl)
	if err != nil {
		t.Fatal(err)
	}
	rc := h.File.Rcpts[0]
	if err := h.Mark(0, ctlfile.Done); err != nil {
		t.Fatal(err)
	}
	if err := h.AppendDiag(ctlfile.Diag{RcptOffset: rc.Offset, HeaderOffset: rc.HeaderOffset, NOffset: rc.NOffset,
		Time: time.Now().Unix(), Notary: "rfc822;c@good.test\x01delivered\x012.0.0\x01x-test; 250 ok", Text: "delivered"}); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if out, err := exec.Command("chattr", "+i", ctl).CombinedOutput(); err != nil {
		need.Met(t, "chattr +i (root, a filesystem with the immutable flag)", fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", ctl).Run() })

	r := p.runOn(po)
	r.until(t, "two failed reports", 20*time.Second, func() bool {
		return r.count("cannot send delivery status notification", rel) >= 2
	})
	if e := r.find("cannot send delivery status notification", rel)["error"]; !strings.Contains(e, "mark diagnostics") {
		t.Fatalf("the failure is not the mark: %q", e)
	}
	want := []string{"queue/" + rel, "transport/" + rel}
	if got := sortedSpool(po); !slicesEqual(got, want) {
		t.Fatalf("spool while marking fails:\n%v\nwant only\n%v (a DSN whose d lines stay pending is sent again)", got, want)
	}
	if out, err := exec.Command("chattr", "-i", ctl).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	r.until(t, "complete", 20*time.Second, func() bool { return r.count("complete", rel) == 1 })
	if n := r.count("delivery status notification queued", rel); n != 1 {
		t.Fatalf("%d DSNs queued, want one", n)
	}
	dsn := r.find("delivery status notification queued", rel)["dsn"]
	if got := sortedSpool(po); !slicesEqual(got, []string{"queue/" + dsn, "transport/" + dsn}) {
		t.Fatalf("spool after the recovery: %v, want only the DSN %s", got, dsn)
	}
	r.stop(t)
}

// postofficeOn writes a config for a postoffice at po (on the tiny
// filesystem), scanned every second, with one sink clause selecting sel.
func postofficeOn(t *testing.T, po, sel string) *postoffice {
	p := newPostoffice(t, "")
	b, err := os.ReadFile(p.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), fmt.Sprintf("%q", filepath.Join(p.dir, "po")), fmt.Sprintf("%q", po), 1)
	if err := os.WriteFile(p.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	mkPostoffice(t, po)
	p.route(sel)
	return p
}

// route adds a sink clause selecting sel.
func (p *postoffice) route(sel string) {
	p.rewrite(fmt.Sprintf("\n[[clause]]\nselect = %q\ncommand = [%q, \"-c\", \"smtp\"]\n", sel, p.agent("sink")))
}

// enqueueMsg queues one message to rcpt asking for a success DSN, from a
// sender whose DSNs no clause routes, and returns its path and the size of
// its control file.
func (p *postoffice) enqueueMsg(rcpt, subject string) (string, int64) {
	p.t.Helper()
	cmd := p.scheduler("enqueue", "-from", "owner@dsn.test", "-notify", "SUCCESS", "-subject", subject, rcpt)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		p.t.Fatalf("enqueue: %v\n%s", err, stderr.Bytes())
	}
	rel := strings.TrimSpace(string(out))
	po := p.postofficeDir()
	return rel, fileSize(p.t, filepath.Join(po, "transport", rel))
}

func (p *postoffice) postofficeDir() string {
	b, _ := os.ReadFile(p.config)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "postoffice = "); ok {
			return strings.Trim(v, `"`)
		}
	}
	p.t.Fatal("no postoffice in the config")
	return ""
}

// sortedSpool is listSpool in sorted order.
func sortedSpool(po string) []string {
	l := listSpool(po)
	slices.Sort(l)
	return l
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// removeMsg deletes a message the scheduler never saw (Name == ID).
func removeMsg(t *testing.T, po, rel string) {
	t.Helper()
	for _, f := range []string{filepath.Join(po, "transport", rel), filepath.Join(po, "queue", rel)} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
}

func parseCtl(t *testing.T, po, rel string) *ctlfile.File {
	t.Helper()
	f, err := ctlfile.Parse(path.Base(rel), mustRead(t, filepath.Join(po, "transport", rel)))
	if err != nil {
		t.Fatalf("control file %s does not parse: %v", rel, err)
	}
	return f
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// schedRun is a `scheduler run` whose log lines the test reads as they come.
type schedRun struct {
	cmd   *exec.Cmd
	lines chan string
	log   []string
}

func (p *postoffice) runOn(po string) *schedRun {
	p.t.Helper()
	r := &schedRun{cmd: p.scheduler("run"), lines: make(chan string, 1024)}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	// Runs after the scheduler is killed, and before the tmpfs is
	// unmounted (registered earlier).
	testagents.LeakCheck(p.t, filepath.Join(po, "transport"))
	p.t.Cleanup(func() {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	return r
}

// until reads log lines until cond holds.
func (r *schedRun) until(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond() {
		select {
		case l, ok := <-r.lines:
			if !ok {
				t.Fatalf("waiting for %s: the scheduler exited:\n%s", what, tail(r.text(), 30))
			}
			r.log = append(r.log, l)
		case <-deadline:
			t.Fatalf("timed out waiting for %s:\n%s", what, tail(r.text(), 30))
		}
	}
}

// lineFields returns the key/value fields of a log line whose message is
// msg and, unless rel is "", whose msg= field is rel; nil otherwise.
func lineFields(l, msg, rel string) map[string]string {
	// "… [LEVEL] zsched(.sub): message: key=value …"
	_, m, _ := strings.Cut(l, " zsched")
	if _, m, ok := strings.Cut(m, ": "); !ok || !strings.HasPrefix(m, msg) ||
		len(m) > len(msg) && !strings.ContainsRune(":; ", rune(m[len(msg)])) {
		return nil
	}
	f := map[string]string{}
	for _, m := range kv.FindAllStringSubmatch(l, -1) {
		f[m[1]] = strings.Trim(m[2], `"`)
	}
	// msg= is the queue id: the control file's name, a dot, its generation.
	if name, _, _ := strings.Cut(f["msg"], "."); rel != "" && f["msg"] != rel && name != path.Base(rel) {
		return nil
	}
	return f
}

func (r *schedRun) count(msg, rel string) int {
	n := 0
	for _, l := range r.log {
		if lineFields(l, msg, rel) != nil {
			n++
		}
	}
	return n
}

func (r *schedRun) find(msg, rel string) map[string]string {
	for _, l := range r.log {
		if f := lineFields(l, msg, rel); f != nil {
			return f
		}
	}
	return nil
}

func (r *schedRun) text() string { return strings.Join(r.log, "\n") }

// stop sends TERM and expects a clean exit.
func (r *schedRun) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := range r.lines {
		r.log = append(r.log, l)
	}
	if err := r.cmd.Wait(); err != nil {
		t.Fatalf("scheduler after TERM: %v\n%s", err, tail(r.text(), 30))
	}
}

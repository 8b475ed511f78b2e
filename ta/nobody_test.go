package ta

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"zsched/report"
)

// openFiles lists the paths this process has open (/proc/self/fd).
func openFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var paths []string
	for _, e := range ents {
		if p, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			paths = append(paths, p)
		}
	}
	return paths
}

// TestNoBodyOpensNoMessageFile: an Agent.NoBody agent delivers without the
// message file open (Body nil, BodyFD -1, no descriptor of it in the
// process), and a later job of the message whose files are kept does not
// look for it again, as a kept descriptor would not.
func TestNoBodyOpensNoMessageFile(t *testing.T) {
	dir, f7 := reuseSpool(t)
	body := filepath.Join(dir, "..", "queue", "7")
	var openBody []string
	c := serve(t, &Agent{Channel: "smtp", Dir: dir, NoBody: true}, func(d *Delivery) []Result {
		if d.Body() != nil || d.BodyFD() != -1 {
			t.Errorf("job %s: Body %v, BodyFD %d: want nil and -1", d.Host, d.Body(), d.BodyFD())
		}
		want, _ := filepath.EvalSymlinks(body)
		for _, p := range openFiles(t) {
			if p == want || p == want+" (deleted)" {
				openBody = append(openBody, d.Host)
			}
		}
		var res []Result
		for _, i := range d.Rcpts {
			res = append(res, Result{Rcpt: i, Status: report.OK3, Text: "ok"})
		}
		return res
	})
	c.expect("#hungry")
	if out := c.job("7\ta.test"); len(out) != 1 || out[0] != fmt.Sprintf("7/%d\t\tok3 ok", f7.offs[0]) {
		t.Fatalf("job a.test: %q, want one ok3", out)
	}
	if err := os.Remove(body); err != nil {
		t.Fatal(err)
	}
	if out := c.job("7\tb.test"); len(out) != 1 || out[0] != fmt.Sprintf("7/%d\t\tok3 ok", f7.offs[1]) {
		t.Fatalf("job b.test after the body went (files kept): %q, want one ok3", out)
	}
	c.end()
	if len(openBody) > 0 {
		t.Errorf("the message file was open during the jobs of %q", openBody)
	}
}

// TestNoBodyMissingBody: an Agent.NoBody agent that finds no message file
// answers as libta does (and as TestMissingBody's agent): error2 with
// libta's text, a d line, a '-' mark and #resync.
func TestNoBodyMissingBody(t *testing.T) {
	dir := spool(t)
	f := msg{name: "10002819", rcpts: []rcptLine{pending("smtp dest.test ok17@dest.test 0")}}.build()
	put(t, dir, "10002819", f.data, false)
	c := serve(t, &Agent{Channel: "smtp", Dir: dir, NoBody: true}, func(d *Delivery) []Result {
		t.Error("deliver called without a body")
		return nil
	})
	c.expect("#hungry")
	c.send("10002819\tdest.test\n")
	c.expect("10002819/121\t\terror2 " + missingBody)
	if l := c.next(); !strings.HasPrefix(l, "# tst: cannot open message file") {
		t.Errorf("got %q, want a # comment about the message file", l)
	}
	c.expect("#resync 10002819", "#hungry")
	c.end()
	want := patch(f.data, 122, "-      ")
	want = fmt.Appendf(want, "d 121:%d:-1::%d\t\x01failed\x01\x01\x01\x01tst[4242]\t%s\n", f.header, testNow.Unix(), missingBody)
	if after := read(t, dir, "10002819"); !bytes.Equal(after, want) {
		t.Errorf("file after:\n%q\nwant\n%q", after, want)
	}
}

// TestCleanLocal: cleanLocal answers as filepath.IsLocal(p) &&
// filepath.Clean(p) == p, on chosen paths and on random ones, and
// cleanHashDir as hashDir on the clean ones.
func TestCleanLocal(t *testing.T) {
	ref := func(p string) bool { return filepath.IsLocal(p) && filepath.Clean(p) == p }
	paths := []string{"", ".", "..", "/", "//", "a", "a/", "/a", "a//b", "a/./b", "a/../b", "./a", "a/.",
		"a/..", "A/B/12345", "12345", "..a", "a..", "a/.b", "a/b.", ".a/b", "...", "a/...", "a\x00b"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = "a/."[r.IntN(3)]
		}
		paths = append(paths, string(b))
	}
	for _, p := range paths {
		if got, want := cleanLocal(p), ref(p); got != want {
			t.Errorf("cleanLocal(%q) = %v, want %v", p, got, want)
		}
		if ref(p) && cleanHashDir(p) != hashDir(p) {
			t.Errorf("cleanHashDir(%q) = %q, want hashDir's %q", p, cleanHashDir(p), hashDir(p))
		}
	}
}

// TestNoBodyOpensAFIFO: a message file that is not a regular file is
// opened by an Agent.NoBody agent too, after its locks (and Body stays
// nil): package tacheck's lock case makes it a FIFO and sees the locks
// while the agent waits in that open.
func TestNoBodyOpensAFIFO(t *testing.T) {
	dir := spool(t)
	f := msg{name: "7", rcpts: []rcptLine{pending("smtp a.test u@a.test 0")}}.build()
	put(t, dir, "7", f.data, false)
	fifo := filepath.Join(dir, "..", "queue", "7")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var atOpen []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // until a reader opens it
		if err != nil {
			t.Error(err)
			return
		}
		atOpen, _ = os.ReadFile(filepath.Join(dir, "7"))
		w.Close()
	}()
	c := serve(t, &Agent{Channel: "smtp", Dir: dir, NoBody: true}, func(d *Delivery) []Result {
		if d.Body() != nil || d.BodyFD() != -1 {
			t.Errorf("Body %v, BodyFD %d: want nil and -1", d.Body(), d.BodyFD())
		}
		want, _ := filepath.EvalSymlinks(fifo)
		if !slices.Contains(openFiles(t), want) {
			t.Error("the agent delivers without the FIFO open")
			// Release the writer.
			if r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
				defer r.Close()
			}
		}
		<-done // the writer has seen the control file: before the marks
		return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3, Text: "ok"}}
	})
	c.expect("#hungry")
	out := c.job("7\ta.test")
	c.end()
	if len(out) != 1 || out[0] != fmt.Sprintf("7/%d\t\tok3 ok", f.offs[0]) {
		t.Errorf("job: %q, want one ok3", out)
	}
	if want := patch(f.data, f.offs[0]+1, lockBytes(testPID)); !bytes.Equal(atOpen, want) {
		t.Errorf("control file when the FIFO was opened:\n%q\nwant the lock:\n%q", atOpen, want)
	}
}

package ta

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"zsched/report"
)

// TestInstantMarksWithoutLock: an Instant agent writes no lock: while its
// delivery function runs the r line on disk is still pending, and after it
// only the mark is there (the same bytes a lock and a mark leave), with
// the report line after it as usual.
func TestInstantMarksWithoutLock(t *testing.T) {
	dir := spool(t)
	f := msg{name: "7", rcpts: []rcptLine{pending("smtp a.test u@a.test 0")}}.build()
	put(t, dir, "7", f.data, true)
	var during []byte
	c := serve(t, &Agent{Channel: "smtp", Dir: dir, Instant: true}, func(d *Delivery) []Result {
		during = read(t, dir, "7")
		return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3, Text: "ok"}}
	})
	c.expect("#hungry")
	if out := c.job("7\ta.test"); len(out) != 1 || out[0] != "7/"+strconv.FormatInt(f.offs[0], 10)+"\t\tok3 ok" {
		t.Fatalf("job: %q, want one ok3 report", out)
	}
	c.end()
	if !bytes.Equal(during, f.data) {
		t.Errorf("while delivering, the r line on disk is %q, want it untouched %q",
			during[f.offs[0]:f.offs[0]+12], f.data[f.offs[0]:f.offs[0]+12])
	}
	if want := patch(f.data, f.offs[0]+1, "+"); !bytes.Equal(read(t, dir, "7"), want) {
		t.Errorf("after: %q, want %q", read(t, dir, "7"), want)
	}
}

// TestInstantDeferWritesNothing: a recipient an Instant agent defers, or
// leaves unsettled, was never locked on disk: the control file is not
// written at all (its modification time stays where it was), where a
// locking agent writes the lock and then blanks it again.
func TestInstantDeferWritesNothing(t *testing.T) {
	dir := spool(t)
	f := msg{name: "7", rcpts: []rcptLine{pending("smtp a.test u@a.test 0"), pending("smtp a.test v@a.test 0")}}.build()
	put(t, dir, "7", f.data, true)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	ctl := filepath.Join(dir, "7")
	if err := os.Chtimes(ctl, old, old); err != nil {
		t.Fatal(err)
	}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir, Instant: true}, func(d *Delivery) []Result {
		return []Result{{Rcpt: d.Rcpts[0], Status: report.Deferred, Text: "later"}} // the other forgotten
	})
	c.expect("#hungry")
	if out := c.job("7\ta.test"); len(out) != 2 || !strings.HasSuffix(out[0], "\tdeferred later") ||
		!strings.HasSuffix(out[1], "\tdeferred address was left locked") {
		t.Fatalf("job: %q, want two deferred reports", out)
	}
	c.end()
	if got := read(t, dir, "7"); !bytes.Equal(got, f.data) {
		t.Errorf("control file changed: %q", got)
	}
	st, err := os.Stat(ctl)
	if err != nil {
		t.Fatal(err)
	}
	if !st.ModTime().Equal(old) {
		t.Errorf("control file modified at %v: written, want untouched (%v)", st.ModTime(), old)
	}
}

// TestInstantReuseRereadsStatus: an Instant agent reads a kept file's
// status bytes again too: a line another agent locked since is not taken.
func TestInstantReuseRereadsStatus(t *testing.T) {
	dir, f7 := reuseSpool(t)
	r := &reuseAgent{t: t}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir, Instant: true}, r.deliver)
	c.expect("#hungry")
	c.job("7\ta.test")
	data := patch(read(t, dir, "7"), f7.offs[1]+1, lockBytes(os.Getpid())) // b taken by a live process
	if err := os.WriteFile(filepath.Join(dir, "7"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := c.job("7\tb.test"); len(out) != 1 || out[0] != "#resync 7" {
		t.Fatalf("job for b: %q, want #resync (b is locked by another)", out)
	}
	if out := c.job("7\tc.test"); len(out) != 1 || !strings.Contains(out[0], "\tok3 ") {
		t.Fatalf("job for c: %q, want c delivered", out)
	}
	c.end()
	after := read(t, dir, "7")
	for i, want := range []string{"+", "~", "+"} {
		if got := string(after[f7.offs[i]+1]); got != want {
			t.Errorf("recipient %d: status %q, want %q", i, got, want)
		}
	}
	if want := [][]string{{"u@a.test"}, {"u@c.test"}}; fmt.Sprint(r.users) != fmt.Sprint(want) {
		t.Errorf("delivered %v, want %v", r.users, want)
	}
}

// TestBodyReadKeepsAtime: reading the message does not update its access
// time (O_NOATIME, permitted to the file's owner), where relatime would
// write the inode for an access time more than a day old.
func TestBodyReadKeepsAtime(t *testing.T) {
	dir := spool(t)
	f := msg{name: "7", rcpts: []rcptLine{pending("smtp a.test u@a.test 0")}}.build()
	put(t, dir, "7", f.data, true)
	body := filepath.Join(dir, "..", "queue", "7")
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(body, old, old); err != nil {
		t.Fatal(err)
	}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		var b [16]byte
		if _, err := d.Body().Read(b[:]); err != nil {
			t.Errorf("read body: %v", err)
		}
		return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3}}
	})
	c.expect("#hungry")
	c.job("7\ta.test")
	c.end()
	var st unix.Stat_t
	if err := unix.Stat(body, &st); err != nil {
		t.Fatal(err)
	}
	if atime := time.Unix(st.Atim.Unix()); !atime.Equal(old) {
		t.Errorf("message file's access time %v after the agent read it, want %v (untouched)", atime, old)
	}
}

// TestControlReadKeepsAtime: opening and reading the control file does not
// update its access time either, though it was written since (relatime
// writes the access time at the first read after a write).
func TestControlReadKeepsAtime(t *testing.T) {
	dir := spool(t)
	f := msg{name: "7", rcpts: []rcptLine{pending("smtp a.test u@a.test 0"), pending("smtp b.test u@b.test 0")}}.build()
	put(t, dir, "7", f.data, true)
	ctl := filepath.Join(dir, "7")
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(ctl, old, time.Now()); err != nil {
		t.Fatal(err)
	}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		return []Result{{Rcpt: d.Rcpts[0], Status: report.Deferred}}
	})
	c.expect("#hungry")
	c.job("7\ta.test")
	c.send("#idle\n") // closes the file: the next job opens and reads it again
	c.expect("#hungry")
	c.job("7\tb.test")
	c.end()
	var st unix.Stat_t
	if err := unix.Stat(ctl, &st); err != nil {
		t.Fatal(err)
	}
	if atime := time.Unix(st.Atim.Unix()); !atime.Equal(old) {
		t.Errorf("control file's access time %v after two jobs, want %v (untouched)", atime, old)
	}
}

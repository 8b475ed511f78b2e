package ta

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"zsched/report"
)

// reuseAgent serves with a delivery function that delivers every locked
// recipient (ok3), records per job the message file's offset as the job
// found it and the users it got, and leaves the offset at 100 + the job's
// number: a job that finds it there has the previous job's open file.
type reuseAgent struct {
	t       *testing.T
	offsets []int64
	users   [][]string
}

func (r *reuseAgent) deliver(d *Delivery) []Result {
	off, err := unix.Seek(d.BodyFD(), 0, io.SeekCurrent)
	if err != nil {
		r.t.Errorf("seek: %v", err)
	}
	r.offsets = append(r.offsets, off)
	if _, err := unix.Seek(d.BodyFD(), int64(100+len(r.offsets)), io.SeekStart); err != nil {
		r.t.Errorf("seek: %v", err)
	}
	var users []string
	var res []Result
	for _, i := range d.Rcpts {
		users = append(users, d.Rcpt(i).User)
		res = append(res, Result{Rcpt: i, Status: report.OK3})
	}
	r.users = append(r.users, users)
	return res
}

// reuseSpool queues message 7 with one recipient at each of a.test,
// b.test and c.test, and message 8 with one at a.test.
func reuseSpool(t *testing.T, lead7 ...string) (dir string, f7 built) {
	dir = spool(t)
	var rs []rcptLine
	for i, h := range []string{"a", "b", "c"} {
		r := pending("smtp " + h + ".test u@" + h + ".test 0")
		if i < len(lead7) {
			r.lead = lead7[i]
		}
		rs = append(rs, r)
	}
	f7 = msg{name: "7", rcpts: rs}.build()
	put(t, dir, "7", f7.data, true)
	put(t, dir, "8", msg{name: "8", rcpts: []rcptLine{pending("smtp a.test v@a.test 0")}}.build().data, true)
	return dir, f7
}

// job sends one job line and reads its lines up to the next #hungry.
func (c *conv) job(line string) []string {
	c.t.Helper()
	c.send(line + "\n")
	var out []string
	for l := c.next(); l != "#hungry"; l = c.next() {
		out = append(out, l)
	}
	return out
}

// TestReuseSameMessage: consecutive jobs of one message use the files the
// first opened (the message file is the same open file: its offset is
// where the last job left it); a job of another message opens its own,
// and the first message's files are opened afresh after it.
func TestReuseSameMessage(t *testing.T) {
	dir, f7 := reuseSpool(t)
	r := &reuseAgent{t: t}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, r.deliver)
	c.expect("#hungry")
	for _, j := range []string{"7\ta.test", "7\tb.test", "8\ta.test", "7\tc.test"} {
		if out := c.job(j); len(out) != 1 || !strings.Contains(out[0], "\tok3 ") {
			t.Fatalf("job %q: %q, want one ok3", j, out)
		}
	}
	c.end()
	if want := []int64{0, 101, 0, 0}; fmt.Sprint(r.offsets) != fmt.Sprint(want) {
		t.Errorf("message file offsets as the jobs found them %v, want %v (the second job reuses the first's file)", r.offsets, want)
	}
	after := read(t, dir, "7")
	for i, off := range f7.offs {
		if after[off+1] != '+' {
			t.Errorf("recipient %d not marked delivered: %q", i, after[off:off+12])
		}
	}
}

// TestReuseRereadsStatus: a file kept open since the message's last job
// is read again for the recipients' status: a line another agent held
// then and has released is delivered, a line another agent finished since
// is not.
func TestReuseRereadsStatus(t *testing.T) {
	other := "~" + fmt.Sprintf("%6d", os.Getpid()) + "    " // a live process
	dir, f7 := reuseSpool(t, strings.Repeat(" ", 11), other)
	r := &reuseAgent{t: t}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, r.deliver)
	c.expect("#hungry")
	c.job("7\ta.test") // reads b locked, c pending
	ctl := filepath.Join(dir, "7")
	data := read(t, dir, "7")
	data = patch(data, f7.offs[1]+1, strings.Repeat(" ", 10)) // b released, pending
	data = patch(data, f7.offs[2]+1, "+")                     // c delivered by another agent
	if err := os.WriteFile(ctl, data, 0o644); err != nil {    // in place: the same file
		t.Fatal(err)
	}
	if out := c.job("7\tb.test"); len(out) != 1 || !strings.Contains(out[0], "\tok3 ") {
		t.Fatalf("job for b: %q, want b delivered", out)
	}
	if out := c.job("7\tc.test"); len(out) != 1 || out[0] != "#resync 7" {
		t.Fatalf("job for c: %q, want #resync (c is done)", out)
	}
	c.end()
	if want := [][]string{{"u@a.test"}, {"u@b.test"}}; fmt.Sprint(r.users) != fmt.Sprint(want) {
		t.Errorf("delivered %v, want %v", r.users, want)
	}
	if r.offsets[1] != 101 {
		t.Errorf("the job for b found offset %d: the file was not kept", r.offsets[1])
	}
}

// TestReuseReplacedFile: a job whose path names another file than the one
// kept (the message removed and another queued under its name) reads the
// file at the path.
func TestReuseReplacedFile(t *testing.T) {
	dir, _ := reuseSpool(t)
	r := &reuseAgent{t: t}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, r.deliver)
	c.expect("#hungry")
	c.job("7\ta.test")
	// Another message under the same name: a new file renamed over it.
	nf := msg{name: "7", rcpts: []rcptLine{pending("smtp b.test new@b.test 0")}}.build()
	tmp := filepath.Join(dir, ".7.tmp")
	if err := os.WriteFile(tmp, nf.data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "7")); err != nil {
		t.Fatal(err)
	}
	c.job("7\tb.test")
	c.end()
	if want := [][]string{{"u@a.test"}, {"new@b.test"}}; fmt.Sprint(r.users) != fmt.Sprint(want) {
		t.Errorf("delivered %v, want %v", r.users, want)
	}
	if r.offsets[1] != 0 {
		t.Errorf("the job of the new file found offset %d: it used the old message's file", r.offsets[1])
	}
}

// TestReuseDroppedOnIdleAndResync: #idle and a #resync close the kept
// files; the message's next job opens them afresh.
func TestReuseDroppedOnIdleAndResync(t *testing.T) {
	dir, _ := reuseSpool(t)
	r := &reuseAgent{t: t}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, r.deliver)
	c.expect("#hungry")
	c.job("7\ta.test")
	c.job("#idle")
	c.job("7\tb.test")
	if out := c.job("7\tnone.test"); len(out) != 1 || out[0] != "#resync 7" {
		t.Fatalf("job for a host without recipients: %q, want #resync", out)
	}
	c.job("7\tc.test")
	c.end()
	if want := []int64{0, 0, 0}; fmt.Sprint(r.offsets) != fmt.Sprint(want) {
		t.Errorf("message file offsets as the jobs found them %v, want %v (fresh opens)", r.offsets, want)
	}
}

// TestReuseNotAfterLastRecipient: a job that leaves none of its message's
// recipients pending keeps nothing open: the scheduler removes the
// message on its report, and the last close (where the kernel frees the
// blocks) is then the scheduler's, not the agent's. A message with a
// recipient left is kept.
func TestReuseNotAfterLastRecipient(t *testing.T) {
	dir, _ := reuseSpool(t)
	r := &reuseAgent{t: t}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, r.deliver)
	c.expect("#hungry")
	base := openFDs(t)
	c.job("7\ta.test") // b and c still pending: kept
	if n := openFDs(t); n != base+2 {
		t.Errorf("after a job that left recipients pending: %d descriptors, want %d (the message's two kept)", n, base+2)
	}
	c.job("8\ta.test") // 8's only recipient: 8 is done
	if n := openFDs(t); n != base {
		t.Errorf("after the job that finished message 8: %d descriptors, want %d (nothing kept)", n, base)
	}
	c.end()
}

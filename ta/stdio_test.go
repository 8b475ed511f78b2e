package ta

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"zsched/report"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// fds are test descriptors: those still open are closed at the end of
// the test.
type fds map[int]bool

func newFDs(t *testing.T) fds {
	f := fds{}
	t.Cleanup(func() {
		for fd := range f {
			unix.Close(fd)
		}
	})
	return f
}

func (f fds) close(fd int) {
	if f[fd] {
		unix.Close(fd)
		delete(f, fd)
	}
}

// socketpair returns a connected AF_UNIX stream pair of blocking
// descriptors.
func (f fds) socketpair(t *testing.T) (a, b int) {
	t.Helper()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f[p[0]], f[p[1]] = true, true
	return p[0], p[1]
}

// pipe returns a pipe of blocking descriptors (os.Pipe's are not).
func (f fds) pipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	f[p[0]], f[p[1]] = true, true
	return p[0], p[1]
}

// fdReader reads a raw descriptor.
type fdReader int

func (r fdReader) Read(b []byte) (int, error) {
	n, err := unix.Read(int(r), b)
	if n <= 0 && err == nil {
		return 0, io.EOF
	}
	return max(n, 0), err
}

func blocking(t *testing.T, fd int) bool {
	t.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fl&unix.O_NONBLOCK == 0
}

// readAsync reads once from r on another goroutine.
func readAsync(r io.Reader) <-chan string {
	ch := make(chan string, 1)
	go func() {
		b := make([]byte, 100)
		n, err := r.Read(b)
		if err != nil {
			ch <- "ERR " + err.Error()
			return
		}
		ch <- string(b[:n])
	}()
	return ch
}

// The input waits in the poller for a line the other end writes later,
// reads it whole, and ends with io.EOF; the shared descriptor stays in
// blocking mode, since fds 0, 1 and 2 share it in socketpair mode.
func TestPollInSocket(t *testing.T) {
	ours, theirs := newFDs(t).socketpair(t)
	p := newPollIn(ours)
	if p == nil {
		t.Fatal("a socket was not made pollable")
	}
	defer p.close()
	if !p.sock || p.own || p.fd != ours {
		t.Errorf("socket: got fd %d sock %v own %v, want fd %d read in place with recv", p.fd, p.sock, p.own, ours)
	}
	if !blocking(t, ours) {
		t.Error("the socket was left non-blocking")
	}
	got := readAsync(p)
	if _, err := unix.Write(theirs, []byte("A/1\thost\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "A/1\thost\n" {
		t.Errorf("read %q", s)
	}
	got = readAsync(p)
	unix.Shutdown(theirs, unix.SHUT_WR)
	if s := <-got; s != "ERR EOF" {
		t.Errorf("after shutdown: read %q, want EOF", s)
	}
}

// A pipe is read through a non-blocking open file of its own; the
// original descriptor keeps its mode.
func TestPollInPipe(t *testing.T) {
	f := newFDs(t)
	r, w := f.pipe(t)
	p := newPollIn(r)
	if p == nil {
		t.Fatal("a pipe was not made pollable")
	}
	defer p.close()
	if p.sock || !p.own || p.fd == r || blocking(t, p.fd) || !blocking(t, r) {
		t.Errorf("pipe: fd %d (of %d) sock %v own %v: want a non-blocking reopen, the original blocking", p.fd, r, p.sock, p.own)
	}
	got := readAsync(p)
	if _, err := unix.Write(w, []byte("job\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "job\n" {
		t.Errorf("read %q", s)
	}
	got = readAsync(p)
	f.close(w)
	if s := <-got; s != "ERR EOF" {
		t.Errorf("after close: read %q, want EOF", s)
	}
}

// A terminal (the pty mode) is reopened too, and read a line at a time.
func TestPollInTerminal(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer master.Close()
	defer tty.Close()
	p := newPollIn(int(tty.Fd()))
	if p == nil {
		t.Fatal("a terminal was not made pollable")
	}
	defer p.close()
	got := readAsync(p)
	if _, err := master.Write([]byte("A/1\thost\nA/2\thost\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "A/1\thost\n" {
		t.Errorf("first read %q", s)
	}
	if s := <-readAsync(p); s != "A/2\thost\n" {
		t.Errorf("second read %q", s)
	}
}

// What cannot be polled keeps os.Stdin and os.Stdout.
func TestStdioFallback(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for name, fd := range map[string]int{"regular file": int(f.Fd()), "/dev/null": int(null.Fd())} {
		if p := newPollIn(fd); p != nil {
			p.close()
			t.Errorf("%s: made pollable", name)
		}
	}
	if w := newRawOut(int(f.Fd())); w != nil {
		t.Error("regular file: made a raw writer")
	}
}

// fill writes to the blocking socket fd without blocking until it is full.
func fill(t *testing.T, fd int) int {
	t.Helper()
	chunk := bytes.Repeat([]byte{'x'}, 4096)
	n := 0
	for {
		m, err := unix.SendmsgN(fd, chunk, nil, nil, unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
}

// A write to a full socket waits until the other end reads, then goes out
// whole and in order.
func TestRawOutWaitsWhenFull(t *testing.T) {
	ours, theirs := newFDs(t).socketpair(t)
	w := newRawOut(ours)
	if w == nil || !w.sock || w.own {
		t.Fatalf("socket: raw writer %+v, want one that sends on the socket itself", w)
	}
	filled := fill(t, ours)
	msg := []byte(strings.Repeat("0123456789abcdef", 8192)) // 128 KiB
	done := make(chan error, 1)
	go func() {
		n, err := w.Write(msg)
		if err == nil && n != len(msg) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	got := make([]byte, filled+len(msg))
	if _, err := io.ReadFull(fdReader(theirs), got); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[filled:], msg) {
		t.Error("the output arrived altered")
	}
}

// A scheduler that has gone away is an error, not a SIGPIPE: on a socket
// and on a pipe.
func TestRawOutClosedReader(t *testing.T) {
	f := newFDs(t)
	ours, theirs := f.socketpair(t)
	r, pw := f.pipe(t)
	f.close(theirs)
	f.close(r)
	for name, fd := range map[string]int{"socket": ours, "pipe": pw} {
		w := newRawOut(fd)
		if w == nil {
			t.Fatalf("%s: no raw writer", name)
		}
		_, err := w.Write([]byte("#hungry\n"))
		w.close()
		if !errors.Is(err, syscall.EPIPE) {
			t.Errorf("%s: write to a closed reader: %v, want EPIPE", name, err)
		}
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(es)
}

// Body is made only when asked for, is gone once the delivery function has
// returned, and no job leaves a descriptor open either way.
func TestBodyOnDemand(t *testing.T) {
	dir := spool(t)
	m := msg{name: "10003100", rcpts: []rcptLine{pending("smtp dest.test a@dest.test 0")}}.build()
	put(t, dir, "10003100", m.data, true)
	before := openFDs(t)
	var kept []*Delivery
	var bodies []string
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		kept = append(kept, d)
		if len(kept)%2 == 0 {
			b, err := io.ReadAll(io.NewSectionReader(d.Body(), d.File.BodyOffset, 1<<20))
			if err != nil {
				t.Error(err)
			}
			bodies = append(bodies, string(b))
		}
		return []Result{{Rcpt: d.Rcpts[0], Status: report.Deferred}}
	})
	c.expect("#hungry")
	for range 4 {
		c.send("10003100\tdest.test\n")
		c.next() // the report
		c.expect("#hungry")
	}
	c.end()
	for i, d := range kept {
		if d.Body() != nil {
			t.Errorf("job %d: Body after the delivery function returned", i)
		}
	}
	if len(bodies) != 2 || bodies[0] != testBody || bodies[1] != testBody {
		t.Errorf("bodies read: %q", bodies)
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open before, %d after", before, after)
	}
}

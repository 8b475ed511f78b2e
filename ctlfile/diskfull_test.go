package ctlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"zsched/internal/tinyfs"
)

// TestAppendOnFullDisk: a d line that needs a new block on a full tmpfs.
// Written plainly, the part that fits the control file's last page would
// stay as a torn line that the retry then runs into. Every append here —
// the scheduler's AppendDiags, an agent's Handle.AppendDiag, and a write
// whose space could not be reserved first — must fail with the reason and
// leave the file byte for byte as it was; once there is space the retry
// appends one whole line.
func TestAppendOnFullDisk(t *testing.T) {
	dir := tinyfs.Mount(t, 64<<10)
	s := &Spool{Root: dir}
	t.Cleanup(func() { s.Close() }) // its directory descriptors would keep the tmpfs busy
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	// A message whose control file ends 20 bytes short of a page.
	m := &Message{Sender: "s@example.org", Rcpts: []Address{{Channel: "smtp", Host: "h.test", User: "u@h.test"}}}
	rel, err := s.Enqueue(m)
	if err != nil {
		t.Fatal(err)
	}
	n := len(readFile(t, s.ctlPath(rel)))
	if err := s.Remove(Files{Rel: rel, ID: filepath.Base(rel)}); err != nil {
		t.Fatal(err)
	}
	m.Header = []byte("X-Pad: " + string(bytes.Repeat([]byte{'x'}, 4096-20-n-len("X-Pad: \n"))) + "\n")
	if rel, err = s.Enqueue(m); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, s.ctlPath(rel))
	if left := 4096 - len(before)%4096; left < 8 || left > 40 {
		t.Fatalf("control file is %d bytes, %d short of a page", len(before), left)
	}
	f, err := Parse(filepath.Base(rel), before)
	if err != nil {
		t.Fatal(err)
	}
	d := Diag{RcptOffset: f.Rcpts[0].Offset, Time: 1_700_000_000,
		Notary: "rfc822;u@h.test\x01failed\x015.1.1\x01smtp; 550 no such user", Text: "550 no such user"}

	free := fillFS(t, dir)
	unchanged := func(what string, err error, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s on a full disk: %v, want %v", what, err, want)
		}
		t.Logf("%s on a full disk: %v", what, err)
		if now := readFile(t, s.ctlPath(rel)); !bytes.Equal(now, before) {
			t.Fatalf("%s: the control file changed: %d bytes, was %d; tail %q", what, len(now), len(before), now[len(before)-20:])
		}
	}
	unchanged("AppendDiags", s.AppendDiags(rel, []Diag{d}), syscall.ENOSPC)

	h, err := Open(s.ctlPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	unchanged("Handle.AppendDiag", h.AppendDiag(d), syscall.ENOSPC)
	if len(h.File.Diags) != 0 {
		t.Fatalf("a failed AppendDiag added %d d lines to the handle's file", len(h.File.Diags))
	}
	h.Close()

	// Where the space cannot be reserved, the write stops short: undone.
	reserve = func(int, int) error { return nil }
	t.Cleanup(func() { reserve = reserveSpace })
	unchanged("AppendDiags without reservation", s.AppendDiags(rel, []Diag{d}), io.ErrShortWrite)
	reserve = reserveSpace

	free()
	if err := s.AppendDiags(rel, []Diag{d}); err != nil {
		t.Fatalf("append after freeing space: %v", err)
	}
	after := readFile(t, s.ctlPath(rel))
	if want := append(bytes.Clone(before), FormatDiag(d)...); !bytes.Equal(after, want) {
		t.Fatalf("after the retry the file ends %q, want one whole d line", after[len(before)-20:])
	}
	if f, err := Parse(filepath.Base(rel), after); err != nil || len(f.Diags) != 1 || f.Diags[0].Text != d.Text {
		t.Fatalf("after the retry: %v, d lines %+v", err, f.Diags)
	}
}

// fillFS fills dir's filesystem with a file and returns a function that
// removes it.
func fillFS(t *testing.T, dir string) func() {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(fmt.Errorf("filling: %w", err))
			}
			return func() { os.Remove(path) }
		}
	}
}

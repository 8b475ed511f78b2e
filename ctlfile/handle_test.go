package ctlfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// diffOffsets lists the offsets where a and b differ.
func diffOffsets(a, b []byte) []int {
	var d []int
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			d = append(d, i)
		}
	}
	return d
}

// TestHandleReplaysA2 does with Lock, Mark and AppendDiag what ZMailer's
// smtp agent did to 10002591 in A2 and must end with the document's bytes.
func TestHandleReplaysA2(t *testing.T) {
	o := observedFiles[1]
	p := writeFile(t, t.TempDir(), o.name, o.beforeBytes())
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	const pid = 21148
	for i := range h.File.Rcpts {
		ok, err := h.Lock(i, pid)
		if err != nil || !ok {
			t.Fatalf("Lock(%d) = %v, %v", i, ok, err)
		}
	}
	// O15: "r~  8072    smtp dest.test …" — '~', PID right-aligned in 6, delay blank.
	locked := readFile(t, p)
	for _, off := range o.rOffs {
		if got := string(locked[off : off+17]); got != "r~ 21148    smtp " {
			t.Errorf("locked line at %d reads %q", off, got)
		}
	}
	if d := diffOffsets(o.beforeBytes(), locked); len(d) != 3*6 {
		t.Errorf("locking changed %d bytes, want 3 × 6 (status + 5 PID digits/blank)", len(d))
	}
	for i, st := range []Status{Done, Failed, Pending} {
		if err := h.Mark(i, st); err != nil {
			t.Fatal(err)
		}
	}
	ri := 1
	r := h.File.Rcpts[ri]
	d := Diag{RcptOffset: r.Offset, HeaderOffset: r.HeaderOffset, NOffset: r.NOffset, Time: 1795337543}
	line := o.dLines[0]
	fields := strings.SplitN(strings.TrimSuffix(line, "\n"), "\t", 3)
	d.Notary, d.Text = fields[1], fields[2]
	if err := h.AppendDiag(d); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, p), o.afterBytes(); !bytes.Equal(got, want) {
		t.Errorf("file after replay differs at %v\n got %q\nwant %q", diffOffsets(got, want), got, want)
	}
	if n := len(h.File.Diags); n != 1 || h.File.Diags[0].Offset != o.dOffs[0] {
		t.Errorf("in-memory diags %+v, want one at %d", h.File.Diags, o.dOffs[0])
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestLockOnlyPending(t *testing.T) {
	o := observedFiles[1]
	p := writeFile(t, t.TempDir(), o.name, o.afterBytes()) // marks "+- "
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i, want := range []bool{false, false, true} {
		ok, err := h.Lock(i, 4242)
		if err != nil || ok != want {
			t.Errorf("Lock(%d) = %v, %v; want %v", i, ok, err, want)
		}
	}
	// Another agent locks rcpt 2 behind our back: Lock re-reads the disk.
	h2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if h2.File.Rcpts[2].Status != Locked || h2.File.Rcpts[2].PID != 4242 {
		t.Fatalf("second open sees %+v", h2.File.Rcpts[2])
	}
	if err := h.Mark(2, Pending); err != nil {
		t.Fatal(err)
	}
	if err := writeAt(p, o.rOffs[2]+1, "~  9999"); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Lock(2, 4242); ok || err != nil {
		t.Errorf("Lock of a line another process locked = %v, %v", ok, err)
	}
	if h.File.Rcpts[2].Status != Locked {
		t.Errorf("in-memory status not refreshed: %v", h.File.Rcpts[2].Status)
	}
}

// LockAsRead takes what Open saw pending, with the bytes Lock writes, and
// only that: it does not read the file again.
func TestLockAsRead(t *testing.T) {
	o := observedFiles[1]
	p := writeFile(t, t.TempDir(), o.name, o.afterBytes()) // marks "+- "
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i, want := range []bool{false, false, true} {
		ok, err := h.LockAsRead(i, 4242)
		if err != nil || ok != want {
			t.Errorf("LockAsRead(%d) = %v, %v; want %v", i, ok, err, want)
		}
	}
	if got := readFile(t, p)[o.rOffs[2]+1:][:7]; string(got) != "~  4242" {
		t.Errorf("lock written as %q", got)
	}
	if h.File.Rcpts[2].Status != Locked || h.File.Rcpts[2].PID != 4242 {
		t.Errorf("in-memory after the lock: %+v", h.File.Rcpts[2])
	}
	// Locked now, as far as the Handle knows: not again, whatever the
	// disk says.
	if err := writeAt(p, o.rOffs[2]+1, "       "); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.LockAsRead(2, 4242); ok || err != nil {
		t.Errorf("LockAsRead of a line the Handle holds = %v, %v", ok, err)
	}
	if got := readFile(t, p)[o.rOffs[2]+1:][:7]; string(got) != "       " {
		t.Errorf("LockAsRead of a held line wrote %q", got)
	}
	if _, err := h.LockAsRead(0, 0); err == nil {
		t.Error("LockAsRead with pid 0 succeeded")
	}
}

// Open reuses its read buffer: what an earlier Handle parsed must not
// change when a later Open reads another file into the same buffer.
func TestOpenReusesNothingParsed(t *testing.T) {
	dir := t.TempDir()
	var hs []*Handle
	for _, o := range observedFiles {
		h, err := Open(writeFile(t, dir, o.name, o.afterBytes()))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		hs = append(hs, h)
	}
	for i, o := range observedFiles {
		want, err := Parse(o.name, o.afterBytes())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(hs[i].File, want) {
			t.Errorf("%s: after later Opens\n%+v\nwant\n%+v", o.name, hs[i].File, want)
		}
	}
}

func writeAt(p string, off int64, s string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt([]byte(s), off)
	return err
}

func TestLockWidePID(t *testing.T) {
	dir := t.TempDir()
	orig := observedFiles[0].beforeBytes()
	p := writeFile(t, dir, "10002561", orig)
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if ok, err := h.Lock(0, 4194303); !ok || err != nil {
		t.Fatalf("Lock = %v, %v", ok, err)
	}
	if got := string(readFile(t, p)[121:134]); got != "r~4194303   s" {
		t.Errorf("wide lock reads %q", got)
	}
	h2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if pid := h2.File.Rcpts[0].PID; pid != 4194303 {
		t.Errorf("parsed PID %d", pid)
	}
	h2.Close()
	if err := h.Mark(0, Pending); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); !bytes.Equal(got, orig) {
		t.Errorf("Mark did not blank the wide PID: %q", got[121:140])
	}

	// Without the delay field a 7-digit PID does not fit.
	noDelay := bytes.Replace(orig, []byte("@ 0x00000007"), []byte("@ 0x00000001"), 1)
	noDelay = bytes.Replace(noDelay, []byte("r           smtp"), []byte("r       smtp"), 1)
	p2 := writeFile(t, dir, "10002562", noDelay)
	h3, err := Open(p2)
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Close()
	if ok, err := h3.Lock(0, 4194303); ok || err == nil {
		t.Errorf("Lock of a 7-digit PID without a delay field = %v, %v", ok, err)
	}
	if ok, err := h3.Lock(0, 77); !ok || err != nil {
		t.Errorf("Lock = %v, %v", ok, err)
	}
	if got := string(readFile(t, p2)[121:130]); got != "r~    77s" {
		t.Errorf("lock reads %q", got)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "123"))
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(missing) = %v", err)
	}
	p := writeFile(t, dir, "124", bytes.Replace(observedFiles[0].beforeBytes(), []byte("0x00000007"), []byte("0x00000017"), 1))
	if _, err := Open(p); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("Open(unknown flags) = %v", err)
	}
	p = writeFile(t, dir, "125", observedFiles[0].beforeBytes())
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lock(5, 1); err == nil {
		t.Error("Lock of a recipient index out of range succeeded")
	}
	if err := h.Mark(0, Locked); err == nil {
		t.Error("Mark(Locked) succeeded")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := h.Lock(0, 1); err == nil {
		t.Error("Lock after Close succeeded")
	}
}

func TestFormatDiagSanitizes(t *testing.T) {
	got := string(FormatDiag(Diag{RcptOffset: 1, HeaderOffset: 2, NOffset: -1, Time: 3, Notary: "a\tb\nc", Text: "x\ny\tz"}))
	want := "d 1:2:-1::3\ta b c\tx\ry\tz\n"
	if got != want {
		t.Errorf("FormatDiag = %q, want %q", got, want)
	}
	f, err := Parse("1", []byte("@ 0x00000007\ni 1\nl <x>\n"+got))
	if err != nil {
		t.Fatal(err)
	}
	if d := f.Diags[0]; d.Notary != "a b c" || d.Text != "x\ry\tz" {
		t.Errorf("parsed back %+v", d)
	}
}

func TestAppendDiagOffsetWithOtherWriters(t *testing.T) {
	o := observedFiles[0]
	p := writeFile(t, t.TempDir(), o.name, o.beforeBytes())
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	d := Diag{RcptOffset: 121, HeaderOffset: 166, NOffset: -1, Time: 1, Notary: "n", Text: "first"}
	if err := h.AppendDiag(d); err != nil {
		t.Fatal(err)
	}
	// Someone else (the scheduler) appends in between.
	other, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Write(FormatDiag(Diag{RcptOffset: 121, Text: "other"})); err != nil {
		t.Fatal(err)
	}
	other.Close()
	d.Text = "second"
	if err := h.AppendDiag(d); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(o.name, readFile(t, p))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Diags) != 3 {
		t.Fatalf("%d diags", len(f.Diags))
	}
	for i, di := range h.File.Diags {
		want := f.Diags[2*i]
		if di.Offset != want.Offset || di.Text != want.Text {
			t.Errorf("handle's diag %d at %d %q, file has %d %q", i, di.Offset, di.Text, want.Offset, want.Text)
		}
	}
}

// OpenAt opens relative to a directory descriptor and names the file, in
// Path and in its errors, as Open of the joined path does.
func TestOpenAt(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "A/B/10002561", observedFiles[0].beforeBytes())
	dfd, err := rawsys.OpenCwd(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		t.Fatal(err)
	}
	defer rawsys.Close(dfd)
	h, err := OpenAt(dfd, dir, "A/B/10002561")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	joined := filepath.Join(dir, "A/B/10002561")
	if h.Path() != joined || h.File.Name != "10002561" || h.File.ID != "10002561" {
		t.Errorf("Path %q, Name %q, ID %q", h.Path(), h.File.Name, h.File.ID)
	}
	if ok, err := h.LockAsRead(0, 4242); !ok || err != nil {
		t.Fatalf("LockAsRead = %v, %v", ok, err)
	}
	if got := string(readFile(t, joined)[121:129]); got != "r~  4242" {
		t.Errorf("lock reads %q", got)
	}

	_, err = OpenAt(dfd, dir, "A/B/1")
	_, want := Open(filepath.Join(dir, "A/B/1"))
	if !errors.Is(err, ErrNotFound) || err.Error() != want.Error() {
		t.Errorf("OpenAt(missing) = %v, want %v", err, want)
	}
	if _, err := OpenAt(unix.AT_FDCWD, "", joined); err != nil {
		t.Errorf("OpenAt(AT_FDCWD, an absolute path) = %v", err)
	}
}

// Release closes all but the status descriptor, which it hands over.
func TestRelease(t *testing.T) {
	p := writeFile(t, t.TempDir(), "10002561", observedFiles[0].beforeBytes())
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AppendDiag(Diag{RcptOffset: 121, HeaderOffset: -1, NOffset: -1, Time: 1}); err != nil {
		t.Fatal(err)
	}
	app := int(h.app.Fd())
	fd, err := h.Release()
	if err != nil || fd < 0 {
		t.Fatalf("Release = %d, %v", fd, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Errorf("released descriptor: %v", err)
	}
	if err := unix.Fstat(app, &st); err != unix.EBADF {
		t.Errorf("append descriptor after Release: %v, want EBADF", err)
	}
	rawsys.Close(fd)
	if err := h.Mark(0, Done); err == nil {
		t.Error("Mark after Release succeeded")
	}
	if fd, err := h.Release(); fd != -1 || err != nil {
		t.Errorf("second Release = %d, %v", fd, err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close after Release: %v", err)
	}
}

// The stack-built lock and mark bytes are the spool's.
func TestAppendLockAndMark(t *testing.T) {
	for _, format := range []uint32{0, FlagPID, FlagPID | FlagDelay, FlagDelay} {
		for _, pid := range []int{0, 1, 9, 10, 99, 100, 4242, 999999, 1000000, 4194303, 123456789} {
			if got, want := appendLock(nil, format, pid), lockBytes(format, pid); !bytes.Equal(got, want) {
				t.Errorf("appendLock(%#x, %d) = %q, want %q", format, pid, got, want)
			}
			for _, st := range []Status{Pending, Done, Failed} {
				got, want := appendMark(nil, st, format, pid), statusBytes(st, markWidth(format, pid))
				if !bytes.Equal(got, want) {
					t.Errorf("appendMark(%q, %#x, %d) = %q, want %q", st, format, pid, got, want)
				}
			}
		}
	}
	for _, n := range []int{0, 7, -7, 10, -10, 99, 100, 123456789, -123456789} {
		if got, want := decimalWidth(n), len(strconv.Itoa(n)); got != want {
			t.Errorf("decimalWidth(%d) = %d, want %d", n, got, want)
		}
	}
}

package rawsys

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Open, Pwrite, Pread, Read and Close on a file, by a path short enough
// for the stack copy and by one too long for it.
func TestFileCalls(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("d", 200), strings.Repeat("f", 100))
	if err := os.MkdirAll(filepath.Dir(long), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "short"), long} {
		if err := os.WriteFile(p, []byte("r           smtp\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := OpenCwd(p, unix.O_RDWR)
		if err != nil {
			t.Fatalf("open %d-byte path: %v", len(p), err)
		}
		if n, err := Pwrite(fd, []byte("~  4242"), 1); n != 7 || err != nil {
			t.Errorf("pwrite = %d, %v", n, err)
		}
		b := make([]byte, 7)
		if n, err := Pread(fd, b, 1); n != 7 || err != nil || string(b) != "~  4242" {
			t.Errorf("pread = %d, %v, %q", n, err, b)
		}
		all := make([]byte, 64)
		if n, err := Read(fd, all); err != nil || string(all[:n]) != "r~  4242    smtp\n" {
			t.Errorf("read = %q, %v", all[:n], err)
		}
		if err := Close(fd); err != nil {
			t.Error(err)
		}
		if err := Close(fd); err != unix.EBADF {
			t.Errorf("second close: %v, want EBADF", err)
		}
	}
}

// Errors are *fs.PathError, as os.OpenFile's, relative to a directory
// descriptor too.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenCwd(filepath.Join(dir, "missing"), unix.O_RDONLY)
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) || pe.Op != "open" {
		t.Errorf("missing file: %v", err)
	}
	if _, err := OpenCwd("a\x00b", unix.O_RDONLY); err == nil {
		t.Error("a path with a NUL opened")
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dfd, err := OpenCwd(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(dfd)
	fd, err := Open(dfd, "f", unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	Close(fd)
}

// Recv and Send do not block on a blocking socket: EAGAIN.
func TestSocketCallsDoNotBlock(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	b := make([]byte, 16)
	if _, err := Recv(fds[0], b); err != unix.EAGAIN {
		t.Errorf("recv on an empty socket: %v, want EAGAIN", err)
	}
	if n, err := Send(fds[1], []byte("#hungry\n")); n != 8 || err != nil {
		t.Errorf("send = %d, %v", n, err)
	}
	if n, err := Recv(fds[0], b); err != nil || string(b[:n]) != "#hungry\n" {
		t.Errorf("recv = %q, %v", b[:n], err)
	}
	for {
		_, err := Send(fds[1], make([]byte, 65536))
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			t.Fatalf("send to a filling socket: %v", err)
		}
	}
	if n, err := Write(fds[1], []byte{}); n != 0 || err != nil {
		t.Errorf("empty write = %d, %v", n, err)
	}
}

// CloseRange closes exactly the descriptors of its range.
func TestCloseRange(t *testing.T) {
	var fds [4]int
	for i := range fds {
		fd, err := OpenCwd(os.DevNull, unix.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		fds[i] = fd
	}
	lo, hi := min(fds[1], fds[2]), max(fds[1], fds[2])
	if hi != lo+1 {
		t.Skipf("descriptors %v are not consecutive", fds)
	}
	if err := CloseRange(lo, hi); err == unix.ENOSYS {
		t.Skip("close_range: ENOSYS")
	} else if err != nil {
		t.Fatal(err)
	}
	for i, fd := range fds {
		var st unix.Stat_t
		err := unix.Fstat(fd, &st)
		if closed := err == unix.EBADF; closed != (i == 1 || i == 2) {
			t.Errorf("descriptor %d (%d): fstat %v", i, fd, err)
		}
	}
	Close(fds[0])
	Close(fds[3])
	if err := CloseRange(5, 4); err != unix.EINVAL {
		t.Errorf("empty range: %v, want EINVAL", err)
	}
}

// Fstatat relative to a directory descriptor: the size and mtime of a file
// by a short and by a too-long path, ENOENT for a missing one, EINVAL for
// a NUL in the name.
func TestFstatat(t *testing.T) {
	dir := t.TempDir()
	sub := strings.Repeat("d", 200)
	if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	dirfd, err := OpenCwd(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(dirfd)
	for _, name := range []string{"short", filepath.Join(sub, strings.Repeat("f", 100))} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("0123456789"), 0o644); err != nil {
			t.Fatal(err)
		}
		want, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := Fstatat(dirfd, name, &st); err != nil {
			t.Fatalf("fstatat %d-byte name: %v", len(name), err)
		}
		if st.Size != 10 || st.Mtim.Nano() != want.ModTime().UnixNano() {
			t.Errorf("fstatat %d-byte name: size %d mtime %d, want 10 and %d", len(name), st.Size, st.Mtim.Nano(), want.ModTime().UnixNano())
		}
	}
	var st unix.Stat_t
	if err := Fstatat(dirfd, "missing", &st); err != unix.ENOENT {
		t.Errorf("missing file: %v, want ENOENT", err)
	}
	if err := Fstatat(dirfd, "a\x00b", &st); err != unix.EINVAL {
		t.Errorf("NUL in the name: %v, want EINVAL", err)
	}
}

// Fstat of an open file; NameToHandleAt by name and of the descriptor
// (AT_EMPTY_PATH) agree, and a file made again under a reused inode number
// gets another handle.
func TestFstatAndHandles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := OpenCwd(p, unix.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := Fstat(fd, &st); err != nil || st.Size != 10 {
		t.Fatalf("fstat: %v, size %d", err, st.Size)
	}
	var byName, byFD FileHandle
	if _, err := NameToHandleAt(unix.AT_FDCWD, p, 0, &byName); err != nil {
		if err == unix.EOPNOTSUPP {
			t.Skip("no file handles on this filesystem")
		}
		t.Fatal(err)
	}
	if _, err := NameToHandleAt(fd, "", unix.AT_EMPTY_PATH, &byFD); err != nil {
		t.Fatal(err)
	}
	Close(fd)
	if byName.Bytes == 0 || byName.Bytes != byFD.Bytes || byName.Data != byFD.Data {
		t.Fatalf("handles by name %x and by descriptor %x differ", byName.Data[:byName.Bytes], byFD.Data[:byFD.Bytes])
	}
	var missing FileHandle
	if _, err := NameToHandleAt(unix.AT_FDCWD, filepath.Join(dir, "missing"), 0, &missing); err != unix.ENOENT {
		t.Errorf("missing file: %v, want ENOENT", err)
	}
	for range 20 {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var again unix.Stat_t
		if err := unix.Stat(p, &again); err != nil {
			t.Fatal(err)
		}
		var h FileHandle
		if _, err := NameToHandleAt(unix.AT_FDCWD, p, 0, &h); err != nil {
			t.Fatal(err)
		}
		if again.Ino == st.Ino {
			if h.Data == byName.Data {
				t.Fatalf("inode %d reused with the same handle %x", st.Ino, h.Data[:h.Bytes])
			}
			return
		}
	}
	t.Logf("inode %d was not reused in 20 tries: the handles could not be compared", st.Ino)
}

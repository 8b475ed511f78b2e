package ctlfile

// Scheduler-side writes into control files (d lines appended, d lines
// marked reported) and how an append survives a full disk.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// MarkDiags rewrites the status byte of the d lines at offsets to Done
// (the scheduler does this once it has put them into a DSN), then fsyncs:
// a lost mark would mean a duplicate DSN.
func (s *Spool) MarkDiags(rel string, offsets []int64) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	fd, err := openRegular(s.ctlPath(rel), os.O_RDWR)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		return fmt.Errorf("ctlfile: mark diagnostics in %s: %w", rel, err)
	}
	defer fd.Close()
	var cur [2]byte
	for _, off := range offsets {
		if _, err := fd.ReadAt(cur[:], off); err != nil {
			return fmt.Errorf("ctlfile: mark diagnostics in %s: offset %d: %w", rel, off, err)
		}
		if cur[0] != 'd' || (cur[1] != byte(Pending) && cur[1] != byte(Done)) {
			return fmt.Errorf("ctlfile: mark diagnostics in %s: no d line at offset %d", rel, off)
		}
		if _, err := fd.WriteAt([]byte{byte(Done)}, off+1); err != nil {
			return fmt.Errorf("ctlfile: mark diagnostics in %s: %w", rel, err)
		}
	}
	if err := fd.Sync(); err != nil {
		return fmt.Errorf("ctlfile: mark diagnostics in %s: %w", rel, err)
	}
	return fd.Close()
}

// AppendDiags appends d lines to transport/rel with one write on an
// O_APPEND descriptor and an fsync (the scheduler does this on expiry).
func (s *Spool) AppendDiags(rel string, ds []Diag) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	var buf []byte
	for _, d := range ds {
		buf = append(buf, FormatDiag(d)...)
	}
	fd, err := openRegular(s.ctlPath(rel), os.O_WRONLY|os.O_APPEND)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		return fmt.Errorf("ctlfile: append to %s: %w", rel, err)
	}
	defer fd.Close()
	if _, err := writeOnce(fd, buf); err != nil {
		return fmt.Errorf("ctlfile: append to %s: %w", rel, err)
	}
	if err := fd.Sync(); err != nil {
		return fmt.Errorf("ctlfile: append to %s: %w", rel, err)
	}
	return fd.Close()
}

// writeOnce issues exactly one write(2): concurrent O_APPEND writers (agents
// and the scheduler) rely on each d line landing whole. os.File.Write would
// loop on a short write and could interleave the remainder with another
// writer's line.
//
// On a full filesystem a write that needs a new block stops short instead
// of failing: the part that fit stays, a d line without its newline, and
// the next append (the retry) would run into it and garble both lines. So
// the space is reserved first (fallocate with FALLOC_FL_KEEP_SIZE): a full
// disk then fails with ENOSPC before any byte is written. A short write
// that still happens (no fallocate on this filesystem, or another writer
// took the reserved space) is undone by truncating the file back, unless
// something was appended after it.
func writeOnce(f *os.File, b []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		if werr = reserve(int(fd), len(b)); werr != nil {
			return true
		}
		for {
			n, werr = unix.Write(int(fd), b)
			if werr != unix.EINTR {
				break
			}
		}
		if werr == nil && n < len(b) {
			werr = undoShortWrite(int(fd), n, len(b))
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if werr != nil {
		return 0, werr
	}
	return n, nil
}

// reserve is reserveSpace; tests replace it to make a write stop short.
var reserve = reserveSpace

// reserveSpace allocates n bytes after the end of the file behind fd,
// keeping its size. Only a full disk or quota is an error; a filesystem
// that cannot reserve (EOPNOTSUPP, …) leaves it to the write.
func reserveSpace(fd, n int) error {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return nil
	}
	err := ignoringEINTR(func() error { return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, st.Size, int64(n)) })
	if err == unix.ENOSPC || err == unix.EDQUOT {
		return fmt.Errorf("reserve %d bytes: %w", n, err)
	}
	return nil
}

// undoShortWrite removes the n bytes of a short O_APPEND write (of want)
// from the end of the file, where the descriptor's offset now is.
func undoShortWrite(fd, n, want int) error {
	short := fmt.Errorf("%w: %d of %d bytes", io.ErrShortWrite, n, want)
	if n == 0 {
		return short
	}
	end, err := unix.Seek(fd, 0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("%w, torn line left at the end: %v", short, err)
	}
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil || st.Size != end {
		return fmt.Errorf("%w, torn line left at offset %d: another writer appended after it", short, end-int64(n))
	}
	if err := ignoringEINTR(func() error { return unix.Ftruncate(fd, end-int64(n)) }); err != nil {
		return fmt.Errorf("%w, torn line left at the end: %v", short, err)
	}
	return fmt.Errorf("%w, undone", short)
}

// openRegular opens the control file at path for the scheduler's writes
// without waiting on what it finds there (O_NONBLOCK: a FIFO with no
// reader fails at once, one with a reader opens) nor following a symbolic
// link, and refuses anything but a regular file (ErrNotRegular): the
// scheduler's loop makes these calls.
func openRegular(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, path, st.Mode().Type())
	}
	return f, nil
}

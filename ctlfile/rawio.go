package ctlfile

import (
	"io"
	"io/fs"
	"time"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// Raw descriptor I/O for the per-job paths. Every job costs an agent an
// open of its control file and of the body, and every message costs the
// scheduler a read; os.OpenFile adds poller registration (an epoll_ctl that
// fails for a regular file) and flag probes (fcntl) that together cost as
// much again as the open itself. Regular files never block, so the poller
// buys nothing here.

// ignoringEINTR retries fn while it fails with EINTR: Go's runtime signals
// (preemption) may interrupt a system call.
func ignoringEINTR(fn func() error) error {
	for {
		err := fn()
		if err != unix.EINTR {
			return err
		}
	}
}

// openFD opens path with flags (O_CLOEXEC added) and returns the raw
// descriptor; errors are *fs.PathError as os.OpenFile gives.
func openFD(path string, flags int) (int, error) {
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, flags|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// readFD reads a regular file from its current offset to its end. A read
// that returns less than asked is the end: on a regular file that only
// happens at end of file, which is also what ZMailer's ctlopen relies on
// (one read of st_size bytes), and it saves the second read that would
// return 0.
func readFD(fd int) ([]byte, error) {
	buf := make([]byte, 0, 4096)
	for {
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+n]
		if n == 0 || len(buf) < cap(buf) {
			return buf, nil
		}
		buf = append(buf, 0)[:len(buf)] // grow
	}
}

// The Handle's calls (an agent's, one job after another) go through package
// rawsys: raw system calls, without the Go scheduler's bookkeeping, which on
// a control file in the page cache costs more than the calls.

// readRaw reads a regular file from its current offset to its end into
// buf's spare capacity, growing it as needed; like readFD, a short read is
// the end.
func readRaw(fd int, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		n, err := rawsys.Read(fd, buf[len(buf):cap(buf)])
		if err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+n]
		if n == 0 || len(buf) < cap(buf) {
			return buf, nil
		}
	}
}

// preadFull reads len(b) bytes at off; a short file is io.ErrUnexpectedEOF
// (io.EOF when nothing at all is there), as os.File.ReadAt reports.
func preadFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := rawsys.Pread(fd, b, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// pwriteFull writes all of b at off.
func pwriteFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := rawsys.Pwrite(fd, b, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// readWhole is os.ReadFile on a raw descriptor.
func readWhole(path string) ([]byte, error) {
	fd, err := openFD(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	data, err := readFD(fd)
	unix.Close(fd)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	return data, nil
}

// modTime is os.Stat(path).ModTime() without building a FileInfo.
func modTime(path string) (time.Time, error) {
	var st unix.Stat_t
	err := unix.Stat(path, &st)
	for err == unix.EINTR {
		err = unix.Stat(path, &st)
	}
	if err != nil {
		return time.Time{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return time.Unix(st.Mtim.Unix()), nil
}

package ctlfile

import (
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
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

// The Handle's calls (an agent's, one job after another) go through package
// rawsys: raw system calls, without the Go scheduler's bookkeeping, which on
// a control file in the page cache costs more than the calls.

// readRaw reads a regular file from its current offset to its end into
// buf's spare capacity, growing it as needed. A read that returns less than
// asked is the end: on a regular file that only happens at end of file,
// which is also what ZMailer's ctlopen relies on (one read of st_size
// bytes), and it saves the second read that would return 0.
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

// The scheduler's per-message calls (read the control file, stat the body,
// unlink both) go through descriptors of transport/ and queue/ instead of
// absolute paths: /tmp/x/postoffice/transport/A/B/123 is seven path
// components for the kernel to look up on every call, A/B/123 relative to
// a descriptor of transport/ three. ZMailer's scheduler gets the same
// effect by working in transport/ (chdir). Descriptors of the hash
// directories too (up to 2×703) measured no better.

// Trees of the spool that dirCache keeps descriptors for.
const (
	treeTransport = iota
	treeQueue
	numTrees
)

// dirCache is a Spool's descriptors of transport/ and queue/ for one Root.
// Its table is a separate object so that a cleanup can close them once
// the dirCache is garbage: users keep the dirCache alive
// (runtime.KeepAlive) until their call on a descriptor has returned.
type dirCache struct {
	root  string
	paths [numTrees]string // Root/transport, Root/queue
	fds   *dirFDs
}

// dirFDs holds each tree's descriptor plus one (0: not opened yet), opened
// with O_PATH and close-on-exec when first needed. A descriptor is never
// closed while the table is in use: one found stale (its directory was
// removed and made again) is only retired, and closed with the rest.
type dirFDs struct {
	slot [numTrees]atomic.Int32

	mu      sync.Mutex
	retired []int
}

func newDirCache(root string) *dirCache {
	c := &dirCache{root: root, fds: new(dirFDs)}
	c.paths[treeTransport] = filepath.Join(root, "transport")
	c.paths[treeQueue] = filepath.Join(root, "queue")
	runtime.AddCleanup(c, (*dirFDs).closeAll, c.fds)
	return c
}

// closeAll closes every descriptor of the table; the table stays usable
// (empty).
func (t *dirFDs) closeAll() {
	for i := range t.slot {
		if v := t.slot[i].Swap(0); v != 0 {
			unix.Close(int(v - 1))
		}
	}
	t.mu.Lock()
	for _, fd := range t.retired {
		unix.Close(fd)
	}
	t.retired = nil
	t.mu.Unlock()
}

// dirFD returns the descriptor of tree, opening it if needed; ok is false
// when it cannot be opened (the caller then goes by path, and meets the
// same error with the file's name).
func (c *dirCache) dirFD(tree int) (fd int, ok bool) {
	s := &c.fds.slot[tree]
	if v := s.Load(); v != 0 {
		return int(v - 1), true
	}
	fd, err := unix.Open(c.paths[tree], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(c.paths[tree], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, false
	}
	if !s.CompareAndSwap(0, int32(fd)+1) {
		unix.Close(fd) // another goroutine was first
		return int(s.Load() - 1), true
	}
	return fd, true
}

// retire takes the stale descriptor fd of tree out of its slot.
func (c *dirCache) retire(tree, fd int) {
	if c.fds.slot[tree].CompareAndSwap(int32(fd)+1, 0) {
		c.fds.mu.Lock()
		c.fds.retired = append(c.fds.retired, fd)
		c.fds.mu.Unlock()
	}
}

// at calls op(dirfd, rel) for the file rel ("N", "A/N" or "A/B/N", checked)
// of tree, relative to the tree's descriptor. If that finds no file, op is
// called again with the full path (dirfd AT_FDCWD): should it find the
// file there, the tree was replaced since it was opened, and its
// descriptor is retired. Errors are *fs.PathError with opName and the
// file's full path.
func (c *dirCache) at(tree int, rel, opName string, op func(dirfd int, rel string) error) error {
	fd, ok := c.dirFD(tree)
	if ok {
		err := op(fd, rel)
		if err != unix.ENOENT {
			runtime.KeepAlive(c)
			if err != nil {
				return &fs.PathError{Op: opName, Path: c.paths[tree] + "/" + rel, Err: err}
			}
			return nil
		}
	}
	full := c.paths[tree] + "/" + rel
	err := op(unix.AT_FDCWD, full)
	if ok && err != unix.ENOENT {
		c.retire(tree, fd)
	}
	runtime.KeepAlive(c)
	if err != nil {
		return &fs.PathError{Op: opName, Path: full, Err: err}
	}
	return nil
}

// maxPooledBuf is the largest buffer Spool.read puts back in readBufs
// (handle.go); a huge control file's buffer is left to the collector.
const maxPooledBuf = 64 << 10

// readAt reads the whole file rel of tree into buf's spare capacity,
// growing it as needed.
func (c *dirCache) readAt(tree int, rel string, buf []byte) ([]byte, error) {
	readFailed := false
	err := c.at(tree, rel, "open", func(dirfd int, name string) error {
		fd, err := rawsys.Open(dirfd, name, unix.O_RDONLY)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return pe.Err
			}
			return err
		}
		buf, err = readRaw(fd, buf)
		rawsys.Close(fd)
		readFailed = err != nil
		return err
	})
	if pe, ok := err.(*fs.PathError); ok && readFailed {
		pe.Op = "read"
	}
	return buf, err
}

// modTimeAt is the mtime of the file rel of tree.
func (c *dirCache) modTimeAt(tree int, rel string) (time.Time, error) {
	var st unix.Stat_t
	err := c.at(tree, rel, "stat", func(dirfd int, name string) error {
		return rawsys.Fstatat(dirfd, name, &st)
	})
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(st.Mtim.Unix()), nil
}

// unlinkAt removes the file rel of tree.
func (c *dirCache) unlinkAt(tree int, rel string) error {
	return c.at(tree, rel, "remove", func(dirfd int, name string) error {
		return ignoringEINTR(func() error { return unix.Unlinkat(dirfd, name, 0) })
	})
}

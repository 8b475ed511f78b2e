package ctlfile

import (
	"errors"
	"fmt"
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
//
// Past limit bytes it stops with ErrTooLarge.
func readRaw(fd int, buf []byte, limit int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		n, err := rawsys.Read(fd, buf[len(buf):cap(buf)])
		if err != nil {
			return nil, err
		}
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, ErrTooLarge
		}
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
	// noHandles is set for a tree whose filesystem gives no file
	// handles: FileIDs there come from statx (fileid.go).
	noHandles [numTrees]atomic.Bool
	// noNoatime is set once an open with O_NOATIME has been refused
	// (EPERM: the process neither owns the spool's files nor has
	// CAP_FOWNER): control files are then read without it.
	noNoatime atomic.Bool

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

// sysErr is the errno inside err (rawsys.Open's *fs.PathError), for
// dirCache.at's operations.
func sysErr(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// openFile opens the file rel of tree with flags, never following a
// symbolic link and never waiting (O_NONBLOCK: a FIFO opens at once, and
// is then refused by the caller's fstat).
func (c *dirCache) openFile(tree int, rel string, flags int) (int, error) {
	fd := -1
	err := c.at(tree, rel, "open", func(dirfd int, name string) error {
		var err error
		fd, err = rawsys.Open(dirfd, name, flags|unix.O_NONBLOCK|unix.O_NOFOLLOW)
		return sysErr(err)
	})
	return fd, err
}

// openControl opens the control file rel for reading, with O_NOATIME where
// the kernel permits it: the scheduler's read is no reason to write the
// file's inode, which relatime (the default) does on the first read after
// a write — every control file, once — and which on a journalling
// filesystem is a journal update. Where it is refused (EPERM), the spool
// reads without it from then on.
func (c *dirCache) openControl(rel string) (int, error) {
	if !c.fds.noNoatime.Load() {
		fd, err := c.openFile(treeTransport, rel, unix.O_RDONLY|unix.O_NOATIME)
		if !errors.Is(err, unix.EPERM) {
			return fd, err
		}
		c.fds.noNoatime.Store(true)
	}
	return c.openFile(treeTransport, rel, unix.O_RDONLY)
}

// controlStat is what readControl learns of a control file before it
// reads it.
type controlStat struct {
	id      FileID
	size    int64
	changed time.Time // ctime
}

// readControl reads the control file rel whole into buf's spare capacity,
// growing it as needed: open (not following a symbolic link, not waiting),
// fstat, identify, read, close. What is not a regular file is
// ErrNotRegular, unread; a file larger than limit is ErrTooLarge, unread
// (or, should it grow past limit while read, read no further).
func (c *dirCache) readControl(rel string, buf []byte, limit int64) ([]byte, controlStat, error) {
	var cs controlStat
	fd, err := c.openControl(rel)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
			// A symbolic link (O_NOFOLLOW), a socket.
			return buf, cs, fmt.Errorf("%w: %w", ErrNotRegular, err)
		}
		return buf, cs, err
	}
	defer rawsys.Close(fd)
	path := func() string { return c.paths[treeTransport] + "/" + rel } // for errors only
	var st unix.Stat_t
	if err := rawsys.Fstat(fd, &st); err != nil {
		return buf, cs, &fs.PathError{Op: "stat", Path: path(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return buf, cs, fmt.Errorf("%w: %s is a %s", ErrNotRegular, path(), fileType(st.Mode))
	}
	cs.size, cs.changed = st.Size, time.Unix(st.Ctim.Unix())
	if cs.id, _, err = c.identify(treeTransport, fd, "", false, &st); err != nil {
		return buf, cs, &fs.PathError{Op: "identify", Path: path(), Err: err}
	}
	if st.Size > limit {
		return buf, cs, ErrTooLarge
	}
	// One read of the whole file then comes back short: the end.
	if need := int(st.Size) + 1; cap(buf)-len(buf) < need {
		buf = append(make([]byte, 0, len(buf)+need), buf...)
	}
	buf, err = readRaw(fd, buf, limit)
	if err != nil {
		if err == ErrTooLarge {
			return buf, cs, err
		}
		return buf, cs, &fs.PathError{Op: "read", Path: path(), Err: err}
	}
	return buf, cs, nil
}

// fileType names the type in a mode for people.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFREG:
		return "regular file"
	}
	return fmt.Sprintf("file of mode %#o", mode)
}

// statBody is the mtime and identity of the body rel (following a
// symbolic link, as an agent opening it does): fstatat and one
// name_to_handle_at. Should the name lead to another file between the two
// (replaced), it looks again.
func (c *dirCache) statBody(rel string) (time.Time, FileID, error) {
	var st unix.Stat_t
	var id FileID
	err := c.at(treeQueue, rel, "stat", func(dirfd int, name string) error {
		for range 3 {
			if err := rawsys.Fstatat(dirfd, name, &st); err != nil {
				return err
			}
			var ok bool
			var err error
			if id, ok, err = c.identify(treeQueue, dirfd, name, true, &st); err != nil || ok {
				return err
			}
		}
		return nil // replaced three times over: the last look stands
	})
	if err != nil {
		return time.Time{}, FileID{}, err
	}
	return time.Unix(st.Mtim.Unix()), id, nil
}

// unlinkAt removes the file rel of tree.
func (c *dirCache) unlinkAt(tree int, rel string) error {
	return c.at(tree, rel, "remove", func(dirfd int, name string) error {
		return ignoringEINTR(func() error { return unix.Unlinkat(dirfd, name, 0) })
	})
}

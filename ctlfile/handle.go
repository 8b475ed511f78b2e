package ctlfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// Handle is an agent's open control file. It locks, marks and appends d
// lines exactly as ZMailer's libta does, so it can share a file with
// unmodified ZMailer agents and scheduler. A Handle is not safe for
// concurrent use.
//
// Lock and Mark write with pwrite and do not fsync. A process crash loses
// nothing (the page cache survives it); a machine crash may lose marks made
// since the last Sync, and a lost '+' means that recipient is delivered
// again: the duplicate window is the marks since the last Sync. Callers
// choose how to group syncs.
//
// Open, Lock, LockAsRead, Mark and Close make raw system calls (see package
// zsched/internal/rawsys): an agent makes them for every job, on a local
// file that does not block; AppendDiag and Sync, which fsync, are ordinary
// ones.
type Handle struct {
	File *File

	// path is what Path returns; OpenAt leaves it to be joined from dir
	// and name on first use, an allocation per job saved for an agent
	// that never needs it.
	path      string
	dir, name string
	// fd is the read-write descriptor for pread/pwrite of status bytes, -1
	// once closed. A raw descriptor, not an *os.File: an agent opens a
	// control file per job, and os.OpenFile's poller registration and
	// flag probing cost as much as the open itself.
	fd  int
	app *os.File // O_APPEND, opened on the first AppendDiag
}

// readBufs recycles Open's read buffers: Parse copies what it keeps, and
// an agent reads a control file per job.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// Open opens the control file at path read-write, reads and parses it.
// Errors: ErrNotFound (also matching fs.ErrNotExist), ErrUnknownFormat when
// the '@' flags are unknown, and the rest of Parse's.
func Open(path string) (*Handle, error) {
	h := &Handle{path: path, fd: -1}
	if err := h.open(unix.AT_FDCWD, path, 0); err != nil {
		return nil, err
	}
	return h, nil
}

// OpenAt is Open of the control file name in the directory dir, open at
// dirfd (unix.AT_FDCWD for the working directory when dir is ""): the
// system call walks name alone, while Path and the errors give
// filepath.Join(dir, name), as Open(filepath.Join(dir, name)) would. name
// must be a local path (filepath.IsLocal) for the two to be the same
// file.
func OpenAt(dirfd int, dir, name string) (*Handle, error) {
	return OpenAtFlags(dirfd, dir, name, 0)
}

// OpenAtFlags is OpenAt with flags added to the open's O_RDWR: an agent
// that owns the queue's files gives unix.O_NOATIME, so that its read of
// the control file does not write the inode's access time (which relatime
// does at the first read after every write, and a control file is written
// by every job: on a journalling filesystem a journal update). The kernel
// refuses O_NOATIME to a process that does not own the file (EPERM,
// matched by errors.Is): open without it then.
func OpenAtFlags(dirfd int, dir, name string, flags int) (*Handle, error) {
	h := &Handle{dir: dir, name: name, fd: -1}
	if err := h.open(dirfd, name, flags); err != nil {
		return nil, err
	}
	return h, nil
}

// open opens name relative to dirfd into h, with flags besides O_RDWR.
func (h *Handle) open(dirfd int, name string, flags int) error {
	fd, err := rawsys.Open(dirfd, name, unix.O_RDWR|flags)
	if err != nil {
		if pe, ok := err.(*fs.PathError); ok {
			pe.Path = h.Path()
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return fmt.Errorf("ctlfile: %w", err)
	}
	bp := readBufs.Get().(*[]byte)
	data, err := readRaw(fd, (*bp)[:0], math.MaxInt64)
	if err != nil {
		readBufs.Put(bp)
		rawsys.Close(fd)
		return fmt.Errorf("ctlfile: read %s: %w", h.Path(), err)
	}
	cf, err := Parse(filepath.Base(name), data)
	if cap(data) <= 64<<10 {
		*bp = data[:0]
		readBufs.Put(bp)
	}
	if err != nil {
		rawsys.Close(fd)
		return fmt.Errorf("%w (file %s)", err, h.Path())
	}
	h.File, h.fd = cf, fd
	return nil
}

// Path is the path the Handle was opened with (for OpenAt, dir and name
// joined).
func (h *Handle) Path() string {
	if h.path == "" {
		h.path = filepath.Join(h.dir, h.name)
	}
	return h.path
}

// BodyPath is the message body belonging to this control file
// (see QueuePath).
func (h *Handle) BodyPath() string { return QueuePath(h.Path(), h.File.ID) }

func (h *Handle) rcpt(i int) (*Rcpt, error) {
	if h.fd < 0 {
		return nil, fmt.Errorf("ctlfile: %s: handle closed", h.Path())
	}
	if i < 0 || i >= len(h.File.Rcpts) {
		return nil, fmt.Errorf("ctlfile: %s: no recipient %d", h.Path(), i)
	}
	return &h.File.Rcpts[i], nil
}

// Lock locks recipient i for process pid: it re-reads the status byte at
// Offset+1 with pread and, if it is Pending, writes '~' and the PID
// right-aligned in the 6 PID columns. It returns false, and refreshes the
// in-memory status, if the line is no longer pending (someone else took or
// finished it since Open).
//
// As in ZMailer the read-compare-write is not atomic against another agent
// doing the same; the scheduler never feeds one recipient to two agents.
func (h *Handle) Lock(i int, pid int) (bool, error) {
	return h.lock(i, pid, true)
}

// LockAsRead is Lock comparing with the status byte as Open read it,
// without the pread: for a caller that locks right after Open, as an agent
// does, Open's read is as recent as a re-read would be (libta compares
// with its fresh copy of the file too), and one system call per recipient
// fewer.
func (h *Handle) LockAsRead(i int, pid int) (bool, error) {
	return h.lock(i, pid, false)
}

func (h *Handle) lock(i int, pid int, reread bool) (bool, error) {
	r, err := h.rcpt(i)
	if err != nil {
		return false, err
	}
	if pid <= 0 {
		return false, fmt.Errorf("ctlfile: %s: lock with pid %d", h.Path(), pid)
	}
	var buf [32]byte
	lock := appendLock(buf[:0], h.File.Format, pid)
	if h.File.Format&FlagPID != 0 && len(lock) > 1+pidCols &&
		(h.File.Format&FlagDelay == 0 || len(lock) > 1+pidCols+delayCols) {
		return false, fmt.Errorf("ctlfile: %s: pid %d does not fit the PID field", h.Path(), pid)
	}
	cur := [1]byte{byte(r.Status)}
	if reread {
		if err := preadFull(h.fd, cur[:], r.Offset+1); err != nil {
			return false, fmt.Errorf("ctlfile: %s: lock offset %d: %w", h.Path(), r.Offset, err)
		}
	}
	if Status(cur[0]) != Pending {
		if st := Status(cur[0]); st.valid() {
			r.Status = st
		}
		return false, nil
	}
	if err := pwriteFull(h.fd, lock, r.Offset+1); err != nil {
		return false, fmt.Errorf("ctlfile: %s: lock offset %d: %w", h.Path(), r.Offset, err)
	}
	r.Status, r.PID = Locked, pid
	return true, nil
}

// Mark writes st (Pending, Done or Failed) as recipient i's status byte and
// blanks the PID columns (when the file has FlagPID), in one pwrite.
func (h *Handle) Mark(i int, st Status) error {
	r, err := h.rcpt(i)
	if err != nil {
		return err
	}
	if st != Pending && st != Done && st != Failed {
		return fmt.Errorf("ctlfile: %s: cannot mark %v", h.Path(), st)
	}
	var buf [32]byte
	mark := appendMark(buf[:0], st, h.File.Format, r.PID)
	if err := pwriteFull(h.fd, mark, r.Offset+1); err != nil {
		return fmt.Errorf("ctlfile: %s: mark offset %d: %w", h.Path(), r.Offset, err)
	}
	r.Status, r.PID = st, 0
	return nil
}

// AppendDiag appends d as one line (FormatDiag) with a single write on an
// O_APPEND descriptor, then fsyncs. It sets the line's offset and adds it to
// File.Diags.
func (h *Handle) AppendDiag(d Diag) error {
	if h.fd < 0 {
		return fmt.Errorf("ctlfile: %s: handle closed", h.Path())
	}
	if h.app == nil {
		app, err := os.OpenFile(h.Path(), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("ctlfile: append to %s: %w", h.Path(), err)
		}
		h.app = app
	}
	line := FormatDiag(d)
	if _, err := writeOnce(h.app, line); err != nil {
		return fmt.Errorf("ctlfile: append to %s: %w", h.Path(), err)
	}
	if err := h.app.Sync(); err != nil {
		return fmt.Errorf("ctlfile: append to %s: %w", h.Path(), err)
	}
	// O_APPEND leaves the descriptor's offset just after this write, wherever
	// other writers' lines went.
	end, err := h.app.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("ctlfile: append to %s: %w", h.Path(), err)
	}
	d.Offset = end - int64(len(line))
	if d.Status == 0 {
		d.Status = Pending
	}
	h.File.Diags = append(h.File.Diags, d)
	return nil
}

// Sync flushes status marks to disk.
func (h *Handle) Sync() error {
	if h.fd < 0 {
		return fmt.Errorf("ctlfile: %s: handle closed", h.Path())
	}
	if err := ignoringEINTR(func() error { return unix.Fsync(h.fd) }); err != nil {
		return fmt.Errorf("ctlfile: sync %s: %w", h.Path(), err)
	}
	return nil
}

// Close closes the file. It does not sync (see Sync). Closing twice is
// harmless.
func (h *Handle) Close() error {
	var err error
	if h.app != nil {
		err = h.app.Close()
		h.app = nil
	}
	if h.fd >= 0 {
		if cerr := rawsys.Close(h.fd); err == nil && cerr != nil {
			err = &fs.PathError{Op: "close", Path: h.Path(), Err: cerr}
		}
		h.fd = -1
	}
	if err != nil {
		return fmt.Errorf("ctlfile: close %s: %w", h.Path(), err)
	}
	return nil
}

// FD is the Handle's read-write descriptor (-1 once closed), for a caller
// that checks the file's identity with fstat: an agent that keeps a
// control file open across jobs of its message.
func (h *Handle) FD() int { return h.fd }

// Release closes the Handle like Close but leaves its read-write
// descriptor open and returns it (-1 if the Handle was closed already):
// the caller closes it, as an agent does that closes the descriptors of
// several jobs with one system call (rawsys.CloseRange). The error is
// Close's for the O_APPEND descriptor of AppendDiag.
func (h *Handle) Release() (fd int, err error) {
	fd, h.fd = h.fd, -1
	if h.app != nil {
		err = h.app.Close()
		h.app = nil
	}
	if err != nil {
		return fd, fmt.Errorf("ctlfile: close %s: %w", h.Path(), err)
	}
	return fd, nil
}

// appendLock appends lockBytes(format, pid) to b. An agent locks and
// marks on every job: these two build the bytes on the caller's stack.
func appendLock(b []byte, format uint32, pid int) []byte {
	b = append(b, byte(Locked))
	if format&FlagPID == 0 {
		return b
	}
	for i := decimalWidth(pid); i < pidCols; i++ {
		b = append(b, ' ')
	}
	return strconv.AppendInt(b, int64(pid), 10)
}

// appendMark appends statusBytes(st, markWidth(format, pid)) to b.
func appendMark(b []byte, st Status, format uint32, pid int) []byte {
	b = append(b, byte(st))
	if format&FlagPID == 0 {
		return b
	}
	w := pidCols
	if n := decimalWidth(pid); pid > 0 && n > w {
		w = n
	}
	for range w {
		b = append(b, ' ')
	}
	return b
}

// decimalWidth is len(strconv.Itoa(n)).
func decimalWidth(n int) int {
	w := 1
	if n < 0 {
		w++
	}
	for n >= 10 || n <= -10 {
		n /= 10
		w++
	}
	return w
}

// FormatDiag formats a d line as ZMailer's agents write it:
//
//	d<status><rcpt-offset>:<header-offset>:<N-offset>::<epoch>\t<notary>\t<text>\n
//
// e.g. "d 164:254:-1::1795337543\t…". A zero Status is written as Pending.
// Newlines in the text become CR (as libta does: a CR marks a line break in
// reports); tabs and newlines in the notary become blanks, since they would
// break the line's fields.
func FormatDiag(d Diag) []byte {
	st := d.Status
	if st == 0 {
		st = Pending
	}
	b := make([]byte, 0, 48+len(d.Notary)+len(d.Text))
	b = append(b, 'd', byte(st))
	b = strconv.AppendInt(b, d.RcptOffset, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, d.HeaderOffset, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, d.NOffset, 10)
	b = append(b, ':', ':')
	b = strconv.AppendInt(b, d.Time, 10)
	b = append(b, '\t')
	for i := 0; i < len(d.Notary); i++ {
		c := d.Notary[i]
		if c == '\t' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	b = append(b, '\t')
	for i := 0; i < len(d.Text); i++ {
		c := d.Text[i]
		if c == '\n' {
			c = '\r'
		}
		b = append(b, c)
	}
	return append(b, '\n')
}

package ctlfile

// The scheduler's reads of control files: Read and Reread, and the reset
// of stale locks they do.

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"slices"
	"strconv"
	"time"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// DefaultMaxControlSize is the largest control file read unless
// Spool.SetMaxControlSize says otherwise: far above any real control file
// (a few hundred bytes per recipient), far below what would exhaust the
// scheduler's memory.
const DefaultMaxControlSize = 64 << 20

// BodyWait is how long a control file whose body is missing is taken for a
// message on its way rather than a broken one: its body may come after it
// (a writer that renames the control file first, or the body across a
// slow mount). Until its control file has not changed for this long, Read
// reports the missing body as a transient error (read again later); then
// as malformed (quarantine it). It matches the scheduler's sweep, which
// removes a body without a control file once it is an hour old: were the
// control file quarantined at once, the body that came a moment later
// would be taken for debris and removed an hour on, the message lost.
const BodyWait = time.Hour

// MalformedError is a control file that cannot be scheduled as it is:
// malformed (*SyntaxError, ErrUnknownFormat, ErrNoID, ErrNoLogIdent),
// missing its body for BodyWait (ErrBodyMissing) or larger than the limit
// (ErrTooLarge). These, and only these, are what the scheduler
// quarantines; every other error of Read is transient (descriptors or
// memory exhausted, I/O error, permissions) and worth trying again.
type MalformedError struct {
	Rel     string // the control file, relative to transport/
	Control FileID // the file found malformed: quarantine only that one
	Err     error  // the reason, naming the file
}

func (e *MalformedError) Error() string { return e.Err.Error() }
func (e *MalformedError) Unwrap() error { return e.Err }

// Lock is a recipient's lock ('~' and a PID) held by a live process.
type Lock struct {
	Offset        int64 // of the r line
	PID           int
	Channel, Host string
}

// LockError is ErrLiveLock: lines of the file are locked by processes that
// are alive. It carries what a caller needs to judge whether they are
// really working on them (a PID may be reused after a reboot by another
// program): the locks, and when the file last changed, which is no
// earlier than when its newest lock was written (a lock is a write into
// the file, which sets its status-change time; any later write — another
// line's mark, a d line — makes the locks look younger, never older).
type LockError struct {
	Rel     string
	Locks   []Lock
	Control FileID
	Changed time.Time // the control file's status-change time
	Arrival time.Time // the body's mtime (zero without one)
}

func (e *LockError) Error() string {
	l := e.Locks[0]
	more := ""
	if len(e.Locks) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(e.Locks)-1)
	}
	return fmt.Sprintf("%v: pid %d holds offset %d of %s%s", ErrLiveLock, l.PID, l.Offset, e.Rel, more)
}

// Is makes a LockError match ErrLiveLock.
func (e *LockError) Is(target error) bool { return target == ErrLiveLock }

// Read reads transport/rel, parses it, stats queue/<dir of rel>/<ID> for
// Arrival, records both files' identities (File.Control, File.Body: what
// Remove checks before it unlinks), and resets stale locks ('~' whose PID
// is dead) in place, updating the returned statuses. A T-only file (ETRN
// request) reads fine with ETRNs set and no recipients.
//
// It never blocks on what it finds at the name: the file is opened without
// following a symbolic link and without waiting (O_NONBLOCK), and anything
// but a regular file is ErrNotRegular, unread. A file larger than
// the limit (SetMaxControlSize) is not read either.
//
// Errors, all naming rel: ErrBadPath (not a control file's name),
// ErrNotFound (control file gone), ErrNotRegular, *LockError (ErrLiveLock:
// a live process holds a line; retry later, or judge it with ReadBreaking),
// *MalformedError (*SyntaxError, ErrUnknownFormat, ErrNoID, ErrNoLogIdent,
// ErrBodyMissing, ErrTooLarge: quarantine it), and transient ones
// (anything else: try again later; among them ErrBodyMissing for a control
// file younger than BodyWait).
//
// A lock without a PID (a file without FlagPID, or a blank PID field) is
// treated as stale: otherwise nothing could ever release it.
func (s *Spool) Read(rel string) (*File, error) { return s.read(rel, false, nil) }

// Reread is Read for a file already in the scheduler's core (after an
// agent's #resync or death): stale locks are reset as by Read, but a line
// locked by a live process is no error — another agent is working on it —
// and stays Locked in the result.
func (s *Spool) Reread(rel string) (*File, error) { return s.read(rel, true, nil) }

// ReadBreaking is Read that also resets the locks of brk — what a Read of
// the same file reported — which the caller has judged stale although
// their processes live (a PID reused by a program that is not an agent).
// It does so only if the file has not changed since that Read (same
// identity, same status-change time); otherwise, or for locks brk does not
// list, it reports live locks as Read does, for the caller to judge anew.
func (s *Spool) ReadBreaking(rel string, brk *LockError) (*File, error) {
	return s.read(rel, false, brk)
}

func (s *Spool) maxControlSize() int64 {
	if n := s.maxControl.Load(); n > 0 {
		return n
	}
	return DefaultMaxControlSize
}

func (s *Spool) read(rel string, shared bool, brk *LockError) (*File, error) {
	if err := checkRel(rel); err != nil {
		return nil, err
	}
	c := s.cache()
	name := path.Base(rel)
	bufp := readBufs.Get().(*[]byte)
	limit := s.maxControlSize()
	data, ctl, err := c.readControl(rel, (*bufp)[:0], limit)
	if err != nil {
		readBufs.Put(bufp)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%w: %s", ErrNotFound, rel)
		case errors.Is(err, ErrTooLarge):
			return nil, &MalformedError{Rel: rel, Control: ctl.id,
				Err: fmt.Errorf("%w: %d bytes, more than max_control_size %d (file %s)", ErrTooLarge, ctl.size, limit, rel)}
		case errors.Is(err, ErrNotRegular):
			return nil, fmt.Errorf("%w: %s (%v)", ErrNotRegular, rel, err)
		}
		return nil, fmt.Errorf("ctlfile: read %s: %w", rel, err)
	}
	f, err := Parse(name, data)
	// Parse keeps no part of data: the buffer can serve the next read.
	if cap(data) <= maxPooledBuf {
		*bufp = data[:0]
		readBufs.Put(bufp)
	}
	if err != nil {
		return nil, &MalformedError{Rel: rel, Control: ctl.id, Err: fmt.Errorf("%w (file %s)", err, rel)}
	}
	f.Control = ctl.id
	if f.ID != "" {
		mtime, body, err := c.statBody(bodyRel(rel, f.ID))
		switch {
		case err == nil:
			f.Arrival, f.Body = mtime, body
		case errors.Is(err, fs.ErrNotExist) && f.settled():
			// A Remove of the order before the control file went first,
			// interrupted after the body: nothing needs it.
		case errors.Is(err, fs.ErrNotExist) && s.clock().Sub(ctl.changed) < BodyWait:
			// Its body may be on its way (a writer that renames the
			// control file first): transient, not malformed.
			return nil, fmt.Errorf("%w: queue/%s for %s, which changed %v ago: read again until it is %v old",
				ErrBodyMissing, path.Join(path.Dir(rel), f.ID), rel, s.clock().Sub(ctl.changed).Round(time.Second), BodyWait)
		case errors.Is(err, fs.ErrNotExist):
			return nil, &MalformedError{Rel: rel, Control: ctl.id,
				Err: fmt.Errorf("%w: queue/%s for %s", ErrBodyMissing, path.Join(path.Dir(rel), f.ID), rel)}
		default:
			return nil, fmt.Errorf("ctlfile: read %s: %w", rel, err)
		}
	}
	var stale []int
	var live []Lock
	for i := range f.Rcpts {
		r := &f.Rcpts[i]
		if r.Status != Locked {
			continue
		}
		if alive(r.PID) && !brk.covers(ctl, r) {
			if !shared {
				live = append(live, Lock{Offset: r.Offset, PID: r.PID, Channel: r.Channel, Host: r.Host})
			}
			continue
		}
		stale = append(stale, i)
	}
	if len(live) > 0 {
		return nil, &LockError{Rel: rel, Locks: live, Control: ctl.id, Changed: ctl.changed, Arrival: f.Arrival}
	}
	if len(stale) > 0 {
		if err := c.resetLocks(rel, f, stale); err != nil {
			return nil, fmt.Errorf("ctlfile: reset stale locks in %s: %w", rel, err)
		}
	}
	return f, nil
}

// covers reports whether brk judged r's lock stale, and the file is as it
// was then.
func (brk *LockError) covers(ctl controlStat, r *Rcpt) bool {
	if brk == nil || brk.Control != ctl.id || !brk.Changed.Equal(ctl.changed) {
		return false
	}
	return slices.ContainsFunc(brk.Locks, func(l Lock) bool { return l.Offset == r.Offset && l.PID == r.PID })
}

// alive reports whether a process with this PID exists. EPERM means it does
// (another user's); ESRCH that it does not. A zombie counts as alive until
// reaped, which only delays the reset.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || !errors.Is(err, unix.ESRCH)
}

// resetLocks rewrites the stale locks of f's rcpts to Pending with a blank
// PID, in transport/rel if it is still the file read (f.Control). Each line
// is re-read first and left alone if it changed since the parse. Agents
// only ever lock ' ' lines, so no agent races on a '~' line. No fsync: a
// reset lost in a crash is simply found stale again.
func (c *dirCache) resetLocks(rel string, f *File, idx []int) error {
	fd, err := c.openFile(treeTransport, rel, unix.O_RDWR)
	if err != nil {
		return err
	}
	defer rawsys.Close(fd)
	if same, err := is(fd, "", false, f.Control); err != nil {
		return err
	} else if !same {
		return fmt.Errorf("%w: transport/%s", ErrChanged, rel)
	}
	for _, i := range idx {
		r := &f.Rcpts[i]
		width := markWidth(f.Format, r.PID)
		cur := make([]byte, 1+width)
		if err := preadFull(fd, cur, r.Offset+1); err != nil {
			return err
		}
		want := lockBytes(f.Format, r.PID)
		if string(cur[:len(want)]) != string(want) {
			continue
		}
		if err := pwriteFull(fd, statusBytes(Pending, width), r.Offset+1); err != nil {
			return err
		}
		r.Status, r.PID = Pending, 0
	}
	return nil
}

// markWidth is how many columns after the status byte hold the PID: 6 in a
// FlagPID file, more if a wide PID ran into the delay field, else none.
func markWidth(format uint32, pid int) int {
	if format&FlagPID == 0 {
		return 0
	}
	w := pidCols
	if n := len(strconv.Itoa(pid)); pid > 0 && n > w {
		w = n
	}
	return w
}

// statusBytes is the status byte followed by width blanks.
func statusBytes(st Status, width int) []byte {
	b := make([]byte, 1+width)
	b[0] = byte(st)
	for i := 1; i < len(b); i++ {
		b[i] = ' '
	}
	return b
}

// lockBytes is '~' and, in a FlagPID file, the PID right-aligned in 6
// columns (wider PIDs spill into the delay field, as a C "%6d" does).
func lockBytes(format uint32, pid int) []byte {
	if format&FlagPID == 0 {
		return []byte{byte(Locked)}
	}
	s := strconv.Itoa(pid)
	b := make([]byte, 0, 1+pidCols+len(s))
	b = append(b, byte(Locked))
	for i := len(s); i < pidCols; i++ {
		b = append(b, ' ')
	}
	return append(b, s...)
}

// ReadControl returns the bytes of the control file transport/rel, read as
// Read reads it — not following a symbolic link, never waiting on what is
// at the name, refusing what is not a regular file (ErrNotRegular) or is
// larger than the limit (ErrTooLarge) — without parsing it or touching its
// locks. A missing file is ErrNotFound (and fs.ErrNotExist).
func (s *Spool) ReadControl(rel string) ([]byte, error) {
	if err := checkRel(rel); err != nil {
		return nil, err
	}
	data, _, err := s.cache().readControl(rel, nil, s.maxControlSize())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return nil, fmt.Errorf("ctlfile: read %s: %w", rel, err)
	}
	return data, nil
}

// ReadBody returns the body id of the control file transport/rel and its
// mtime, never waiting on what is at its name (a FIFO): anything but a
// regular file (through a symbolic link, as an agent opens it) is
// ErrNotRegular. A missing body matches fs.ErrNotExist.
func (s *Spool) ReadBody(rel, id string) ([]byte, time.Time, error) {
	if err := checkRel(rel); err != nil {
		return nil, time.Time{}, err
	}
	if err := checkID(id); err != nil {
		return nil, time.Time{}, err
	}
	c := s.cache()
	body := bodyRel(rel, id)
	fd := -1
	err := c.at(treeQueue, body, "open", func(dirfd int, name string) error {
		var err error
		fd, err = rawsys.Open(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK)
		return sysErr(err)
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	defer rawsys.Close(fd)
	var st unix.Stat_t
	if err := rawsys.Fstat(fd, &st); err != nil {
		return nil, time.Time{}, fmt.Errorf("ctlfile: stat queue/%s: %w", body, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, time.Time{}, fmt.Errorf("%w: queue/%s is a %s", ErrNotRegular, body, fileType(st.Mode))
	}
	data, err := readRaw(fd, make([]byte, 0, st.Size+1), math.MaxInt64)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("ctlfile: read queue/%s: %w", body, err)
	}
	return data, time.Unix(st.Mtim.Unix()), nil
}

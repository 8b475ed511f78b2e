package ctlfile

// The scheduler's reads of control files: Read and Reread, and the reset
// of stale locks they do.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// Read reads transport/rel, parses it, stats queue/<dir of rel>/<ID> for
// Arrival, and resets stale locks ('~' whose PID is dead) in place,
// updating the returned statuses. Errors, all naming rel: ErrBadPath,
// ErrNotFound (control file gone), ErrBodyMissing, ErrLiveLock (a live
// process holds a line: retry later), *SyntaxError, ErrUnknownFormat,
// ErrNoID, ErrNoLogIdent. A T-only file (ETRN request) reads fine with Turn
// set and no recipients.
//
// A lock without a PID (a file without FlagPID, or a blank PID field) is
// treated as stale: otherwise nothing could ever release it.
func (s *Spool) Read(rel string) (*File, error) { return s.read(rel, false) }

// Reread is Read for a file already in the scheduler's core (after an
// agent's #resync or death): stale locks are reset as by Read, but a line
// locked by a live process is no error — another agent is working on it —
// and stays Locked in the result.
func (s *Spool) Reread(rel string) (*File, error) { return s.read(rel, true) }

func (s *Spool) read(rel string, shared bool) (*File, error) {
	if err := checkRel(rel); err != nil {
		return nil, err
	}
	c := s.cache()
	name := path.Base(rel)
	bufp := readBufs.Get().(*[]byte)
	data, err := c.readAt(treeTransport, rel, (*bufp)[:0])
	if err != nil {
		readBufs.Put(bufp)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, rel)
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
		return nil, fmt.Errorf("%w (file %s)", err, rel)
	}
	if f.ID != "" {
		mtime, err := c.modTimeAt(treeQueue, bodyRel(rel, f.ID))
		switch {
		case err == nil:
			f.Arrival = mtime
		case errors.Is(err, fs.ErrNotExist) && f.settled():
			// Remove was interrupted after the body: nothing needs it.
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("%w: queue/%s for %s", ErrBodyMissing, path.Join(path.Dir(rel), f.ID), rel)
		default:
			return nil, fmt.Errorf("ctlfile: read %s: %w", rel, err)
		}
	}
	var stale []int
	for i := range f.Rcpts {
		r := &f.Rcpts[i]
		if r.Status != Locked {
			continue
		}
		if alive(r.PID) {
			if shared {
				continue
			}
			return nil, fmt.Errorf("%w: pid %d holds offset %d of %s", ErrLiveLock, r.PID, r.Offset, rel)
		}
		stale = append(stale, i)
	}
	if len(stale) > 0 {
		if err := resetLocks(s.ctlPath(rel), f, stale); err != nil {
			return nil, fmt.Errorf("ctlfile: reset stale locks in %s: %w", rel, err)
		}
	}
	return f, nil
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
// PID. Each line is re-read first and left alone if it changed since the
// parse. Agents only ever lock ' ' lines, so no agent races on a '~' line.
// No fsync: a reset lost in a crash is simply found stale again.
func resetLocks(path string, f *File, idx []int) error {
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fd.Close()
	for _, i := range idx {
		r := &f.Rcpts[i]
		width := markWidth(f.Format, r.PID)
		cur := make([]byte, 1+width)
		if _, err := fd.ReadAt(cur, r.Offset+1); err != nil {
			return err
		}
		want := lockBytes(f.Format, r.PID)
		if string(cur[:len(want)]) != string(want) {
			continue
		}
		if _, err := fd.WriteAt(statusBytes(Pending, width), r.Offset+1); err != nil {
			return err
		}
		r.Status, r.PID = Pending, 0
	}
	return fd.Close()
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

package ctlfile

import (
	"errors"
	"fmt"
	"io/fs"
	"path"

	"golang.org/x/sys/unix"

	"zsched/internal/rawsys"
)

// Peek reads transport/rel for an operator's view (the queue listing, WHY
// or cat of a message the scheduler has not read into its core): as Read
// reads it — never waiting on what is at the name, within the size limit,
// with File.Control, File.Body and File.Arrival — but without writing
// anything: stale locks are left as they are (Locked) and live ones are
// no error. It returns the control file's bytes too. Errors are Read's,
// except LockError; a missing body is no error here (Body is then zero).
func (s *Spool) Peek(rel string) (*File, []byte, error) {
	if err := checkRel(rel); err != nil {
		return nil, nil, err
	}
	c := s.cache()
	limit := s.maxControlSize()
	data, ctl, err := c.readControl(rel, nil, limit)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("%w: %s", ErrNotFound, rel)
		case errors.Is(err, ErrTooLarge):
			return nil, nil, &MalformedError{Rel: rel, Control: ctl.id,
				Err: fmt.Errorf("%w: %d bytes, more than max_control_size %d (file %s)", ErrTooLarge, ctl.size, limit, rel)}
		case errors.Is(err, ErrNotRegular):
			return nil, nil, fmt.Errorf("%w: %s (%v)", ErrNotRegular, rel, err)
		}
		return nil, nil, fmt.Errorf("ctlfile: read %s: %w", rel, err)
	}
	f, err := Parse(path.Base(rel), data)
	if err != nil {
		return nil, data, &MalformedError{Rel: rel, Control: ctl.id, Err: fmt.Errorf("%w (file %s)", err, rel)}
	}
	f.Control = ctl.id
	if f.ID != "" {
		mtime, body, err := c.statBody(bodyRel(rel, f.ID))
		switch {
		case err == nil:
			f.Arrival, f.Body = mtime, body
		case errors.Is(err, fs.ErrNotExist):
		default:
			return nil, data, fmt.Errorf("ctlfile: read %s: %w", rel, err)
		}
	}
	return f, data, nil
}

// Locate returns the path under transport/ of the control file named name
// ("12345"): unhashed, or in the hash directories of one or two levels
// (HashPath), whichever exists, looked for in that order. ErrNotFound when
// none does. It never opens the file.
func (s *Spool) Locate(name string) (string, error) {
	if !controlName(name) {
		return "", fmt.Errorf("%w: %q", ErrBadPath, name)
	}
	inum := int64(0)
	for i := 0; i < len(name) && name[i] >= '0' && name[i] <= '9'; i++ {
		inum = inum*10 + int64(name[i]-'0')
	}
	for levels := range 3 {
		rel := HashPath(name, inum, levels)
		err := s.cache().at(treeTransport, rel, "stat", func(dirfd int, name string) error {
			var st unix.Stat_t
			return rawsys.Fstatat(dirfd, name, &st)
		})
		if err == nil {
			return rel, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrNotFound, name)
}

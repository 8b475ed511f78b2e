package ctlfile

// Removing a completed message's files.

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
)

// Files names a message's two files and their identities as Read found
// them: what Remove acts on. File.Files gives it.
type Files struct {
	Rel     string // the control file, relative to transport/
	ID      string // the body's name (File.ID); "" for none (an ETRN request)
	Control FileID // the control file as read (zero: not checked)
	Body    FileID // the body as read (zero: not checked)
}

// Files is what Remove needs of a file read from transport/rel.
func (f *File) Files(rel string) Files {
	return Files{Rel: rel, ID: f.ID, Control: f.Control, Body: f.Body}
}

// Remove removes a completed message: its control file first, then its
// body, as ZMailer does — and each only while its name still leads to the
// file that was read (m.Control, m.Body; a zero FileID is not checked).
// Missing files are not errors; a file that is no longer the one read is
// left alone and reported (ErrChanged). A control file found replaced
// leaves the body alone too.
//
// The order is what keeps the names safe. A router names a message after
// its body's inode, and the kernel hands a freed inode to the next new
// file at once. While the body exists its inode cannot be reused, so no
// new message can take the name; removing the body first freed it while
// the control file was still there, for a router to write its new control
// file under that name and the remover to unlink it.
//
// Four system calls: check and unlink the control file, check and unlink
// the body. A crash between the two unlinks leaves a body without its
// control file, which is debris: a RemovalLog lets the next start remove
// it at once, else SweepBodies does after its grace period.
func (s *Spool) Remove(m Files) error {
	rel := m.Rel
	if err := checkRel(rel); err != nil {
		return err
	}
	if m.ID != "" {
		if err := checkID(m.ID); err != nil {
			return err
		}
	}
	c := s.cache()
	switch err := c.check(treeTransport, rel, false, m.Control); {
	case errors.Is(err, fs.ErrNotExist):
		// Gone already (an interrupted Remove, an operator): the body
		// may still be there.
	case err != nil:
		return fmt.Errorf("ctlfile: remove %s: %w", rel, err)
	default:
		if err := c.unlinkAt(treeTransport, rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ctlfile: remove %s: %w", rel, err)
		}
	}
	s.step("remove-between-unlinks")
	if m.ID == "" {
		return nil
	}
	return c.removeChecked(treeQueue, bodyRel(rel, m.ID), m.Body)
}

// removeChecked unlinks the file rel of tree if it is still want (or want
// is not known); a missing file is no error.
func (c *dirCache) removeChecked(tree int, rel string, want FileID) error {
	switch err := c.check(tree, rel, true, want); {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("ctlfile: remove %s: %w", rel, err)
	}
	if err := c.unlinkAt(tree, rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ctlfile: remove %s/%s: %w", path.Base(c.paths[tree]), rel, err)
	}
	return nil
}

// check returns nil if the file rel of tree is still want (or want is
// not known), an error matching fs.ErrNotExist if it is gone, and one
// matching ErrChanged if another file has its name now.
func (c *dirCache) check(tree int, rel string, follow bool, want FileID) error {
	if !want.Known() {
		return nil
	}
	var same bool
	err := c.at(tree, rel, "identify", func(dirfd int, name string) error {
		var err error
		same, err = is(dirfd, name, follow, want)
		return err
	})
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("%w: %s/%s", ErrChanged, path.Base(c.paths[tree]), rel)
	}
	return nil
}

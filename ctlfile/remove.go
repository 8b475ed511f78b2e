package ctlfile

// Removing a completed message's files.

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
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

// removing is the prefix of the name a body takes while Remove works on
// it (.rm.<name>, in its directory): a name only Remove writes, so a body
// left under it by a crash is known debris (SweepBodies), and a control
// file left with it gets its body back (Read).
const removing = ".rm."

// Remove removes a completed message: its control file first, then its
// body, as ZMailer does — and each only while its name still leads to the
// file that was read (m.Control, m.Body; a zero FileID is not checked).
// Missing files are not errors; a file that is no longer the one read is
// left alone and reported (ErrChanged).
//
// The order is what keeps the names safe. A router names a message after
// its body's inode, and the kernel hands a freed inode to the next new
// file at once. While the body exists its inode cannot be reused, so no
// new message can take the name; removing the body first freed it while
// the control file was still there, for a router to write its new control
// file under that name and the remover to unlink it.
//
// Steps, five system calls: check the control file; check the body and
// rename it to .rm.<name> (which frees no inode, and puts it under a name
// no router writes); unlink the control file; unlink .rm.<name>. A crash
// after the rename leaves the body under .rm.<name>: beside its control
// file, Read moves it back; alone, SweepBodies removes it at the next
// start. (Unlinking the body under its own name would leave, after a
// crash between the two unlinks, a body no different from one a router
// has written and not yet given its control file: debris only a grace
// period could tell.)
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
	}
	var moved string // the body's name while it is being removed
	var bodyErr error
	if m.ID != "" {
		body := bodyRel(rel, m.ID)
		switch err := c.check(treeQueue, body, true, m.Body); {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			bodyErr = fmt.Errorf("ctlfile: remove body of %s: %w", rel, err)
		default:
			moved = removingName(body)
			if err := c.renameAt(treeQueue, body, moved); err != nil {
				if !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("ctlfile: remove body of %s: %w", rel, err)
				}
				moved = ""
			}
		}
	}
	s.step("remove-body-moved")
	if err := c.unlinkAt(treeTransport, rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ctlfile: remove %s: %w", rel, err)
	}
	s.step("remove-between-unlinks")
	if moved != "" {
		if err := c.unlinkAt(treeQueue, moved); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ctlfile: remove body of %s: %w", rel, err)
		}
	}
	return bodyErr
}

// removingName is the name the body rel takes while it is removed.
func removingName(rel string) string {
	dir := strings.LastIndexByte(rel, '/') + 1
	return rel[:dir] + removing + rel[dir:]
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

// renameAt renames the file from to to, both relative to tree.
func (c *dirCache) renameAt(tree int, from, to string) error {
	fd, ok := c.dirFD(tree)
	dirfd, f, t := fd, from, to
	if !ok {
		dirfd, f, t = unix.AT_FDCWD, c.paths[tree]+"/"+from, c.paths[tree]+"/"+to
	}
	err := ignoringEINTR(func() error { return unix.Renameat(dirfd, f, dirfd, t) })
	runtime.KeepAlive(c)
	if err != nil {
		return &fs.PathError{Op: "rename", Path: c.paths[tree] + "/" + from, Err: err}
	}
	return nil
}

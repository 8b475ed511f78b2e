package ctlfile

// Moving a malformed control file aside into bad/, with its body.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Quarantine moves transport/rel into bad/ with its body, never deleting
// anything, and writes bad/<name>.why: the reason, the time, and where
// both files were and are now. A name already taken in bad/ gets a ".1",
// ".2"… suffix; the body becomes bad/<that name>.body.
//
// want is the control file's identity as read (MalformedError.Control;
// zero: not checked): if another file has the name now, it is left alone
// (ErrChanged). The body moved is queue/<dir of rel>/<name of rel>, where
// ZMailer's router and Enqueue put it; the file's own i line is not
// trusted, it is malformed. A body of another name stays in queue/ (the
// .why says so).
//
// The files are linked into bad/ and the .why written before anything
// leaves transport/ and queue/: a failure (a full disk) leaves the message
// where it was, with an error, never half moved or moved without its .why.
func (s *Spool) Quarantine(rel string, want FileID, why error) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if err := os.MkdirAll(s.BadDir(), 0o755); err != nil {
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	src := s.ctlPath(rel)
	base := path.Base(rel)
	dst, linked, err := s.reserveBad(src, base)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	if want.Known() {
		// The link holds the file found at the name: is it the one read?
		if same, err := is(unix.AT_FDCWD, dst, false, want); err != nil || !same {
			undoBad(dst, src, linked)
			if err == nil {
				err = fmt.Errorf("%w: transport/%s", ErrChanged, rel)
			}
			return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
		}
	}
	bodySrc := s.bodyPath(rel, base)
	bodyDst := dst + ".body"
	bodyNote := "body: none at queue/" + rel
	bodyLinked := false
	if st, err := os.Lstat(bodySrc); err == nil && st.Mode().IsRegular() {
		if err := os.Link(bodySrc, bodyDst); err == nil {
			bodyLinked = true
			bodyNote = "body: queue/" + rel + " moved to bad/" + filepath.Base(bodyDst)
		} else {
			bodyNote = "body: left in queue/" + rel + " (" + err.Error() + ")"
		}
	} else if err == nil {
		bodyNote = "body: queue/" + rel + " left in place: not a regular file"
	}
	reason := "unknown"
	if why != nil {
		reason = why.Error()
	}
	note := fmt.Sprintf("file: transport/%s\nmoved to: bad/%s\n%s\ntime: %s\nreason: %s\n",
		rel, filepath.Base(dst), bodyNote, time.Now().UTC().Format(time.RFC3339), strings.ReplaceAll(reason, "\n", " "))
	if err := os.WriteFile(dst+".why", []byte(note), 0o644); err != nil {
		os.Remove(dst + ".why")
		if bodyLinked {
			os.Remove(bodyDst)
		}
		undoBad(dst, src, linked)
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	if linked {
		if err := os.Remove(src); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
		}
	}
	if bodyLinked {
		if err := os.Remove(bodySrc); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
		}
	}
	dirs := []string{s.BadDir(), filepath.Dir(src)}
	if bodyLinked {
		dirs = append(dirs, filepath.Dir(bodySrc))
	}
	return syncDirs(dirs...)
}

// reserveBad puts the file src into bad/ under base or the first free
// base.N: as a hard link (linked) — link fails if the name exists, where
// rename would silently replace it — or, on a filesystem without hard
// links, by rename.
func (s *Spool) reserveBad(src, base string) (dst string, linked bool, err error) {
	for n := 0; n <= 10000; n++ {
		name := base
		if n > 0 {
			name = base + "." + strconv.Itoa(n)
		}
		dst = filepath.Join(s.BadDir(), name)
		err := os.Link(src, dst)
		if err == nil {
			return dst, true, nil
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, err
		}
		// No hard links here (some filesystems): check, then rename.
		if _, lerr := os.Lstat(dst); lerr == nil {
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			return "", false, err
		}
		return dst, false, nil
	}
	return "", false, fmt.Errorf("no free name in %s", s.BadDir())
}

// undoBad takes back what reserveBad did.
func undoBad(dst, src string, linked bool) {
	if linked {
		os.Remove(dst)
	} else {
		os.Rename(dst, src)
	}
}

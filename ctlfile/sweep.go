package ctlfile

// Sweeping the debris interrupted writers leave in the spool.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// SweepTemp removes the temporary files Enqueue leaves when it is killed
// midway — queue/.new-* (a body not yet named) and transport/.<name>.tmp (a
// control file not yet renamed) — that were last modified before cutoff.
// Nothing else writes those names, and a file younger than cutoff may still
// be an enqueue in progress. Scheduler-side; it returns the paths removed
// (relative to the postoffice).
func (s *Spool) SweepTemp(cutoff time.Time) ([]string, error) {
	var removed []string
	var errs []error
	for _, sub := range []struct {
		dir  string
		temp func(name string) bool
	}{
		{"queue", func(n string) bool { return strings.HasPrefix(n, ".new-") }},
		{"transport", func(n string) bool { return n[0] == '.' && strings.HasSuffix(n, ".tmp") }},
	} {
		d, err := os.Open(filepath.Join(s.Root, sub.dir))
		if err != nil {
			errs = append(errs, fmt.Errorf("ctlfile: sweep: %w", err))
			continue
		}
		for {
			ents, err := d.ReadDir(scanBatch)
			for _, e := range ents {
				name := e.Name()
				if name == "" || !sub.temp(name) || !e.Type().IsRegular() {
					continue
				}
				info, err := e.Info()
				if err != nil || !info.ModTime().Before(cutoff) {
					continue
				}
				p := filepath.Join(s.Root, sub.dir, name)
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, fmt.Errorf("ctlfile: sweep: %w", err))
					continue
				}
				removed = append(removed, filepath.Join(sub.dir, name))
			}
			if err != nil {
				if err != io.EOF {
					errs = append(errs, fmt.Errorf("ctlfile: sweep %s: %w", sub.dir, err))
				}
				break
			}
		}
		d.Close()
	}
	return removed, errors.Join(errs...)
}

// SweepBodies removes the bodies in queue/ (and its A–Z hash directories)
// without their control file (transport/<dir>/<name>) whose status-change
// time — when they were written, or renamed into queue/ — is before
// cutoff: a router writes the body first and its control file a moment
// later, so a younger one may be a message on its way. A body that a
// control file of another name refers to (its i line) stays: neither
// ZMailer's router nor Enqueue writes one, but a control file may, so
// when there is a candidate every control file's head is read to find
// out. Each body is removed only while its name still leads to the file
// the sweep looked at. It returns the paths removed (relative to the
// postoffice), and the files it could not remove, each with its error.
func (s *Spool) SweepBodies(cutoff time.Time) (removed []string, failed map[string]error, err error) {
	type candidate struct {
		rel string // relative to queue/
		id  FileID
	}
	var cands []candidate
	var errs []error
	c := s.cache()
	// The control files of each directory, listed before its bodies are
	// looked at: one getdents for some hundred names where a stat of each
	// body's control file cost a system call per message (3 % of the
	// scheduler's CPU in bench's drain, which starts with a sweep).
	listed := controlList{spool: s}
	err = walkHashed(s.QueueDir(), func(rel, name string, e fs.DirEntry) {
		if !controlName(name) || strings.HasSuffix(name, etrnSuffix) || !e.Type().IsRegular() {
			return
		}
		if listed.has(rel) {
			// Its control file was there a moment ago: skipped, as if
			// the stat below had found it. A body whose control file went
			// since is a message being removed, or debris for the next
			// sweep.
			return
		}
		s.step("sweep-stat-control")
		var ctl unix.Stat_t
		if err := c.at(treeTransport, rel, "stat", func(dirfd int, name string) error {
			return rawsys.Fstatat(dirfd, name, &ctl)
		}); !errors.Is(err, fs.ErrNotExist) {
			return // its control file is there (or cannot be told)
		}
		full := filepath.Join(s.QueueDir(), filepath.FromSlash(rel))
		var st unix.Stat_t
		if err := unix.Lstat(full, &st); err != nil || !time.Unix(st.Ctim.Unix()).Before(cutoff) {
			return
		}
		id, ok, err := c.identify(treeQueue, unix.AT_FDCWD, full, false, &st)
		if err != nil || !ok {
			return
		}
		cands = append(cands, candidate{rel: rel, id: id})
	})
	if err != nil {
		errs = append(errs, err)
	}
	if len(cands) == 0 {
		return nil, nil, errors.Join(errs...)
	}
	referred, err := s.bodiesReferred()
	if err != nil {
		// Without knowing, nothing is removed.
		return nil, nil, errors.Join(append(errs, err)...)
	}
	for _, cd := range cands {
		if referred[cd.rel] {
			continue
		}
		switch err := c.check(treeQueue, cd.rel, false, cd.id); {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			continue // another file has the name now: not debris of ours
		}
		p := filepath.Join("queue", filepath.FromSlash(cd.rel))
		if err := c.unlinkAt(treeQueue, cd.rel); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				if failed == nil {
					failed = map[string]error{}
				}
				failed[p] = err
			}
			continue
		}
		removed = append(removed, p)
	}
	return removed, failed, errors.Join(errs...)
}

// controlList is the names in one directory of transport/ (the one last
// asked about), for SweepBodies.
type controlList struct {
	spool *Spool
	dir   string          // relative to transport/; "" before the first
	names map[string]bool // nil: not listed (unreadable or too large)
	begun bool
}

// maxControlList bounds a directory's listing: a flat spool of millions
// of files is not held in memory, its bodies' control files are stat'ed
// one by one instead.
const maxControlList = 4096

// has reports whether transport/rel was listed: its directory is listed
// first when it is not the last one asked about. false means only "not
// known to be there".
func (l *controlList) has(rel string) bool {
	dir, name := path.Split(rel)
	if !l.begun || dir != l.dir {
		l.begun, l.dir, l.names = true, dir, l.spool.listNames(dir)
	}
	return l.names[name]
}

// listNames returns the names in transport/dir, or nil when it cannot be
// read or holds more than maxControlList.
func (s *Spool) listNames(dir string) map[string]bool {
	d, err := os.Open(filepath.Join(s.TransportDir(), filepath.FromSlash(dir)))
	if err != nil {
		return nil
	}
	defer d.Close()
	names := make(map[string]bool)
	for {
		batch, err := d.Readdirnames(scanBatch)
		for _, n := range batch {
			names[n] = true
		}
		if len(names) > maxControlList {
			return nil
		}
		if err != nil {
			if err == io.EOF {
				return names
			}
			return nil
		}
	}
}

// bodiesReferred reads the head of every control file and returns the
// bodies (relative to queue/) those whose i line names a body of another
// name refer to.
func (s *Spool) bodiesReferred() (map[string]bool, error) {
	referred := map[string]bool{}
	sc := s.NewScanner()
	defer sc.Close()
	var batch []string
	var head [4096]byte
	for {
		var done bool
		var err error
		batch, done, err = sc.Next(batch[:0], scanBatch)
		for _, rel := range batch {
			id, ok := s.bodyName(rel, head[:])
			if ok && id != path.Base(rel) && checkID(id) == nil {
				referred[bodyRel(rel, id)] = true
			}
		}
		if err != nil {
			return nil, err
		}
		if done {
			return referred, nil
		}
	}
}

// bodyName reads the i line of transport/rel from its first len(buf)
// bytes (ZMailer's router writes it second, after '@').
func (s *Spool) bodyName(rel string, buf []byte) (string, bool) {
	fd, err := s.cache().openFile(treeTransport, rel, unix.O_RDONLY)
	if err != nil {
		return "", false
	}
	defer rawsys.Close(fd)
	var st unix.Stat_t
	if rawsys.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false
	}
	n, err := rawsys.Pread(fd, buf, 0)
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "i "); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// walkHashed calls fn for each entry of dir and of its A–Z subdirectories
// (two levels), with its path relative to dir and its name; directories
// are read a batch at a time. Subdirectories that vanish are skipped.
func walkHashed(dir string, fn func(rel, name string, e fs.DirEntry)) error {
	var walk func(full, prefix string, depth int) error
	walk = func(full, prefix string, depth int) error {
		d, err := os.Open(full)
		if err != nil {
			if depth > 0 && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("ctlfile: sweep: %w", err)
		}
		defer d.Close()
		for {
			ents, err := d.ReadDir(scanBatch)
			for _, e := range ents {
				name := e.Name()
				if depth < 2 && hashLetter(name) && e.IsDir() {
					if err := walk(filepath.Join(full, name), prefix+name+"/", depth+1); err != nil {
						return err
					}
					continue
				}
				fn(prefix+name, name, e)
			}
			if err != nil {
				if err == io.EOF {
					return nil
				}
				return fmt.Errorf("ctlfile: sweep %s: %w", full, err)
			}
		}
	}
	return walk(dir, "", 0)
}

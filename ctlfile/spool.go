package ctlfile

// The postoffice's layout: its directories, the names in them, and the
// descriptors the scheduler reaches them through.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// HashPath returns the spool path of a file relative to transport/ (or
// queue/) for hash levels 0, 1 or 2 (zmailer-facts §3.6): "12345",
// "A/12345" or "A/B/12345", the letters from inum in base 26. Levels outside
// 0..2 are clamped.
func HashPath(name string, inum int64, levels int) string {
	n := uint64(inum)
	switch {
	case levels <= 0:
		return name
	case levels == 1:
		return string([]byte{'A' + byte(n%26), '/'}) + name
	default:
		return string([]byte{'A' + byte(n/26%26), '/', 'A' + byte(n%26), '/'}) + name
	}
}

// Spool is a postoffice: transport/ (control files), queue/ (bodies), bad/
// (quarantine) and state/. Its methods may be called from any goroutine.
//
// The scheduler's per-message calls (Read, Reread, Remove) reach files
// through descriptors of transport/ and queue/, opened on first use and
// kept (close-on-exec) until Close or until the Spool is garbage; a new
// Root opens new ones. A directory removed and made again is noticed when
// a file is not found through its old descriptor. A Spool must not be
// copied after first use.
type Spool struct {
	Root string // the postoffice directory
	Hash int    // hash levels (0, 1 or 2) for files Enqueue writes
	// NoSync makes Enqueue skip its fsyncs: for bulk-generating benchmark
	// queues only, since a machine crash may then lose queued mail.
	NoSync bool
	// hook, when set by a test, is called at each step of Enqueue and
	// Remove with the step's name, to check what a crash (or another
	// writer) at that instant would leave; and at each control file
	// SweepBodies stats, to count them.
	hook func(step string)
	// now, when set by a test, is the clock Read judges a control file's
	// age by (BodyWait) against its status-change time, which is the
	// kernel's: so it is time.Now otherwise, whatever clock the caller
	// schedules by.
	now func() time.Time

	dirs atomic.Pointer[dirCache] // for Root; nil until first needed

	maxControl atomic.Int64 // SetMaxControlSize; 0: DefaultMaxControlSize
}

func (s *Spool) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// SetMaxControlSize sets the largest control file Read reads, in bytes
// (0 or less: DefaultMaxControlSize). A larger one is malformed
// (ErrTooLarge): it is quarantined unread, and memory stays bounded
// whatever is queued. It may be called while other goroutines read.
func (s *Spool) SetMaxControlSize(n int64) { s.maxControl.Store(n) }

// cache returns the directory descriptors for the current Root.
func (s *Spool) cache() *dirCache {
	c := s.dirs.Load()
	if c != nil && c.root == s.Root {
		return c
	}
	n := newDirCache(s.Root)
	if s.dirs.CompareAndSwap(c, n) {
		return n // the old one's descriptors close when it is garbage
	}
	if c = s.dirs.Load(); c != nil && c.root == s.Root {
		return c
	}
	return n
}

// Close releases the directory descriptors the Spool holds. The Spool
// stays usable (they are opened again when needed), but Close must not run
// concurrently with its other methods.
func (s *Spool) Close() error {
	if c := s.dirs.Swap(nil); c != nil {
		c.fds.closeAll()
	}
	return nil
}

// TransportDir is Root/transport, the control files.
func (s *Spool) TransportDir() string { return filepath.Join(s.Root, "transport") }

// QueueDir is Root/queue, the message bodies.
func (s *Spool) QueueDir() string { return filepath.Join(s.Root, "queue") }

// BadDir is Root/bad, quarantined control files.
func (s *Spool) BadDir() string { return filepath.Join(s.Root, "bad") }

// StateDir is Root/state, the scheduler's learned state.
func (s *Spool) StateDir() string { return filepath.Join(s.Root, "state") }

// Init creates transport/, queue/, bad/ and state/ (mode 0755) if missing.
func (s *Spool) Init() error {
	for _, d := range []string{s.TransportDir(), s.QueueDir(), s.BadDir(), s.StateDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("ctlfile: init: %w", err)
		}
	}
	return nil
}

// checkRel accepts "N", "A/N" and "A/B/N" where the letters are A–Z and N
// is a control file's name (controlName): the only shapes ZMailer puts in
// transport/. Anything else (absolute, "..", deeper) could reach outside
// the spool, and "12345.bak" is not mail.
func checkRel(rel string) error {
	name := rel
	for levels := 0; ; levels++ {
		i := strings.IndexByte(name, '/')
		if i < 0 {
			break
		}
		if levels == 2 || !hashLetter(name[:i]) {
			return fmt.Errorf("%w: %q", ErrBadPath, rel)
		}
		name = name[i+1:]
	}
	if !controlName(name) {
		return fmt.Errorf("%w: %q", ErrBadPath, rel)
	}
	return nil
}

// IsControlPath reports whether rel (relative to transport/) names a
// control file: "N", "A/N" or "A/B/N" with N a control file's name.
func IsControlPath(rel string) bool { return checkRel(rel) == nil }

// etrnSuffix ends the name of an ETRN request file ZMailer's smtpserver
// drops into transport/ ("<inode>-etrn", zmailer-facts §6).
const etrnSuffix = "-etrn"

// controlName reports whether name is a control file's: all decimal
// digits (ZMailer's router and Enqueue name a message after its body's
// inode number), or digits and "-etrn" (an ETRN request). Anything else
// that starts with a digit — "12345.bak", "12345.tmp", an editor's
// "12345~" — is not mail, and is neither scanned nor read.
func controlName(name string) bool {
	digits := strings.TrimSuffix(name, etrnSuffix)
	if digits == "" || len(digits) > 20 {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if !isDigit(digits[i]) {
			return false
		}
	}
	return true
}

// bodyRel is the body id of the control file rel, relative to queue/: in
// the same hash directories. Usually the body has the control file's name,
// and then it is rel itself.
func bodyRel(rel, id string) string {
	dir := strings.LastIndexByte(rel, '/') + 1
	if rel[dir:] == id {
		return rel
	}
	return rel[:dir] + id
}

func hashLetter(d string) bool { return len(d) == 1 && 'A' <= d[0] && d[0] <= 'Z' }

func checkID(id string) error {
	if !validName([]byte(id)) {
		return fmt.Errorf("%w: body name %q", ErrBadPath, id)
	}
	return nil
}

func (s *Spool) ctlPath(rel string) string {
	return filepath.Join(s.TransportDir(), filepath.FromSlash(rel))
}

// bodyPath is queue/<hash dir of rel>/<id>: a body sits in the same hash
// directory as its control file, as ZMailer's agents expect.
func (s *Spool) bodyPath(rel, id string) string {
	return filepath.Join(s.QueueDir(), filepath.FromSlash(path.Dir(rel)), id)
}

// QueuePath returns the body file of the control file at ctlPath: the
// control file's hash directories (up to two single letters A–Z) are kept,
// and transport/ is replaced by ../queue/ relative to them. For an agent
// working in transport/, QueuePath("A/B/123", "123") is "../queue/A/B/123".
func QueuePath(ctlPath, id string) string {
	dir := filepath.Dir(ctlPath)
	var hash []string
	for len(hash) < 2 && hashLetter(filepath.Base(dir)) {
		hash = append([]string{filepath.Base(dir)}, hash...)
		dir = filepath.Dir(dir)
	}
	return filepath.Join(append([]string{dir, "..", "queue"}, append(hash, id)...)...)
}

func (s *Spool) syncDirs(dirs ...string) error {
	if s.NoSync {
		return nil
	}
	return syncDirs(dirs...)
}

// syncDirs fsyncs directories so that renames and unlinks in them survive a
// crash.
func syncDirs(dirs ...string) error {
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		f, err := os.Open(d)
		if err != nil {
			return fmt.Errorf("ctlfile: sync %s: %w", d, err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("ctlfile: sync %s: %w", d, err)
		}
	}
	return nil
}

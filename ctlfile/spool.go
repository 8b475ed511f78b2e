package ctlfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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

	// hook, when set by a test, is called at each step of Enqueue with the
	// step's name, to check what a crash at that instant would leave.
	hook func(step string)

	dirs atomic.Pointer[dirCache] // for Root; nil until first needed
}

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

// checkRel accepts "N", "A/N" and "A/B/N" where the letters are A–Z and the
// name starts with a digit: the only shapes ZMailer puts in transport/.
// Anything else (absolute, "..", deeper) could reach outside the spool.
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
	if name == "" || !isDigit(name[0]) || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: %q", ErrBadPath, rel)
	}
	return nil
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

// Quarantine moves transport/rel into bad/ — never deleting anything; a name
// already taken in bad/ gets a ".1", ".2"… suffix — and writes
// bad/<name>.why with the reason and the time. The body stays in queue/.
func (s *Spool) Quarantine(rel string, why error) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if err := os.MkdirAll(s.BadDir(), 0o755); err != nil {
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	src := s.ctlPath(rel)
	base := path.Base(rel)
	var dst string
	for n := 0; ; n++ {
		if n > 10000 {
			return fmt.Errorf("ctlfile: quarantine %s: no free name in %s", rel, s.BadDir())
		}
		name := base
		if n > 0 {
			name = base + "." + strconv.Itoa(n)
		}
		dst = filepath.Join(s.BadDir(), name)
		// link fails if dst exists, where rename would silently replace it.
		err := os.Link(src, dst)
		if err == nil {
			break
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		// No hard links here (some filesystems): check, then rename.
		if _, lerr := os.Lstat(dst); lerr == nil {
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
		}
		break
	}
	if err := os.Remove(src); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	reason := "unknown"
	if why != nil {
		reason = why.Error()
	}
	note := fmt.Sprintf("file: transport/%s\ntime: %s\nreason: %s\n",
		rel, time.Now().UTC().Format(time.RFC3339), strings.ReplaceAll(reason, "\n", " "))
	if err := os.WriteFile(dst+".why", []byte(note), 0o644); err != nil {
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	return syncDirs(s.BadDir(), filepath.Dir(src))
}

// Remove unlinks the body (queue/<dir of rel>/<id>), then the control
// file; missing files are not errors. A crash in between leaves a control
// file whose recipients are all settled and whose body is gone, which Read
// returns as such (with a zero Arrival) for the scheduler to complete
// again; the other order would leave a body that nothing ever removes.
func (s *Spool) Remove(rel string, id string) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if id != "" {
		if err := checkID(id); err != nil {
			return err
		}
	}
	c := s.cache()
	if id != "" {
		if err := c.unlinkAt(treeQueue, bodyRel(rel, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ctlfile: remove body of %s: %w", rel, err)
		}
	}
	if err := c.unlinkAt(treeTransport, rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ctlfile: remove %s: %w", rel, err)
	}
	return nil
}

// Scan calls fn for every control file: regular files whose names start
// with a digit, in transport/ and in its single-letter A–Z subdirectories
// up to two levels. Dotfiles (temporary files) never start with a digit and
// are skipped. rel is relative to transport/ ("12", "A/12", "A/B/12").
// Subdirectories that vanish during the scan are ignored.
func (s *Spool) Scan(fn func(rel string)) error {
	sc := s.NewScanner()
	defer sc.Close()
	var batch []string
	for {
		var done bool
		var err error
		batch, done, err = sc.Next(batch[:0], scanBatch)
		for _, rel := range batch {
			fn(rel)
		}
		if err != nil || done {
			return err
		}
	}
}

// scanBatch is how many directory entries one read takes: memory stays
// flat on a huge flat spool.
const scanBatch = 1024

// Scanner is one pass over the control files, as Scan makes it, taken a
// few names at a time: a scheduler facing millions of queued files reads
// names only as fast as it can admit messages, and holds no more than the
// directories on its path and one batch of their entries. Names appear in
// directory order. Files created or removed during the pass may or may not
// be seen, as with readdir. A Scanner is not safe for concurrent use.
type Scanner struct {
	spool *Spool
	stack []scanLevel
	begun bool
	done  bool
}

type scanLevel struct {
	dir    *os.File
	prefix string // relative path of the directory with a trailing "/", "" at the top
	depth  int
	ents   []os.DirEntry
	next   int
}

// NewScanner starts a pass. It opens nothing until the first Next.
func (s *Spool) NewScanner() *Scanner { return &Scanner{spool: s} }

// Next appends up to n names (relative to transport/) to dst and returns
// it. done is true once the pass has reached its end; later calls return
// dst unchanged and done. An error ends the pass (done is then true too):
// the names before it are still returned.
func (sc *Scanner) Next(dst []string, n int) (_ []string, done bool, _ error) {
	if sc.done {
		return dst, true, nil
	}
	if !sc.begun {
		sc.begun = true
		if err := sc.push(sc.spool.TransportDir(), "", 0); err != nil {
			sc.Close()
			return dst, true, err
		}
	}
	for added := 0; added < n; {
		if len(sc.stack) == 0 {
			sc.done = true
			return dst, true, nil
		}
		top := &sc.stack[len(sc.stack)-1]
		if top.next == len(top.ents) {
			ents, err := top.dir.ReadDir(scanBatch)
			if len(ents) == 0 {
				dir := top.dir
				dir.Close()
				sc.stack[len(sc.stack)-1] = scanLevel{}
				sc.stack = sc.stack[:len(sc.stack)-1]
				if err != nil && err != io.EOF {
					sc.Close()
					return dst, true, fmt.Errorf("ctlfile: scan %s: %w", dir.Name(), err)
				}
				continue
			}
			top.ents, top.next = ents, 0
		}
		e := top.ents[top.next]
		top.ents[top.next] = nil
		top.next++
		name := e.Name()
		switch {
		case isDigit(name[0]):
			if e.Type().IsRegular() {
				dst = append(dst, top.prefix+name)
				added++
			}
		case top.depth < 2 && hashLetter(name) && e.IsDir():
			prefix, depth := top.prefix+name+"/", top.depth+1
			if err := sc.push(filepath.Join(top.dir.Name(), name), prefix, depth); err != nil {
				sc.Close()
				return dst, true, err
			}
		}
	}
	return dst, false, nil
}

// push opens a directory of the pass; one that vanished is skipped.
func (sc *Scanner) push(dir, prefix string, depth int) error {
	d, err := os.Open(dir)
	if err != nil {
		if depth > 0 && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("ctlfile: scan: %w", err)
	}
	sc.stack = append(sc.stack, scanLevel{dir: d, prefix: prefix, depth: depth})
	return nil
}

// Close ends the pass early and releases its directories. Idempotent.
func (sc *Scanner) Close() error {
	for i := range sc.stack {
		sc.stack[i].dir.Close()
	}
	sc.stack = nil
	sc.begun, sc.done = true, true
	return nil
}

// MarkDiags rewrites the status byte of the d lines at offsets to Done
// (the scheduler does this once it has put them into a DSN), then fsyncs:
// a lost mark would mean a duplicate DSN.
func (s *Spool) MarkDiags(rel string, offsets []int64) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	fd, err := os.OpenFile(s.ctlPath(rel), os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		return fmt.Errorf("ctlfile: mark diagnostics in %s: %w", rel, err)
	}
	defer fd.Close()
	var cur [2]byte
	for _, off := range offsets {
		if _, err := fd.ReadAt(cur[:], off); err != nil {
			return fmt.Errorf("ctlfile: mark diagnostics in %s: offset %d: %w", rel, off, err)
		}
		if cur[0] != 'd' || (cur[1] != byte(Pending) && cur[1] != byte(Done)) {
			return fmt.Errorf("ctlfile: mark diagnostics in %s: no d line at offset %d", rel, off)
		}
		if _, err := fd.WriteAt([]byte{byte(Done)}, off+1); err != nil {
			return fmt.Errorf("ctlfile: mark diagnostics in %s: %w", rel, err)
		}
	}
	if err := fd.Sync(); err != nil {
		return fmt.Errorf("ctlfile: mark diagnostics in %s: %w", rel, err)
	}
	return fd.Close()
}

// AppendDiags appends d lines to transport/rel with one write on an
// O_APPEND descriptor and an fsync (the scheduler does this on expiry).
func (s *Spool) AppendDiags(rel string, ds []Diag) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	var buf []byte
	for _, d := range ds {
		buf = append(buf, FormatDiag(d)...)
	}
	fd, err := os.OpenFile(s.ctlPath(rel), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		return fmt.Errorf("ctlfile: append to %s: %w", rel, err)
	}
	defer fd.Close()
	if _, err := writeOnce(fd, buf); err != nil {
		return fmt.Errorf("ctlfile: append to %s: %w", rel, err)
	}
	if err := fd.Sync(); err != nil {
		return fmt.Errorf("ctlfile: append to %s: %w", rel, err)
	}
	return fd.Close()
}

// writeOnce issues exactly one write(2): concurrent O_APPEND writers (agents
// and the scheduler) rely on each d line landing whole. os.File.Write would
// loop on a short write and could interleave the remainder with another
// writer's line.
//
// On a full filesystem a write that needs a new block stops short instead
// of failing: the part that fit stays, a d line without its newline, and
// the next append (the retry) would run into it and garble both lines. So
// the space is reserved first (fallocate with FALLOC_FL_KEEP_SIZE): a full
// disk then fails with ENOSPC before any byte is written. A short write
// that still happens (no fallocate on this filesystem, or another writer
// took the reserved space) is undone by truncating the file back, unless
// something was appended after it.
func writeOnce(f *os.File, b []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		if werr = reserve(int(fd), len(b)); werr != nil {
			return true
		}
		for {
			n, werr = unix.Write(int(fd), b)
			if werr != unix.EINTR {
				break
			}
		}
		if werr == nil && n < len(b) {
			werr = undoShortWrite(int(fd), n, len(b))
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if werr != nil {
		return 0, werr
	}
	return n, nil
}

// reserve is reserveSpace; tests replace it to make a write stop short.
var reserve = reserveSpace

// reserveSpace allocates n bytes after the end of the file behind fd,
// keeping its size. Only a full disk or quota is an error; a filesystem
// that cannot reserve (EOPNOTSUPP, …) leaves it to the write.
func reserveSpace(fd, n int) error {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return nil
	}
	err := ignoringEINTR(func() error { return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, st.Size, int64(n)) })
	if err == unix.ENOSPC || err == unix.EDQUOT {
		return fmt.Errorf("reserve %d bytes: %w", n, err)
	}
	return nil
}

// undoShortWrite removes the n bytes of a short O_APPEND write (of want)
// from the end of the file, where the descriptor's offset now is.
func undoShortWrite(fd, n, want int) error {
	short := fmt.Errorf("%w: %d of %d bytes", io.ErrShortWrite, n, want)
	if n == 0 {
		return short
	}
	end, err := unix.Seek(fd, 0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("%w, torn line left at the end: %v", short, err)
	}
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil || st.Size != end {
		return fmt.Errorf("%w, torn line left at offset %d: another writer appended after it", short, end-int64(n))
	}
	if err := ignoringEINTR(func() error { return unix.Ftruncate(fd, end-int64(n)) }); err != nil {
		return fmt.Errorf("%w, torn line left at the end: %v", short, err)
	}
	return fmt.Errorf("%w, undone", short)
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

package ctlfile

// The removal log: what a remover is removing, so that a start can finish
// a removal a crash interrupted.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// RemovalLog records the batch of messages a goroutine is removing, in
// state/removing.<n>, so that a crash between a message's two unlinks —
// its control file gone, its body not — leaves nothing the next start
// cannot tell from a router's message on its way (a body written a moment
// before its control file): FinishRemovals removes those bodies at once,
// each only while it is the file that was read, where SweepBodies would
// wait for its grace period.
//
// A batch costs two pwrites of a small file (Begin, End) and no fsync:
// the log is for a process that dies (SIGKILL, a crash), whose writes the
// page cache keeps; after a machine crash a body may still be left for the
// sweep. The file is text, as every file of the spool: a header with the
// number of entries, then one line per message — control file, body name,
// and the body's identity (device, inode, generation, its source):
//
//	zsched removals 0000002
//	A/B/12345	12345	64769	12345	3735928559	1
//	C/D/12367	12367	64769	12367	2471019862	1
//
// A RemovalLog is not safe for concurrent use: one per goroutine.
type RemovalLog struct {
	f   *os.File
	buf []byte
}

// removalHeader starts a removal log: the count is fixed-width, so that a
// shorter batch overwrites a longer one's header, and what follows its
// entries is ignored.
const removalHeader = "zsched removals %07d\n"

// maxRemovalBatch is the most entries one header can count.
const maxRemovalBatch = 9_999_999

// OpenRemovalLog opens (creating it if need be) state/removing.<n>.
func (s *Spool) OpenRemovalLog(n int) (*RemovalLog, error) {
	f, err := os.OpenFile(filepath.Join(s.StateDir(), "removing."+strconv.Itoa(n)), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ctlfile: removal log: %w", err)
	}
	return &RemovalLog{f: f}, nil
}

// Begin records the messages about to be removed: one pwrite.
func (l *RemovalLog) Begin(ms []Files) error {
	if len(ms) > maxRemovalBatch {
		return fmt.Errorf("ctlfile: removal log: %d entries, at most %d", len(ms), maxRemovalBatch)
	}
	b := fmt.Appendf(l.buf[:0], removalHeader, len(ms))
	for _, m := range ms {
		b = append(b, m.Rel...)
		b = append(b, '\t')
		b = append(b, m.ID...)
		for _, v := range []uint64{m.Body.Dev, m.Body.Ino, m.Body.Gen, uint64(m.Body.Src)} {
			b = append(b, '\t')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, '\n')
	}
	l.buf = b
	return l.write(b)
}

// End records that the batch is done: one pwrite.
func (l *RemovalLog) End() error { return l.write(fmt.Appendf(l.buf[:0], removalHeader, 0)) }

func (l *RemovalLog) write(b []byte) error {
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("ctlfile: removal log: %w", err)
	}
	return nil
}

// Close closes the log.
func (l *RemovalLog) Close() error { return l.f.Close() }

// FinishRemovals finishes what the removal logs of an earlier run say was
// being removed when it stopped: the body of a message whose control file
// is gone is removed if it is still the file read; a message whose control
// file is there is left (a scan completes it again). The logs are emptied.
// Call it before any RemovalLog is opened. It returns the bodies removed
// (relative to the postoffice).
func (s *Spool) FinishRemovals() (removed []string, err error) {
	logs, err := filepath.Glob(filepath.Join(s.StateDir(), "removing.*"))
	if err != nil {
		return nil, fmt.Errorf("ctlfile: removal logs: %w", err)
	}
	c := s.cache()
	var errs []error
	for _, p := range logs {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("ctlfile: removal log: %w", err))
			continue
		}
		for _, m := range parseRemovalLog(data) {
			if checkRel(m.Rel) != nil || checkID(m.ID) != nil || !m.Body.Known() {
				continue
			}
			var st unix.Stat_t
			if err := c.at(treeTransport, m.Rel, "stat", func(dirfd int, name string) error {
				return rawsys.Fstatat(dirfd, name, &st)
			}); !errors.Is(err, fs.ErrNotExist) {
				continue // its control file is there, or cannot be told
			}
			body := bodyRel(m.Rel, m.ID)
			if _, err := os.Lstat(filepath.Join(s.QueueDir(), filepath.FromSlash(body))); err != nil {
				continue
			}
			if err := c.removeChecked(treeQueue, body, m.Body); err != nil {
				if !errors.Is(err, ErrChanged) { // another file: not ours to remove
					errs = append(errs, err)
				}
				continue
			}
			removed = append(removed, filepath.Join("queue", filepath.FromSlash(body)))
		}
		if err := os.WriteFile(p, fmt.Appendf(nil, removalHeader, 0), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("ctlfile: removal log: %w", err))
		}
	}
	return removed, errors.Join(errs...)
}

// parseRemovalLog returns the entries of a removal log; a damaged one
// gives what can be read of it.
func parseRemovalLog(data []byte) []Files {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		return nil
	}
	var n int
	if _, err := fmt.Sscanf(sc.Text(), strings.TrimSuffix(removalHeader, "\n"), &n); err != nil {
		return nil
	}
	var out []Files
	for len(out) < n && sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 6 {
			break
		}
		var v [4]uint64
		ok := true
		for i := range v {
			x, err := strconv.ParseUint(f[2+i], 10, 64)
			if err != nil {
				ok = false
				break
			}
			v[i] = x
		}
		if !ok || v[3] > uint64(IDChange) {
			break
		}
		out = append(out, Files{Rel: f[0], ID: f[1], Body: FileID{Dev: v[0], Ino: v[1], Gen: v[2], Src: IDSource(v[3])}})
	}
	return out
}

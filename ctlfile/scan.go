package ctlfile

// The directory scan: a resumable pass over the control files.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Scan calls fn for every control file: regular files with a control
// file's name (all digits, or digits and "-etrn"), in transport/ and in
// its single-letter A–Z subdirectories up to two levels. Other names —
// dotfiles (temporary files), "12345.bak" — are skipped. rel is relative to transport/ ("12", "A/12", "A/B/12").
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
		case controlName(name):
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

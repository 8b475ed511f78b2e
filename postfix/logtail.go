package postfix

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Progress is what a maillog says about a queue being drained.
type Progress struct {
	Removed  int // queue files qmgr removed: messages done with
	Sent     int // recipients delivered (status=sent)
	Deferred int // recipient attempts deferred (status=deferred)
	Bounced  int // recipients bounced (status=bounced)
	// Trouble counts warning, error, fatal and panic lines; First is the
	// first of them, for the error message of a run that went wrong.
	Trouble int
	First   string
}

// Count adds one maillog line (without its newline).
func (p *Progress) Count(line []byte) {
	switch {
	case bytes.Contains(line, []byte(" status=sent ")):
		p.Sent++
	case bytes.Contains(line, []byte(" status=deferred ")):
		p.Deferred++
	case bytes.Contains(line, []byte(" status=bounced ")):
		p.Bounced++
	case bytes.HasSuffix(line, []byte(": removed")) && bytes.Contains(line, []byte("/qmgr[")):
		p.Removed++
	default:
		for _, w := range [...]string{": warning: ", ": error: ", ": fatal: ", ": panic: "} {
			if bytes.Contains(line, []byte(w)) {
				if p.Trouble == 0 {
					p.First = string(line)
				}
				p.Trouble++
				break
			}
		}
	}
}

// LogTail follows a maillog as Postfix appends to it and keeps a running
// Progress, reading each byte once: a drain of 100 000 recipients logs
// some 30 MB, too much to read again at every poll.
type LogTail struct {
	path    string
	off     int64
	partial []byte // a last line not yet complete
	buf     []byte
	p       Progress
}

// NewLogTail follows the maillog at path from its current end (or from its
// start, when it does not exist yet).
func NewLogTail(path string) (*LogTail, error) {
	t := &LogTail{path: path, buf: make([]byte, 256<<10)}
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		t.off = fi.Size()
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("postfix: %w", err)
	}
	return t, nil
}

// Tail follows the instance's maillog from its current end.
func (in *Instance) Tail() (*LogTail, error) { return NewLogTail(in.LogPath()) }

// Read counts the lines appended since the last call and returns the
// progress so far. A line still being written is counted once complete.
func (t *LogTail) Read() (Progress, error) {
	f, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return t.p, nil
	}
	if err != nil {
		return t.p, fmt.Errorf("postfix: %w", err)
	}
	defer f.Close()
	for {
		n, err := f.ReadAt(t.buf, t.off)
		t.off += int64(n)
		t.feed(t.buf[:n])
		if err == io.EOF || n == 0 {
			return t.p, nil
		}
		if err != nil {
			return t.p, fmt.Errorf("postfix: %w", err)
		}
	}
}

// feed counts the complete lines of partial+b and keeps the rest.
func (t *LogTail) feed(b []byte) {
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			t.partial = append(t.partial, b...)
			return
		}
		line := b[:nl]
		if len(t.partial) > 0 {
			line = append(t.partial, line...)
			t.partial = t.partial[:0]
		}
		t.p.Count(line)
		b = b[nl+1:]
	}
}

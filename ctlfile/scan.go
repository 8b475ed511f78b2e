package ctlfile

// The directory scan: a resumable pass over the control files.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
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
// directories on its path and one buffer of their entries each. Names
// appear in directory order. Files created or removed during the pass may
// or may not be seen, as with readdir. A Scanner is not safe for
// concurrent use.
//
// It reads the directories with getdents64 itself: the kernel's records
// carry each entry's type, so a name costs one string and no lstat, where
// os.File.ReadDir makes a DirEntry of every name besides (the census and
// the scan list every file of a large spool). An entry whose type the file
// system does not give (DT_UNKNOWN) is lstat'ed, as ReadDir does.
type Scanner struct {
	spool *Spool
	stack []scanLevel
	bufs  [3][]byte // getdents64 buffers, by depth
	begun bool
	done  bool
}

type scanLevel struct {
	fd     int    // the directory, open
	path   string // its path, for errors and its subdirectories
	prefix string // relative path of the directory with a trailing "/", "" at the top
	depth  int
	buf    []byte // getdents64 records; buf[next:end] not yet taken
	next   int
	end    int
}

// direntBuf is the size of a getdents64 buffer: some 1 000 records of a
// spool's short names per system call.
const direntBuf = 32 << 10

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
		if top.next >= top.end {
			got, err := getdents(top.fd, top.buf)
			if got <= 0 {
				path := top.path
				unix.Close(top.fd)
				sc.stack[len(sc.stack)-1] = scanLevel{}
				sc.stack = sc.stack[:len(sc.stack)-1]
				if err != nil {
					sc.Close()
					return dst, true, fmt.Errorf("ctlfile: scan %s: %w", path, err)
				}
				continue
			}
			top.next, top.end = 0, got
		}
		// A linux_dirent64: d_ino (8 bytes), d_off (8), d_reclen (2),
		// d_type (1), then the name, NUL-terminated.
		rec := top.buf[top.next:top.end]
		if len(rec) < 19 {
			top.next = top.end // cannot happen: the kernel writes whole records
			continue
		}
		reclen := int(binary.NativeEndian.Uint16(rec[16:]))
		if reclen < 19 || reclen > len(rec) {
			top.next = top.end
			continue
		}
		top.next += reclen
		typ := rec[18]
		name := rec[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		switch {
		case controlNameBytes(name):
			if typ == unix.DT_UNKNOWN {
				typ = lstatType(top.fd, string(name))
			}
			if typ == unix.DT_REG {
				dst = append(dst, top.prefix+string(name))
				added++
			}
		case top.depth < 2 && len(name) == 1 && hashLetter(string(name)):
			if typ == unix.DT_UNKNOWN {
				typ = lstatType(top.fd, string(name))
			}
			if typ != unix.DT_DIR {
				continue
			}
			prefix, depth := top.prefix+string(name)+"/", top.depth+1
			if err := sc.push(filepath.Join(top.path, string(name)), prefix, depth); err != nil {
				sc.Close()
				return dst, true, err
			}
		}
	}
	return dst, false, nil
}

// controlNameBytes is controlName of a name still in the record buffer,
// without making a string of every name that is not one.
func controlNameBytes(b []byte) bool {
	if len(b) == 0 || b[0] < '0' || b[0] > '9' {
		return false
	}
	return controlName(string(b)) // a name this short is converted on the stack
}

// getdents reads directory records into buf, retrying on EINTR.
func getdents(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// lstatType is the d_type of name in the directory fd by lstat, or
// DT_UNKNOWN when it cannot be stat'ed (it vanished): skipped.
func lstatType(fd int, name string) uint8 {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return unix.DT_UNKNOWN
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFDIR:
		return unix.DT_DIR
	}
	return unix.DT_UNKNOWN
}

// push opens a directory of the pass; one that vanished is skipped.
func (sc *Scanner) push(dir, prefix string, depth int) error {
	var fd int
	var err error
	for {
		fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if depth > 0 && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("ctlfile: scan: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	if sc.bufs[depth] == nil {
		sc.bufs[depth] = make([]byte, direntBuf)
	}
	sc.stack = append(sc.stack, scanLevel{fd: fd, path: dir, prefix: prefix, depth: depth, buf: sc.bufs[depth]})
	return nil
}

// Close ends the pass early and releases its directories. Idempotent.
func (sc *Scanner) Close() error {
	for i := range sc.stack {
		unix.Close(sc.stack[i].fd)
	}
	sc.stack = nil
	sc.begun, sc.done = true, true
	return nil
}

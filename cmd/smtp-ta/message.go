package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"zsched/ctlfile"
	"zsched/internal/rawsys"
	"zsched/ta"

	"golang.org/x/sys/unix"
)

// maxInCore is the largest body read into memory whole; a larger one is
// read from the queue file as it is sent.
const maxInCore = 1 << 20

// message is what one job sends: per header block (the router may write
// several m blocks, one per group of recipients) the header, and the
// body they share. One message value serves every job of the agent: its
// buffers are kept, so a job of a small message allocates nothing for it.
type message struct {
	ctl      []byte   // the control file as read
	body     []byte   // the body, when inCore
	inCore   bool     // the body is in body; else it is read from file
	file     *os.File // the queue file, when the body is not in core; the body starts at bodyOff
	bodyOff  int64
	bodyLen  int64
	bodyLFs  int64 // LFs in the body not preceded by CR: each becomes CRLF on the wire
	bodyHigh bool  // the body has 8-bit octets
	parts    parts
	scratch  []byte // for scanning a body not in core
}

// read loads job d's control file and body, reusing m's buffers. Both
// files are read with raw system calls (package rawsys), like the ta
// library's own: the control file is opened, read and closed (ta has
// parsed it but keeps no copy; its header blocks are sent from here), the
// body is read through the descriptor ta opened (BodyFD; an *os.File only
// for a body too large to hold, which is read as it is sent).
func (m *message) read(dir string, d *ta.Delivery) error {
	var err error
	if m.ctl, err = readFile(filepath.Join(dir, d.Path), m.ctl[:0]); err != nil {
		return fmt.Errorf("read control file: %w", err)
	}
	m.bodyOff = d.File.BodyOffset
	if m.bodyOff < 0 {
		return fmt.Errorf("body offset %d before the start of the message file", m.bodyOff)
	}
	fd := d.BodyFD()
	m.body, m.inCore, err = preadUpTo(fd, m.body[:0], m.bodyOff, maxInCore)
	if err != nil {
		return fmt.Errorf("read message file: %w", err)
	}
	if m.inCore {
		if len(m.body) == 0 {
			// Nothing at bodyOff: an empty body, or an offset past the
			// end of the file, which the size tells apart.
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return fmt.Errorf("stat message file: %w", err)
			}
			if m.bodyOff > st.Size {
				return fmt.Errorf("body offset %d outside the %d-byte message file", m.bodyOff, st.Size)
			}
		}
		m.bodyLen = int64(len(m.body))
		m.bodyLFs, m.bodyHigh = scan(m.body, 0)
		return nil
	}
	m.file = d.Body()
	fi, err := m.file.Stat()
	if err != nil {
		return fmt.Errorf("stat message file: %w", err)
	}
	m.bodyLen = fi.Size() - m.bodyOff
	if m.scratch == nil {
		m.scratch = make([]byte, 64<<10)
	}
	m.bodyLFs, m.bodyHigh, err = scanReader(io.NewSectionReader(m.file, m.bodyOff, m.bodyLen), m.scratch)
	if err != nil {
		return fmt.Errorf("read message file: %w", err)
	}
	return nil
}

// release forgets the job's files (ta closes them) and drops buffers a
// large message grew, so that one large message does not hold memory for
// the agent's life.
func (m *message) release() {
	m.file = nil
	m.parts = parts{}
	if cap(m.body) > 64<<10 {
		m.body = nil
	}
	if cap(m.ctl) > 64<<10 {
		m.ctl = nil
	}
}

// readFile appends the whole file at path to buf.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := rawsys.OpenCwd(path, unix.O_RDONLY)
	if err != nil {
		return buf, err
	}
	defer rawsys.Close(fd)
	buf, _, err = preadUpTo(fd, buf, 0, -1)
	return buf, err
}

// preadUpTo appends the file at fd from off to its end to buf, unless it
// holds more than limit bytes (limit < 0: no limit): then whole is false
// and buf's content is undefined. A read shorter than asked is the end of
// a regular file (as ctlfile's reads take it), so a small file costs one
// pread.
func preadUpTo(fd int, buf []byte, off int64, limit int) (out []byte, whole bool, err error) {
	if cap(buf) == 0 {
		buf = make([]byte, 0, 4096)
	}
	for {
		if len(buf) == cap(buf) {
			if limit >= 0 && len(buf) > limit {
				return buf, false, nil
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rawsys.Pread(fd, buf[len(buf):cap(buf)], off)
		if err != nil {
			return buf, false, err
		}
		buf = buf[:len(buf)+n]
		off += int64(n)
		if n == 0 || len(buf) < cap(buf) {
			return buf, limit < 0 || len(buf) <= limit, nil
		}
	}
}

// header returns the header block starting at off (a recipient's
// HeaderOffset), up to and including the newline before the blank line
// that ends the m block; nil when there is none.
func (m *message) header(off int64) ([]byte, error) {
	if off < 0 {
		return nil, nil
	}
	if off > int64(len(m.ctl)) {
		return nil, errors.New("header offset past the end of the control file")
	}
	h := m.ctl[off:]
	if bytes.HasPrefix(h, []byte("\n")) {
		return nil, nil // an empty m block
	}
	end := bytes.Index(h, []byte("\n\n"))
	if end < 0 {
		return nil, errors.New("unterminated m block")
	}
	return h[:end+1], nil
}

// size is the message's size as sent with the header h, CRLF line ends
// (RFC 1870 wants the octets the server will receive, near enough).
func (m *message) size(h []byte) int64 {
	lfs, _ := scan(h, 0)
	return int64(len(h)) + lfs + 2 + m.bodyLen + m.bodyLFs
}

// eightBit reports whether the header h or the body has 8-bit octets.
func (m *message) eightBit(h []byte) bool {
	_, high := scan(h, 0)
	return high || m.bodyHigh
}

// reader is the message with header h: the header, the blank line that
// ends it, and the body. It is valid until the next call.
func (m *message) reader(h []byte) io.Reader {
	if m.inCore {
		m.parts = parts{b: [3][]byte{h, newline, m.body}}
		return &m.parts
	}
	return io.MultiReader(bytes.NewReader(h), strings.NewReader("\n"), io.NewSectionReader(m.file, m.bodyOff, m.bodyLen))
}

var newline = []byte("\n")

// parts reads three byte slices in turn, and writes them to a writer
// directly (io.Copy uses WriteTo): a message in core reaches the SMTP
// connection's buffer without another copy.
type parts struct {
	b [3][]byte
	i int
}

func (p *parts) Read(b []byte) (int, error) {
	for p.i < len(p.b) && len(p.b[p.i]) == 0 {
		p.i++
	}
	if p.i == len(p.b) {
		return 0, io.EOF
	}
	n := copy(b, p.b[p.i])
	p.b[p.i] = p.b[p.i][n:]
	return n, nil
}

func (p *parts) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; p.i < len(p.b); p.i++ {
		n, err := w.Write(p.b[p.i])
		total += int64(n)
		p.b[p.i] = p.b[p.i][n:]
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// scan counts the LFs of b not preceded by a CR (prev is the byte before
// b, 0 for none) and looks for 8-bit octets.
func scan(b []byte, prev byte) (lfs int64, high bool) {
	for _, c := range b {
		if c == '\n' && prev != '\r' {
			lfs++
		}
		if c >= 0x80 {
			high = true
		}
		prev = c
	}
	return lfs, high
}

// scanReader is scan of everything r reads, through buf.
func scanReader(r io.Reader, buf []byte) (lfs int64, high bool, err error) {
	prev := byte(0)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			l, h := scan(buf[:n], prev)
			lfs += l
			high = high || h
			prev = buf[n-1]
		}
		if err == io.EOF {
			return lfs, high, nil
		}
		if err != nil {
			return lfs, high, err
		}
	}
}

// envelope addresses from the control file.

// senderOf is the reverse path of recipient rc: "" for the null sender
// (a bounce: sender channel "error", or a user "-" or "<>").
func senderOf(f *ctlfile.File, rc *ctlfile.Rcpt) string {
	if rc.Sender < 0 || rc.Sender >= len(f.Senders) {
		return ""
	}
	s := f.Senders[rc.Sender]
	if s.Channel == "error" {
		return ""
	}
	return bare(s.User)
}

// bare strips the angle brackets a route may have left around an address.
func bare(a string) string {
	a = strings.TrimSpace(a)
	if a == "-" || a == "<>" {
		return ""
	}
	if strings.HasPrefix(a, "<") && strings.HasSuffix(a, ">") {
		a = a[1 : len(a)-1]
	}
	return a
}

// needsUTF8 reports whether an address has non-ASCII characters, which
// only a server offering SMTPUTF8 may be given (RFC 6531).
func needsUTF8(addrs ...string) bool {
	for _, a := range addrs {
		for i := 0; i < len(a); i++ {
			if a[i] >= utf8.RuneSelf {
				return true
			}
		}
	}
	return false
}

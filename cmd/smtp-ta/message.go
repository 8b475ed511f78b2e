package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"zsched/ctlfile"
	"zsched/ta"
)

// message is what one job sends: per header block (the router may write
// several m blocks, one per group of recipients) the header, and the
// body they share.
type message struct {
	ctl      []byte   // the control file as read
	body     *os.File // the queue file; the body starts at bodyOff
	bodyOff  int64
	bodyLen  int64
	bodyLFs  int64 // LFs in the body not preceded by CR: each becomes CRLF on the wire
	bodyHigh bool  // the body has 8-bit octets
}

func readMessage(dir string, d *ta.Delivery) (*message, error) {
	ctl, err := os.ReadFile(filepath.Join(dir, d.Path))
	if err != nil {
		return nil, fmt.Errorf("read control file: %w", err)
	}
	body := d.Body()
	fi, err := body.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat message file: %w", err)
	}
	m := &message{ctl: ctl, body: body, bodyOff: d.File.BodyOffset}
	if m.bodyOff < 0 || m.bodyOff > fi.Size() {
		return nil, fmt.Errorf("body offset %d outside the %d-byte message file", m.bodyOff, fi.Size())
	}
	m.bodyLen = fi.Size() - m.bodyOff
	m.bodyLFs, m.bodyHigh, err = scan(io.NewSectionReader(body, m.bodyOff, m.bodyLen))
	if err != nil {
		return nil, fmt.Errorf("read message file: %w", err)
	}
	return m, nil
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
	lfs, _, _ := scan(bytes.NewReader(h))
	return int64(len(h)) + lfs + 2 + m.bodyLen + m.bodyLFs
}

// eightBit reports whether the header h or the body has 8-bit octets.
func (m *message) eightBit(h []byte) bool {
	_, high, _ := scan(bytes.NewReader(h))
	return high || m.bodyHigh
}

// reader is the message with header h: the header, the blank line that
// ends it, and the body.
func (m *message) reader(h []byte) io.Reader {
	return io.MultiReader(bytes.NewReader(h), strings.NewReader("\n"), io.NewSectionReader(m.body, m.bodyOff, m.bodyLen))
}

// scan counts bare LFs and looks for 8-bit octets.
func scan(r io.Reader) (lfs int64, high bool, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	prev := byte(0)
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			return lfs, high, nil
		}
		if err != nil {
			return lfs, high, err
		}
		if b == '\n' && prev != '\r' {
			lfs++
		}
		if b >= 0x80 {
			high = true
		}
		prev = b
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

package smtpclient

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Reply is one SMTP reply: its code, the enhanced status code when the
// server sends one (RFC 2034), and its text lines without either.
type Reply struct {
	Code     int
	Enhanced string   // e.g. "5.1.1"; "" when the server gave none
	Lines    []string // at least one, possibly empty
}

// Class is the reply's first digit: 2 success, 3 intermediate, 4 temporary,
// 5 permanent; 0 for the zero Reply (no reply was read).
func (r Reply) Class() int { return r.Code / 100 }

// IsZero reports whether no reply was read.
func (r Reply) IsZero() bool { return r.Code == 0 }

// ShutsDown reports whether the server is closing the session: a 421 at any
// stage (RFC 5321 §3.8). For the scheduler it is a site failure.
func (r Reply) ShutsDown() bool { return r.Code == 421 }

// Status is the enhanced status code, or one derived from the reply class
// ("4.0.0", "5.0.0") when the server sent none.
func (r Reply) Status() string {
	if r.Enhanced != "" {
		return r.Enhanced
	}
	if c := r.Class(); c >= 2 && c <= 5 {
		return strconv.Itoa(c) + ".0.0"
	}
	return ""
}

// Text is the reply's text lines joined with blanks.
func (r Reply) Text() string { return strings.Join(r.Lines, " ") }

// String is the reply as one line: "550 5.1.1 text text".
func (r Reply) String() string {
	if r.IsZero() {
		return ""
	}
	s := strconv.Itoa(r.Code)
	if r.Enhanced != "" {
		s += " " + r.Enhanced
	}
	if t := r.Text(); t != "" {
		s += " " + t
	}
	return s
}

// Limits on what a server may send us, so a broken or hostile peer cannot
// make the agent buffer without bound. RFC 5321 §4.5.3.1.5 allows reply
// lines of 512 octets; real servers send longer ones, so allow some room.
const (
	maxReplyLine  = 4096
	maxReplyLines = 200
)

// ErrProtocol is wrapped by errors about a reply that is not SMTP.
var ErrProtocol = errors.New("smtpclient: protocol error")

// readReply reads one (possibly multi-line) reply. A leading "c.s.d" whose
// class matches the code is taken as the enhanced status code whether or
// not the server announced ENHANCEDSTATUSCODES, as Postfix's client does:
// many servers send them regardless.
func readReply(r *bufio.Reader) (Reply, error) {
	var rep Reply
	for n := 0; ; n++ {
		if n == maxReplyLines {
			return Reply{}, fmt.Errorf("%w: reply of more than %d lines", ErrProtocol, maxReplyLines)
		}
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return Reply{}, fmt.Errorf("%w: reply line longer than %d bytes", ErrProtocol, r.Size())
		}
		if err != nil {
			return Reply{}, err
		}
		s := strings.TrimRight(string(line), "\r\n")
		if len(s) < 3 || (len(s) > 3 && s[3] != ' ' && s[3] != '-') {
			return Reply{}, fmt.Errorf("%w: malformed reply line %q", ErrProtocol, s)
		}
		code, err := strconv.Atoi(s[:3])
		if err != nil || code < 200 || code > 599 {
			return Reply{}, fmt.Errorf("%w: malformed reply code in %q", ErrProtocol, s)
		}
		if n > 0 && code != rep.Code {
			return Reply{}, fmt.Errorf("%w: reply code changed from %d to %d within a reply", ErrProtocol, rep.Code, code)
		}
		rep.Code = code
		text := ""
		if len(s) > 4 {
			text = s[4:]
		}
		if n == 0 {
			rep.Enhanced, text = splitEnhanced(code, text)
		} else if rep.Enhanced != "" {
			// Continuation lines repeat the code (RFC 2034 §4).
			if e, rest := splitEnhanced(code, text); e == rep.Enhanced {
				text = rest
			}
		}
		rep.Lines = append(rep.Lines, text)
		if len(s) == 3 || s[3] == ' ' {
			return rep, nil
		}
	}
}

// splitEnhanced takes a leading RFC 3463 status code "c.s.d" whose class c
// matches the reply code's first digit.
func splitEnhanced(code int, text string) (enh, rest string) {
	word, rest, _ := strings.Cut(text, " ")
	parts := strings.Split(word, ".")
	if len(parts) != 3 || strconv.Itoa(code/100) != parts[0] {
		return "", text
	}
	for i, p := range parts {
		if p == "" || len(p) > 3 || (i == 0 && len(p) != 1) {
			return "", text
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return "", text
			}
		}
	}
	return word, rest
}

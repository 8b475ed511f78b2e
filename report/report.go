// Package report owns the per-recipient report line a transport agent writes
// to the scheduler, `inum/offset\tnotary\tstatus text`, with its nine status
// words and the Ctrl-A separated notary (DSN) fields. It is pure: parsing and
// formatting only, shared by the scheduler core, the agent library and the
// conformance kit so all three read the wire the same way.
package report

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Status is a report's status word.
type Status uint8

// The nine status words of the ZMailer protocol.
const (
	Invalid   Status = iota
	OK               // success; the scheduler writes a d line if NOTIFY=SUCCESS
	OK2              // success; the agent already wrote the d line
	OK3              // success; no DSN duty
	Error            // permanent failure; the scheduler writes the d line
	Error2           // permanent failure; the agent already wrote the d line
	Deferred         // temporary failure of this recipient
	Deferback        // temporary failure of this message (after DATA)
	RetryAt          // temporary failure of the site, retry at a given time
	DeferAll         // site failure: connect, DNS, greeting, handshake, 421
)

var statusNames = [...]string{
	Invalid:   "invalid",
	OK:        "ok",
	OK2:       "ok2",
	OK3:       "ok3",
	Error:     "error",
	Error2:    "error2",
	Deferred:  "deferred",
	Deferback: "deferback",
	RetryAt:   "retryat",
	DeferAll:  "deferall",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// ParseStatus maps a status word to its Status.
func ParseStatus(word string) (Status, bool) {
	for i, n := range statusNames {
		if i != int(Invalid) && n == word {
			return Status(i), true
		}
	}
	return Invalid, false
}

// Class tells what a status means for scheduling; the core branches on it,
// never on the word.
type Class uint8

const (
	Delivered  Class = iota + 1 // ok, ok2, ok3
	Permanent                   // error, error2
	Transient                   // deferred, deferback: this recipient only
	SiteFailed                  // retryat, deferall: the whole destination
)

func (c Class) String() string {
	switch c {
	case Delivered:
		return "delivered"
	case Permanent:
		return "permanent"
	case Transient:
		return "transient"
	case SiteFailed:
		return "site-failure"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Class returns the scheduling class of s.
func (s Status) Class() Class {
	switch s {
	case OK, OK2, OK3:
		return Delivered
	case Error, Error2:
		return Permanent
	case Deferred, Deferback:
		return Transient
	case RetryAt, DeferAll:
		return SiteFailed
	}
	return 0
}

// Notary holds the DSN fields of a report, in wire order.
type Notary struct {
	Recipient  string // final recipient
	Action     string // delivered, failed, relayed, delayed, expanded
	Status     string // enhanced status code, maybe with a comment
	Diagnostic string // e.g. "smtp; 550 ..."
	RemoteMTA  string // "while talking to"
	Agent      string // name[pid]
}

// IsZero reports whether no field is set (an empty notary on the wire).
func (n Notary) IsZero() bool { return n == Notary{} }

// String formats n for the wire: fields joined by Ctrl-A, trailing empty
// fields kept as ZMailer's libta does, except that a zero notary is "".
func (n Notary) String() string {
	if n.IsZero() {
		return ""
	}
	f := [...]string{n.Recipient, n.Action, n.Status, n.Diagnostic, n.RemoteMTA, n.Agent}
	for i := range f {
		f[i] = clean(f[i])
	}
	return strings.Join(f[:], "\x01")
}

// clean keeps a field from breaking the framing: TAB, LF and Ctrl-A are the
// separators; libta turns newlines into CR, and so do we.
func clean(s string) string {
	if !strings.ContainsAny(s, "\t\n\x01") {
		return s
	}
	return strings.NewReplacer("\t", " ", "\n", "\r", "\x01", " ").Replace(s)
}

// ParseNotary splits a wire notary. Missing trailing fields are empty.
func ParseNotary(s string) Notary {
	var n Notary
	if s == "" {
		return n
	}
	// Cut field by field rather than SplitN: a report per recipient, and
	// its notary needs no slice.
	dst := [...]*string{&n.Recipient, &n.Action, &n.Status, &n.Diagnostic, &n.RemoteMTA}
	for _, d := range dst {
		f, rest, ok := strings.Cut(s, "\x01")
		*d = f
		if !ok {
			return n
		}
		s = rest
	}
	n.Agent = s // the last field keeps any further Ctrl-A
	return n
}

// Line is one parsed report line.
type Line struct {
	Inum   int64 // control file number
	Offset int64 // offset of the recipient's r line
	Notary Notary
	Status Status
	// Retry is the argument of retryat: "+N" (relative seconds) or "N"
	// (absolute epoch seconds); empty for other words.
	Retry string
	Text  string // free text after the status word (and retryat argument)
}

// ErrMalformed is wrapped by every parse error.
var ErrMalformed = errors.New("report: malformed line")

// MaxLine is the longest line, without its newline, that either side of the
// protocol accepts.
const MaxLine = 64 << 10

// Parse parses a report line without its trailing newline.
func Parse(s string) (Line, error) {
	var l Line
	if len(s) > MaxLine {
		return l, fmt.Errorf("%w: %d bytes is over the %d byte limit", ErrMalformed, len(s), MaxLine)
	}
	key, rest, ok := strings.Cut(s, "\t")
	if !ok {
		return l, fmt.Errorf("%w: no TAB after inum/offset", ErrMalformed)
	}
	in, off, ok := strings.Cut(key, "/")
	if !ok {
		return l, fmt.Errorf("%w: %q is not inum/offset", ErrMalformed, key)
	}
	var err error
	if l.Inum, err = parseUint(in); err != nil {
		return l, fmt.Errorf("%w: inum %q", ErrMalformed, in)
	}
	if l.Offset, err = parseUint(off); err != nil {
		return l, fmt.Errorf("%w: offset %q", ErrMalformed, off)
	}
	notary, rest, ok := strings.Cut(rest, "\t")
	if !ok {
		return l, fmt.Errorf("%w: no TAB after the notary", ErrMalformed)
	}
	l.Notary = ParseNotary(notary)
	rest = strings.TrimLeft(rest, " ")
	word, text, _ := strings.Cut(rest, " ")
	st, ok := ParseStatus(word)
	if !ok {
		return l, fmt.Errorf("%w: unknown status word %q", ErrMalformed, word)
	}
	l.Status = st
	if st == RetryAt {
		text = strings.TrimLeft(text, " ")
		arg, after, _ := strings.Cut(text, " ")
		if _, err := parseRetry(arg); err != nil {
			return l, fmt.Errorf("%w: retryat %q", ErrMalformed, arg)
		}
		l.Retry, text = arg, after
	}
	l.Text = text
	return l, nil
}

// RetryAfter interprets a retryat argument given the current epoch second:
// it returns the number of seconds from now to the retry (never negative).
func (l Line) RetryAfter(nowUnix int64) (int64, bool) {
	if l.Status != RetryAt {
		return 0, false
	}
	v, err := parseRetry(l.Retry)
	if err != nil {
		return 0, false
	}
	if !strings.HasPrefix(l.Retry, "+") {
		v -= nowUnix
	}
	return max(v, 0), true
}

func parseRetry(s string) (int64, error) {
	return parseUint(strings.TrimPrefix(s, "+"))
}

func parseUint(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, strconv.ErrSyntax
	}
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, strconv.ErrSyntax
		}
		v = v*10 + int64(c-'0')
	}
	return v, nil
}

// String formats l as a wire line without its newline.
func (l Line) String() string {
	var b strings.Builder
	b.Grow(32 + len(l.Text))
	b.WriteString(strconv.FormatInt(l.Inum, 10))
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(l.Offset, 10))
	b.WriteByte('\t')
	b.WriteString(l.Notary.String())
	b.WriteByte('\t')
	b.WriteString(l.Status.String())
	if l.Status == RetryAt {
		b.WriteByte(' ')
		b.WriteString(l.Retry)
	}
	b.WriteByte(' ')
	if strings.IndexByte(l.Text, '\n') >= 0 {
		b.WriteString(strings.ReplaceAll(l.Text, "\n", "\r"))
	} else {
		b.WriteString(l.Text)
	}
	return b.String()
}

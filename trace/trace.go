// Package trace reads traffic traces: the delivery logs of a mail system,
// reduced to one Record per recipient outcome — when it happened, when its
// message arrived, its destination, what became of it, which attempt it
// was, and which delivery process made it.
//
// Two formats are read:
//
//   - Zsched: zsched's own outcome line, in the text (hclog) or JSON log
//     format (log_format = "json"), and the statelog file, whose lines carry
//     the same keys (msg rcpt to channel host ta status delay attempts next
//     text) in either layout. Lines of any other kind are skipped.
//   - Postfix: a maillog. qmgr's "from=<…>, size=…, nrcpt=… (queue active)"
//     lines open a queue id; the delivery agents' "to=<…>, relay=…, delay=…,
//     delays=a/b/c/d, dsn=…, status=…" lines (smtp, lmtp, local, virtual,
//     pipe, discard, error, retry) are its recipients' outcomes, joined to
//     it by queue id; qmgr's "removed" closes it and "status=expired"
//     expires what it still holds.
//
// A Reader streams: its memory holds one line, the records of one second
// of a log with one-second timestamps (spread over their second in line
// order, see Reader), and, for Postfix, the queue ids still open (the
// queue, not the log). A line that looks like an outcome but does not
// parse is skipped and counted in Stats, never fatal.
package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Format is a trace's log format.
type Format uint8

const (
	Auto    Format = iota // decide from the first lines (Detect)
	Zsched                // zsched's outcome log (text or JSON) or statelog
	Postfix               // a Postfix maillog
)

var formatNames = [...]string{"auto", "zsched", "postfix"}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat reads a format name: auto, zsched or postfix.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if s == n {
			return Format(i), nil
		}
	}
	return Auto, fmt.Errorf("trace: unknown format %q (auto, zsched, postfix)", s)
}

// ArrivalSlack is how far apart two records' arrival times may be and still
// be the same message: the log's own precision. zsched logs milliseconds
// and truncates the delay; Postfix logs whole seconds (spread by the
// Reader) and rounds delay= to two digits.
func (f Format) ArrivalSlack() time.Duration {
	if f == Postfix {
		return 2 * time.Second
	}
	return 2 * time.Millisecond
}

// Status is what became of a recipient in one attempt.
type Status uint8

const (
	Delivered Status = iota + 1
	Failed           // permanently: bounced, error
	Deferred         // this recipient only, for later (a 4xx to it)
	Refused          // the session failed: connect, greeting or handshake, 421 (a site failure)
	Suspended        // deferred without an attempt: the client held the destination back (Postfix's "delivery temporarily suspended")
	Expired          // given up: too long in the queue
	Gone             // no longer pending in the control file (zsched)
)

var statusNames = [...]string{"", "delivered", "failed", "deferred", "refused", "suspended", "expired", "gone"}

func (s Status) String() string {
	if int(s) < len(statusNames) && s != 0 {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Final reports whether the recipient is done with.
func (s Status) Final() bool {
	switch s {
	case Delivered, Failed, Expired, Gone:
		return true
	}
	return false
}

// Record is one recipient's outcome of one attempt.
type Record struct {
	At      time.Time // when the outcome was logged: the attempt's end
	Arrival time.Time // when its message arrived (At − the logged delay)
	Msg     string    // zsched: the control file's path; Postfix: the queue id
	Rcpt    string    // within its message: zsched's r-line offset, Postfix's address
	Channel string    // zsched's channel; Postfix's delivery agent (smtp, lmtp, local, …)
	Host    string    // the destination: zsched's host; Postfix's recipient domain
	Status  Status
	Word    string    // the log's own word: a zsched status word, Postfix's status=
	Attempt int       // 1 for the recipient's first attempt
	Next    time.Time // zsched: its retry time (zero when final or not logged)
	Agent   string    // the delivery process: zsched's ta pid, Postfix's process id
	// Job numbers delivery attempts: records of one attempt (one job line,
	// one Postfix delivery transaction) share it; it grows through the
	// trace. Suspended records, which are no attempt, each get their own.
	Job uint64
	// Service is the attempt's own time when the log tells (Postfix: delays
	// c+d, connection setup and transmission); Setup is c. Both are −1 when
	// the log does not say (zsched).
	Service time.Duration
	Setup   time.Duration
	Text    string
}

// Stats counts what a Reader has read.
type Stats struct {
	Lines     int // lines read
	Records   int // records returned
	Malformed int // outcome lines that did not parse: skipped
	// Examples are the first few malformed lines, with their line numbers
	// and why, for the operator.
	Examples []string
}

const maxExamples = 5

// maxLine bounds one line; a longer one is skipped as malformed.
const maxLine = 1 << 20

// Options tune a Reader.
type Options struct {
	// Year and Location complete syslog timestamps ("Nov 25 09:46:48"),
	// which carry neither; the year advances when the month goes back
	// (December to January). Zero values: the current year, time.Local.
	Year     int
	Location *time.Location
}

// Reader reads records from a trace.
type Reader struct {
	format Format
	br     *bufio.Reader
	stats  Stats
	parse  lineParser
	out    []Record // parsed; out[pos:] not yet returned
	pos    int
	err    error
	long   []byte // a line longer than the buffer, gathered
}

// lineParser turns lines into records, appending them to out; flush
// returns what it holds back at the end of the input.
type lineParser interface {
	line(n int, l []byte, out []Record) ([]Record, error)
	flush(out []Record) []Record
}

// NewReader returns a Reader of r in format f; Auto detects it from the
// first lines (Detect).
func NewReader(r io.Reader, f Format, o Options) *Reader {
	br := bufio.NewReaderSize(r, 64<<10)
	if f == Auto {
		f = Detect(br)
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.Year == 0 {
		o.Year = time.Now().In(o.Location).Year()
	}
	rd := &Reader{format: f, br: br}
	switch f {
	case Postfix:
		rd.parse = newPostfixParser(o)
	default:
		rd.format = Zsched
		rd.parse = newZschedParser()
	}
	return rd
}

// Format returns the reader's format (after detection).
func (r *Reader) Format() Format { return r.format }

// Detect peeks at the first lines of br (without consuming them) and
// returns Postfix when one of them is a Postfix daemon's log line, else
// Zsched.
func Detect(br *bufio.Reader) Format {
	b, _ := br.Peek(32 << 10)
	for _, l := range strings.Split(string(b), "\n") {
		if i := strings.Index(l, " postfix"); i >= 0 && strings.Contains(l[i:], "]: ") {
			return Postfix
		}
	}
	return Zsched
}

// Stats returns the counts so far.
func (r *Reader) Stats() Stats { return r.stats }

// Next returns the next record; io.EOF at the end of the trace. Any other
// error is the underlying reader's: malformed lines are never an error.
func (r *Reader) Next() (Record, error) {
	for r.pos == len(r.out) {
		if r.err != nil {
			return Record{}, r.err
		}
		r.fill()
	}
	rec := r.out[r.pos]
	r.pos++
	r.stats.Records++
	return rec, nil
}

// fill reads lines until the parser yields records or the input ends.
func (r *Reader) fill() {
	clear(r.out)
	out := r.out[:0]
	for len(out) == 0 {
		l, err := r.readLine()
		if l != nil {
			r.stats.Lines++
			var perr error
			out, perr = r.parse.line(r.stats.Lines, l, out)
			if perr != nil {
				r.malformed(perr)
			}
		}
		if err != nil {
			out = r.parse.flush(out)
			r.err = err
			break
		}
	}
	r.out, r.pos = out, 0
}

// readLine returns the next line without its line end (nil at the end of
// the input); a line longer than maxLine is counted malformed and skipped.
func (r *Reader) readLine() ([]byte, error) {
	for {
		l, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Longer than the buffer: gather it, up to maxLine.
			r.long = append(r.long[:0], l...)
			for errors.Is(err, bufio.ErrBufferFull) {
				l, err = r.br.ReadSlice('\n')
				if len(r.long) <= maxLine {
					r.long = append(r.long, l...)
				}
			}
			l = r.long
			if len(trimEOL(l)) > maxLine {
				r.stats.Lines++
				r.malformed(fmt.Errorf("trace: line %d: longer than %d bytes", r.stats.Lines, maxLine))
				if err != nil {
					return nil, err
				}
				continue
			}
		}
		if len(l) == 0 {
			return nil, err
		}
		return trimEOL(l), err
	}
}

func trimEOL(l []byte) []byte {
	for len(l) > 0 && (l[len(l)-1] == '\n' || l[len(l)-1] == '\r') {
		l = l[:len(l)-1]
	}
	return l
}

func (r *Reader) malformed(err error) {
	r.stats.Malformed++
	if len(r.stats.Examples) < maxExamples {
		r.stats.Examples = append(r.stats.Examples, err.Error())
	}
}

// lineError is a malformed line's reason.
func lineError(n int, format string, args ...any) error {
	return fmt.Errorf("trace: line %d: %s", n, fmt.Sprintf(format, args...))
}

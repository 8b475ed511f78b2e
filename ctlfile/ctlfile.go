// Package ctlfile owns ZMailer's control-file format ("transport
// specification") and the postoffice spool directories around it.
//
// It parses control files (Parse), performs the agent-side operations on
// them — locking an r line with '~' and a PID, marking its final status,
// appending d lines — (Open, Handle), and the scheduler-side ones: reading
// with stale-lock reset, quarantining malformed files, scanning, removing and
// marking diagnostics (Spool). Files are named after inode numbers, which
// the kernel reuses at once: the scheduler acts on a name only while it
// leads to the file it read (FileID), and names messages to people by
// queue ids that do not repeat (FileID.QueueID). Debris that interrupted
// writers and removals leave is swept (SweepTemp, SweepBodies,
// FinishRemovals). Spool.Enqueue writes new messages crash-safely
// as ZMailer's router lays them out, so tests, benchmarks and the `scheduler
// enqueue` command can feed the queue without a router.
//
// The byte layout is ZMailer's and is shared with unmodified ZMailer
// transport agents: recipients are identified by the byte offset of their r
// line, status marks are single bytes rewritten in place with pwrite, and d
// lines are appended with one write on an O_APPEND descriptor. Nothing here
// rewrites any other byte of a control file.
package ctlfile

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Status is the status byte in column 1 of an r line (and of a d line).
type Status byte

// The four status bytes ZMailer knows; there are no others.
const (
	Pending Status = ' ' // not yet delivered, or deferred
	Locked  Status = '~' // an agent works on it; its PID follows
	Done    Status = '+' // delivered (for a d line: reported in a DSN)
	Failed  Status = '-' // permanently failed
)

func (s Status) String() string {
	switch s {
	case Pending:
		return "pending"
	case Locked:
		return "locked"
	case Done:
		return "done"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("status(%q)", byte(s))
}

func (s Status) valid() bool {
	return s == Pending || s == Locked || s == Done || s == Failed
}

// Notify is the set of RFC 3461 NOTIFY conditions of a recipient.
// A recipient with no N line, or an N line without NOTIFY=, has NotifyFailure.
type Notify uint8

// NOTIFY conditions.
const (
	NotifyNever Notify = 1 << iota
	NotifySuccess
	NotifyFailure
	NotifyDelay
)

var notifyNames = [...]struct {
	n    Notify
	name string
}{
	{NotifyNever, "NEVER"},
	{NotifySuccess, "SUCCESS"},
	{NotifyFailure, "FAILURE"},
	{NotifyDelay, "DELAY"},
}

// String gives the set as an N line writes it, e.g. "SUCCESS,FAILURE".
func (n Notify) String() string {
	var b strings.Builder
	for _, nn := range notifyNames {
		if n&nn.n != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(nn.name)
		}
	}
	return b.String()
}

// ParseNotify parses a NOTIFY= value ("SUCCESS,FAILURE", any case).
// Unknown words are an error; an empty value is the empty set.
func ParseNotify(s string) (Notify, error) {
	var n Notify
	for _, w := range strings.Split(s, ",") {
		if w == "" {
			continue
		}
		found := false
		for _, nn := range notifyNames {
			if strings.EqualFold(w, nn.name) {
				n |= nn.n
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("ctlfile: unknown NOTIFY keyword %q", w)
		}
	}
	return n, nil
}

// Format flag bits of the '@' line.
const (
	FlagPID    uint32 = 1 // r and X lines carry a 6-column PID field after the status byte
	FlagDelay  uint32 = 2 // ... and then a 4-column delay field (unused by ZMailer)
	FlagMIME   uint32 = 4 // an M block may be present
	KnownFlags        = FlagPID | FlagDelay | FlagMIME
)

const (
	pidCols   = 6
	delayCols = 4
)

// Sender is an s line: the envelope sender in force for the r lines after it.
type Sender struct {
	Channel, Host, User string
	Priv                int
	// ErrorAddr is the e line in force when this s line was read ("" if
	// none); ZMailer's router writes one before each s line of a message
	// that is not itself a bounce.
	ErrorAddr string
}

// ETRN is a 'T domain ip' line: an ETRN request, or a turnme header.
type ETRN struct{ Domain, IP string }

// Rcpt is one r line.
type Rcpt struct {
	Offset       int64  // byte offset of the letter 'r'
	Status       Status // column 1
	PID          int    // from the PID field, 0 if blank
	Channel      string
	Host         string // first name if the router wrote a ((a)(b c)) list; lowercased
	User         string // may contain spaces (everything between host and priv)
	Priv         int
	HeaderOffset int64 // first header byte of the m block that follows this r (m offset+2); -1 if none
	NOffset      int64 // offset of this rcpt's N line, -1 if none
	Notify       Notify
	ORCPT        string
	Sender       int // index into File.Senders of the s line in force, -1 if none
}

// Diag is a d line: a diagnostic an agent (or the scheduler) appended.
type Diag struct {
	Offset       int64  // of the 'd' (0 when building a new one)
	Status       Status // Pending (not yet in a DSN) or Done
	RcptOffset   int64
	HeaderOffset int64
	NOffset      int64  // -1 when the recipient has no N line
	Time         int64  // unix seconds
	Notary       string // raw, Ctrl-A separated (see package zsched/report)
	Text         string
}

// File is a parsed control file.
type File struct {
	Name       string // base name, e.g. "12345" (may be "12345-etrn" etc.)
	Inum       int64  // leading decimal digits of Name, 0 if none
	Format     uint32
	ID         string // 'i', the body file name; "" only in a T-only file
	BodyOffset int64  // 'o'
	LogIdent   string // 'l'
	ErrorAddr  string // the first 'e' line ("" = <>, also when there is none)
	Senders    []Sender
	ETRNs      []ETRN   // 'T'
	Obsoletes  []string // 'x'
	RET        string   // 'R'
	ENVID      string   // 'n'
	Verbose    string   // 'v'
	Rcpts      []Rcpt
	Diags      []Diag
	Size       int64     // bytes parsed
	Arrival    time.Time // mtime of the queue body; set by Spool.Read, zero after Parse
	// Control and Body are the identities of the control file and the
	// body as Spool.Read found them (zero after Parse, and Body without a
	// body): Remove unlinks a name only while it leads to these.
	Control, Body FileID
}

// SyntaxError is a malformed line.
type SyntaxError struct {
	Line   int   // 1-based
	Offset int64 // of the line's first byte
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("ctlfile: line %d: %s", e.Line, e.Msg)
}

// Errors callers branch on. Errors returned by this package wrap them.
var (
	ErrUnknownFormat = errors.New("ctlfile: unknown format flags")
	ErrNoID          = errors.New("ctlfile: no i line")
	ErrNoLogIdent    = errors.New("ctlfile: no l line")
	ErrBodyMissing   = errors.New("ctlfile: queue body missing")
	ErrLiveLock      = errors.New("ctlfile: recipient locked by a live process")
	ErrNotFound      = errors.New("ctlfile: control file not found")
	ErrBadPath       = errors.New("ctlfile: bad spool path")
	ErrNotRegular    = errors.New("ctlfile: not a regular file")
	ErrTooLarge      = errors.New("ctlfile: control file too large")
	ErrChanged       = errors.New("ctlfile: no longer the file that was read")
)

// Group is the pending recipients of one (channel, host): one vertex.
type Group struct {
	Channel, Host string
	Rcpts         []int // indexes into File.Rcpts
}

// Groups returns the Pending recipients grouped per (channel, host), groups
// in order of first appearance, recipients in file order.
func (f *File) Groups() []Group {
	type key struct{ ch, host string }
	// Two passes: which group each pending recipient is in, then the
	// groups' index lists laid out in one array (each capped at its own
	// length): three allocations a file, where appending recipient by
	// recipient made one per destination and more. The scheduler groups
	// every file it reads.
	var small [16]int32
	var smallCounts [8]int
	which := small[:0]
	if len(f.Rcpts) > len(small) {
		which = make([]int32, 0, len(f.Rcpts))
	}
	var gs []Group
	counts := smallCounts[:0] // recipients per group
	var idx map[key]int
	pending := 0
	for i := range f.Rcpts {
		r := &f.Rcpts[i]
		if r.Status != Pending {
			which = append(which, -1)
			continue
		}
		pending++
		k := key{r.Channel, r.Host}
		g := -1
		// Most files have one or two destinations; a map only pays off beyond that.
		if idx == nil {
			for j := range gs {
				if gs[j].Channel == k.ch && gs[j].Host == k.host {
					g = j
					break
				}
			}
			if g < 0 && len(gs) >= 8 {
				idx = make(map[key]int, 2*len(gs))
				for j := range gs {
					idx[key{gs[j].Channel, gs[j].Host}] = j
				}
			}
		} else if j, ok := idx[k]; ok {
			g = j
		}
		if g < 0 {
			g = len(gs)
			if gs == nil {
				gs = make([]Group, 0, min(len(f.Rcpts), 8))
			}
			gs = append(gs, Group{Channel: r.Channel, Host: r.Host})
			counts = append(counts, 0)
			if idx != nil {
				idx[k] = g
			}
		}
		which = append(which, int32(g))
		counts[g]++
	}
	if len(gs) == 0 {
		return nil
	}
	all := make([]int, pending)
	off := 0
	for j := range gs {
		n := counts[j]
		gs[j].Rcpts = all[off : off : off+n]
		off += n
	}
	for i, g := range which {
		if g >= 0 {
			gs[g].Rcpts = append(gs[g].Rcpts, i)
		}
	}
	return gs
}

// RcptAt returns the index of the recipient whose r line starts at offset.
func (f *File) RcptAt(offset int64) (int, bool) {
	i := sort.Search(len(f.Rcpts), func(i int) bool { return f.Rcpts[i].Offset >= offset })
	if i < len(f.Rcpts) && f.Rcpts[i].Offset == offset {
		return i, true
	}
	return 0, false
}

// IsBounce reports whether the message is a bounce or DSN: its first s line's
// channel is "error" (ZMailer's mark for an envelope sender <>).
func (f *File) IsBounce() bool {
	return len(f.Senders) > 0 && f.Senders[0].Channel == "error"
}

// settled reports whether no recipient is pending or locked: the message
// needs no further delivery.
func (f *File) settled() bool {
	for i := range f.Rcpts {
		if st := f.Rcpts[i].Status; st == Pending || st == Locked {
			return false
		}
	}
	return true
}

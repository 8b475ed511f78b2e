package control

import (
	"strings"
	"time"
)

// Perm is a set of rights to commands: MAILQ v2's auth attributes plus
// zsched's own.
type Perm uint16

// Rights. The first five are ZMailer's auth-file tokens (SNMP, QQ, TT, ETRN,
// KILL); FLUSH, HOLD and RELOAD are zsched's. Verbs says which verb needs
// which.
const (
	PermSNMP   Perm = 1 << iota // SHOW SNMP
	PermQQ                      // SHOW QUEUE SHORT, SHOW QSHAPE
	PermTT                      // SHOW QUEUE THREADS, THREADS2, JSON, SHOW THREAD, WHY
	PermETRN                    // ETRN
	PermKill                    // KILL MSG
	PermFlush                   // FLUSH
	PermHold                    // HOLD, RELEASE
	PermReload                  // RELOAD
	PermAll    Perm = 1<<iota - 1
)

var permTokens = map[string]Perm{
	"SNMP": PermSNMP, "QQ": PermQQ, "TT": PermTT, "ETRN": PermETRN, "KILL": PermKill,
	"FLUSH": PermFlush, "HOLD": PermHold, "RELOAD": PermReload, "ALL": PermAll,
	"NONE": 0, // ZMailer's, for a line that grants nothing
}

// ParsePerm reads auth-file attribute tokens separated by blanks or commas;
// unknown tokens are returned in bad.
func ParsePerm(s string) (p Perm, bad []string) {
	for _, tok := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
		if x, ok := permTokens[strings.ToUpper(tok)]; ok {
			p |= x
		} else {
			bad = append(bad, tok)
		}
	}
	return p, bad
}

// parse splits a command line into its verb and arguments: the verb whose
// name takes the most words ("FLUSH MSGS x" is FLUSH MSGS, not FLUSH with
// two arguments). ok is false for an unknown command or a wrong number of
// arguments.
func parse(line string) (v Verb, args []string, ok bool) {
	words := strings.Fields(line)
	best := -1
	for _, cand := range Verbs {
		name := strings.Fields(cand.Name)
		if len(words) < len(name) || len(name) <= best {
			continue
		}
		match := true
		for i, w := range name {
			if !strings.EqualFold(words[i], w) {
				match = false
				break
			}
		}
		if match {
			v, best = cand, len(name)
		}
	}
	if best < 0 {
		return Verb{}, nil, false
	}
	args = words[best:]
	return v, args, len(args) >= v.MinArgs && (v.MaxArgs < 0 || len(args) <= v.MaxArgs)
}

// Reply is the answer to one command.
type Reply struct {
	OK    bool
	Text  string   // the status line after "+" or "-"
	Lines []string // the body of a listing
	Multi bool     // a listing: "+OK until LF.LF", Lines, "."
	// stream, when set, produces the listing's lines after the loop has
	// answered (Stream, stream.go).
	stream func(emit func(string) bool) error
}

// OK is a one-line success reply.
func OK(text string) Reply { return Reply{OK: true, Text: text} }

// Fail is a one-line failure reply.
func Fail(text string) Reply { return Reply{Text: text} }

// Listing is a multi-line success reply.
func Listing(lines []string) Reply { return Reply{OK: true, Multi: true, Lines: lines} }

// multiHead is the status line of a listing, as MAILQ v2.
const multiHead = "+OK until LF.LF"

// encode writes r as protocol lines, without line ends.
func (r Reply) encode() []string {
	if r.Multi {
		out := make([]string, 0, len(r.Lines)+2)
		out = append(out, multiHead)
		for _, l := range r.Lines {
			// One reply line per element: embedded newlines would break
			// the framing.
			for _, part := range strings.Split(l, "\n") {
				if strings.HasPrefix(part, ".") {
					part = "." + part
				}
				out = append(out, part)
			}
		}
		return append(out, ".")
	}
	text := strings.ReplaceAll(r.Text, "\n", " ")
	if r.OK {
		if text == "" || strings.HasPrefix(text, "OK") {
			return []string{"+" + text}
		}
		return []string{"+OK " + text}
	}
	return []string{"-" + text}
}

// Peer is who sent a request.
type Peer struct {
	Network string // "unix" or "tcp"
	UID     int    // unix: from SO_PEERCRED; -1 for tcp
	GID     int
	PID     int
	Addr    string // tcp: the client's address
	User    string // tcp: the AUTH user
}

// Request is one command for the scheduler's loop, which must call Respond
// exactly once.
type Request struct {
	Verb string   // canonical: one of the Verb* constants
	Args []string // the words after the verb
	Line string   // the line as received
	Peer Peer
	// Received is when the server read the line: the loop's wait for it
	// is the time from here to when the loop takes it.
	Received time.Time
	reply    chan Reply
}

// Respond sends the reply; it never blocks.
func (r *Request) Respond(rep Reply) {
	select {
	case r.reply <- rep:
	default:
	}
}

package control

import (
	"strings"
	"time"
)

// Perm is a set of rights to commands: MAILQ v2's auth attributes plus
// zsched's own.
type Perm uint16

// Rights. The first five are ZMailer's auth-file tokens (SNMP, QQ, TT, ETRN,
// KILL); FLUSH, HOLD and RELOAD are zsched's.
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

// Verb is a command the protocol knows: its words, the right it needs and
// how many arguments it takes.
type Verb struct {
	Name    string // canonical words, e.g. "SHOW QUEUE THREADS"
	Need    Perm   // 0: any client that got in
	MinArgs int
	MaxArgs int // -1: any
	Help    string
}

// Verbs are every command; parse takes the one with the longest name that
// a line starts with.
var Verbs = []Verb{
	{"SHOW QUEUE THREADS2", PermTT, 0, 0, "SHOW QUEUE THREADS2: one tab-separated line per thread"},
	{"SHOW QUEUE THREADS", PermTT, 0, 0, "SHOW QUEUE THREADS: the thread report (mailq, mailq -Q)"},
	{"SHOW QUEUE SHORT", PermQQ, 0, 0, "SHOW QUEUE SHORT: ring headers and summaries (mailq -QQ)"},
	{"SHOW QUEUE JSON", PermTT, 0, 0, "SHOW QUEUE JSON: rings, threads and agents as one JSON document (mailq -json)"},
	{"SHOW THREAD", PermTT, 2, 2, "SHOW THREAD channel host: one destination's recipients (mailq -dest channel/host)"},
	{"SHOW COUNTERS", 0, 0, 0, "SHOW COUNTERS: running totals and gauges (mailq -counters)"},
	{"SHOW QSHAPE", PermQQ, 0, 1, "SHOW QSHAPE [N]: recipients by host and age, top N hosts (qshape)"},
	{"SHOW SNMP", PermSNMP, 0, 0, "SHOW SNMP: the two global summary lines (mailq -QQQ)"},
	{"ETRN", PermETRN, 1, -1, "ETRN host|@domain [info]: start queueonly threads for it (etrn)"},
	{"KILL MSG", PermKill, 1, 1, "KILL MSG id: remove a message and its files (kill)"},
	{"FLUSH", PermFlush, 0, 1, "FLUSH [channel/host]: retry now, ending back-offs; globs allowed (flush)"},
	{"HOLD THREAD", PermHold, 1, 1, "HOLD THREAD channel/host: feed nothing to a destination (hold)"},
	{"HOLD MSG", PermHold, 1, 1, "HOLD MSG id: feed nothing of a message (hold)"},
	{"RELEASE THREAD", PermHold, 1, 1, "RELEASE THREAD channel/host: end a destination hold (release)"},
	{"RELEASE MSG", PermHold, 1, 1, "RELEASE MSG id: end a message hold (release)"},
	{"WHY", PermTT, 1, 1, "WHY id: why each recipient of a message is waiting (why)"},
	{"RELOAD", PermReload, 0, 0, "RELOAD: re-read the configuration (reload)"},
	// Issue 17: the whole spool, bulk operations and postcat.
	{"SHOW QUEUE MESSAGES", PermTT, 0, -1, "SHOW QUEUE MESSAGES [json] [held] [deferred] [dest=GLOB] [from=ADDR]: every message in the spool (queue)"},
	{"SHOW MSG", PermTT, 1, 2, "SHOW MSG id [body]: the control file decoded, headers, body (cat)"},
	{"KILL MSGS", PermKill, 1, -1, "KILL MSGS [dry] [all] [dest=GLOB] [from=ADDR] [id...]: kill many (kill)"},
	{"HOLD MSGS", PermHold, 1, -1, "HOLD MSGS [dry] [dest=GLOB] [from=ADDR] [id...]: hold many messages (hold)"},
	{"RELEASE MSGS", PermHold, 1, -1, "RELEASE MSGS [dry] [all] [dest=GLOB] [from=ADDR] [id...]: release many (release)"},
	{"FLUSH MSGS", PermFlush, 1, -1, "FLUSH MSGS [dry] [dest=GLOB] [from=ADDR] [id...]: retry many now (flush)"},
}

// sessionHelp is HELP's text for the words every session takes.
var sessionHelp = []string{
	"AUTH user authenticator: log in (TCP listener; MD5 of the challenge line and the password)",
	"HELP: this list",
	"QUIT: end the session (EXIT too)",
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
	Verb string   // canonical, e.g. "KILL MSG"
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

// Package dsn owns delivery status notifications: it turns the d lines of a
// control file into RFC 3464 reports (multipart/report with a human part, a
// message/delivery-status part and the original message or its headers),
// applying each recipient's NOTIFY (RFC 3461; default FAILURE), RET
// (default FULL, as ZMailer) and the double-fault rule (a bounce that
// bounces goes to the postmaster; NEVER does not stop that).
//
// Build is pure: it reads nothing and writes nothing, so reports can be
// built and checked without a spool. The caller (the daemon) reads the
// control file and the body, queues the reports, then marks the d lines
// Build says it has dealt with — in that order, so that a crash can repeat
// a report but never lose one.
package dsn

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"zsched/ctlfile"
	"zsched/report"
)

// ErrNoFile is returned by Build for a nil file.
var ErrNoFile = errors.New("dsn: no control file")

// DefaultFullLimit is how much of the original message a report returns
// with RET=FULL before it falls back to the headers (Postfix's
// bounce_size_limit is 50000; larger here since ZMailer returned everything).
const DefaultFullLimit = 1 << 20

// DoubleFaultHeader marks a report sent to the postmaster about a bounce
// that bounced. If that report fails too, it is dropped with a log line
// instead of being reported again: the postmaster cannot be reached, and a
// report about it would loop.
const DoubleFaultHeader = "X-Zsched-Double-Fault"

// Original is the message the d lines are about.
type Original struct {
	// Header is its header block (the control file's m block, see
	// Headers), LF line ends, without the blank line that ends it.
	Header []byte
	// Body is the message body (the queue file from its 'o' offset); nil
	// when it cannot be had, and the report then returns the headers.
	Body []byte
}

// Options set what Build cannot learn from the file.
type Options struct {
	MTA        string    // this host's name: Reporting-MTA, From: MAILER-DAEMON@MTA
	Postmaster string    // where double faults go; default "postmaster"
	Now        time.Time // the report's Date
	FullLimit  int       // RET=FULL size limit; 0 means DefaultFullLimit
}

// Report is one notification to queue.
type Report struct {
	// To is the envelope recipient: the message's error address, or the
	// postmaster for a double fault or a message without a usable one.
	To          string
	DoubleFault bool
	Header      []byte // LF line ends, without the blank line (ctlfile.Message.Header)
	Body        []byte
	// Actions counts the recipients reported, by action.
	Actions map[string]int
}

// Message is the report as one RFC 5322 message: header, blank line, body.
func (r *Report) Message() []byte {
	b := make([]byte, 0, len(r.Header)+1+len(r.Body))
	return append(append(append(b, r.Header...), '\n'), r.Body...)
}

// Result is what Build makes of a file's d lines.
type Result struct {
	// Reports are the notifications to queue: none when NOTIFY asks for
	// nothing, one per distinct error address otherwise (ZMailer's files
	// have one; a file with several senders may have more).
	Reports []Report
	// Done are the offsets of every d line still pending in the file,
	// reported or left out by NOTIFY: mark them '+' once the reports are
	// safely queued.
	Done []int64
	// Dropped says why pending d lines were not reported although a
	// report would have been due (a failed double-fault report).
	Dropped string
}

// Actions of RFC 3464 §2.3.3.
const (
	Failed    = "failed"
	Delayed   = "delayed"
	Delivered = "delivered"
	Relayed   = "relayed"
	Expanded  = "expanded"
)

// entry is one d line selected for a report.
type entry struct {
	d      ctlfile.Diag
	rcpt   *ctlfile.Rcpt // nil when the offset names no r line
	n      report.Notary
	action string
	to     string
}

// Build turns the pending d lines of f into reports.
func Build(f *ctlfile.File, orig Original, opt Options) (Result, error) {
	if f == nil {
		return Result{}, ErrNoFile
	}
	if opt.Postmaster == "" {
		opt.Postmaster = "postmaster"
	}
	if opt.MTA == "" {
		opt.MTA = "localhost"
	}
	if opt.FullLimit <= 0 {
		opt.FullLimit = DefaultFullLimit
	}
	var res Result
	bounce := f.IsBounce()
	tripleFault := bounce && hasField(orig.Header, DoubleFaultHeader)
	var picked []entry
	for _, d := range f.Diags {
		if d.Status != ctlfile.Pending {
			continue
		}
		res.Done = append(res.Done, d.Offset)
		e := entry{d: d, n: report.ParseNotary(d.Notary)}
		if i, ok := f.RcptAt(d.RcptOffset); ok {
			e.rcpt = &f.Rcpts[i]
		}
		e.action = action(e.n.Action, e.rcpt)
		switch {
		case bounce:
			// A bounce that bounces: the postmaster hears of failures,
			// whatever NOTIFY says; nothing else is worth a report.
			if e.action != Failed {
				continue
			}
			if tripleFault {
				res.Dropped = "a double-fault report to the postmaster failed; not reported again"
				continue
			}
			e.to = opt.Postmaster
		case !wanted(e.action, e.rcpt):
			continue
		default:
			e.to = returnPath(f, e.rcpt, opt.Postmaster)
		}
		picked = append(picked, e)
	}
	// One report per error address, in the order of first appearance.
	var order []string
	groups := make(map[string][]entry)
	for _, e := range picked {
		if _, ok := groups[e.to]; !ok {
			order = append(order, e.to)
		}
		groups[e.to] = append(groups[e.to], e)
	}
	for k, to := range order {
		res.Reports = append(res.Reports, build(f, orig, opt, to, bounce, groups[to], k))
	}
	return res, nil
}

// action normalises a notary action; an empty one (an agent or the core
// wrote no notary) is read from the recipient's status byte.
func action(a string, r *ctlfile.Rcpt) string {
	switch a = strings.ToLower(strings.TrimSpace(a)); a {
	case Failed, Delayed, Delivered, Relayed, Expanded:
		return a
	case "":
		if r != nil && r.Status == ctlfile.Done {
			return Delivered
		}
	}
	return Failed
}

// wanted applies the recipient's NOTIFY (RFC 3461 §4.1); a d line that
// names no recipient is reported as the default, FAILURE, would.
func wanted(action string, r *ctlfile.Rcpt) bool {
	n := ctlfile.NotifyFailure
	if r != nil {
		n = r.Notify
	}
	if n&ctlfile.NotifyNever != 0 {
		return false
	}
	switch action {
	case Failed:
		return n&ctlfile.NotifyFailure != 0
	case Delayed:
		return n&ctlfile.NotifyDelay != 0
	default:
		return n&ctlfile.NotifySuccess != 0
	}
}

// returnPath is where a report about r goes: the error address in force for
// its sender, else the file's, else the sender's own address. An empty one
// or one that names a program or a file (ZMailer: '|', '/') goes to the
// postmaster instead.
func returnPath(f *ctlfile.File, r *ctlfile.Rcpt, postmaster string) string {
	var addr string
	var s *ctlfile.Sender
	if r != nil && r.Sender >= 0 && r.Sender < len(f.Senders) {
		s = &f.Senders[r.Sender]
	} else if len(f.Senders) > 0 {
		s = &f.Senders[0]
	}
	if s != nil {
		addr = s.ErrorAddr
	}
	if addr == "" {
		addr = f.ErrorAddr
	}
	if addr == "" && s != nil && s.Channel != "error" && s.User != "-" {
		addr = s.User
	}
	addr = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(addr), "<"), ">")
	if addr == "" || strings.HasPrefix(addr, "|") || strings.Contains(addr, "/") ||
		strings.ContainsAny(addr, " \t\r\n\x00") {
		return postmaster
	}
	return addr
}

// build writes one report.
func build(f *ctlfile.File, orig Original, opt Options, to string, doubleFault bool, es []entry, k int) Report {
	rep := Report{To: to, DoubleFault: doubleFault, Actions: make(map[string]int)}
	for _, e := range es {
		rep.Actions[e.action]++
	}
	failed := rep.Actions[Failed] > 0

	// Third part: the message, or its headers (RFC 3462 text/rfc822-headers).
	// RFC 3461 §4.3: RET applies to failures; a report of no failure
	// returns the headers only. Without RET, ZMailer returns it all.
	full := failed && !strings.EqualFold(f.RET, "HDRS")
	var note string
	if full && orig.Body == nil {
		full, note = false, "The message body could not be read; only its headers are returned."
	}
	if full && len(orig.Header)+1+len(orig.Body) > opt.FullLimit {
		full, note = false, fmt.Sprintf("The message is larger than %d bytes; only its headers are returned.", opt.FullLimit)
	}
	original := append([]byte(nil), orig.Header...)
	if len(original) > 0 && original[len(original)-1] != '\n' {
		original = append(original, '\n')
	}
	if full {
		original = append(append(original, '\n'), orig.Body...)
	}

	human := humanPart(f, opt, rep, es, note)
	status := statusPart(f, opt, es)
	eight := has8bit(original) || has8bit(human) || has8bit(status)

	boundary := pickBoundary(f, opt, k, human, status, original)
	var body bytes.Buffer
	body.WriteString("This is a MIME-encapsulated message.\n\n")
	body.WriteString("--" + boundary + "\n")
	if has8bit(human) {
		body.WriteString("Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: 8bit\n")
	} else {
		body.WriteString("Content-Type: text/plain; charset=us-ascii\n")
	}
	body.WriteString("Content-Description: Notification\n\n")
	body.Write(human)
	body.WriteString("\n--" + boundary + "\n")
	body.WriteString("Content-Type: message/delivery-status\n")
	if has8bit(status) {
		body.WriteString("Content-Transfer-Encoding: 8bit\n")
	}
	body.WriteString("Content-Description: Delivery report\n\n")
	body.Write(status)
	body.WriteString("\n--" + boundary + "\n")
	if full {
		body.WriteString("Content-Type: message/rfc822\nContent-Description: Undelivered message\n")
	} else {
		body.WriteString("Content-Type: text/rfc822-headers\nContent-Description: Message headers\n")
	}
	if has8bit(original) {
		body.WriteString("Content-Transfer-Encoding: 8bit\n")
	}
	body.WriteString("\n")
	body.Write(original)
	if len(original) > 0 && original[len(original)-1] != '\n' {
		body.WriteString("\n")
	}
	body.WriteString("\n--" + boundary + "--\n")

	var h bytes.Buffer
	field(&h, "From", "Mail Delivery System <MAILER-DAEMON@"+opt.MTA+">")
	rcpt := to
	if !strings.Contains(rcpt, "@") {
		rcpt += "@" + opt.MTA
	}
	field(&h, "To", "<"+rcpt+">")
	field(&h, "Subject", subject(rep))
	field(&h, "Date", opt.Now.Format(time.RFC1123Z))
	field(&h, "Message-ID", fmt.Sprintf("<%d.%s.%d.dsn@%s>", opt.Now.Unix(), token(f.Name), k, opt.MTA))
	if id := strings.TrimSpace(f.LogIdent); strings.HasPrefix(id, "<") && strings.HasSuffix(id, ">") && !strings.ContainsAny(id, " \t") {
		field(&h, "In-Reply-To", id)
		field(&h, "References", id)
	}
	field(&h, "Auto-Submitted", "auto-replied")
	if doubleFault {
		field(&h, DoubleFaultHeader, "yes")
	}
	field(&h, "MIME-Version", "1.0")
	field(&h, "Content-Type", `multipart/report; report-type=delivery-status; boundary="`+boundary+`"`)
	if eight {
		field(&h, "Content-Transfer-Encoding", "8bit")
	}
	rep.Header = h.Bytes()
	rep.Body = body.Bytes()
	return rep
}

func subject(r Report) string {
	var s string
	switch {
	case r.DoubleFault:
		s = "Postmaster Copy: Undelivered Mail"
	case r.Actions[Failed] > 0:
		s = "Undelivered Mail Returned to Sender"
	case r.Actions[Delayed] > 0:
		s = "Delayed Mail (still being retried)"
	default:
		s = "Successful Mail Delivery Report"
	}
	// ZMailer's counts, e.g. [FAILED(2),DELAYED(1)].
	var counts []string
	for _, a := range []string{Failed, Delayed, Delivered, Relayed, Expanded} {
		if n := r.Actions[a]; n > 0 {
			counts = append(counts, strings.ToUpper(a)+"("+strconv.Itoa(n)+")")
		}
	}
	return s + " [" + strings.Join(counts, ",") + "]"
}

func humanPart(f *ctlfile.File, opt Options, rep Report, es []entry, note string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "This is the mail system at host %s.\n\n", opt.MTA)
	if rep.DoubleFault {
		b.WriteString("A delivery status notification (a message with the null sender)\n" +
			"could not be delivered. It is reported here to the postmaster.\n\n")
	}
	sections := []struct{ action, intro string }{
		{Failed, "Your message could not be delivered to the following recipients.\nThe mail system has given up on them:"},
		{Delayed, "Your message has not yet been delivered to the following recipients.\nThe mail system is still trying; you need not send it again:"},
		{Delivered, "Your message was delivered to the following recipients:"},
		{Relayed, "Your message was relayed to the following recipients, to a system\nthat may not send further delivery status notifications:"},
		{Expanded, "Your message was delivered to the following recipients, which are\nlists or aliases; they forward it to their members:"},
	}
	for _, sec := range sections {
		if rep.Actions[sec.action] == 0 {
			continue
		}
		b.WriteString(sec.intro + "\n\n")
		for _, e := range es {
			if e.action != sec.action {
				continue
			}
			l := "<" + finalAddr(e) + ">"
			if d := e.n.Diagnostic; d != "" {
				l += ": " + d
			}
			wrap(&b, "  ", l)
			// The agent's text: a transcript whose lines ZMailer separates by CR.
			for _, l := range strings.FieldsFunc(e.d.Text, func(r rune) bool { return r == '\r' || r == '\n' }) {
				wrap(&b, "      ", l)
			}
			b.WriteString("\n")
		}
	}
	if note != "" {
		b.WriteString(note + "\n")
	}
	return b.Bytes()
}

// wrap writes text as lines of at most about 76 columns after indent,
// broken at blanks; a longer word is cut at maxField bytes.
func wrap(b *bytes.Buffer, indent, text string) {
	words := strings.Fields(clean(text))
	col := 0
	for _, w := range words {
		if len(w) > maxField {
			w = cut(w, maxField) + "..."
		}
		if col > 0 && col+1+len(w) > 76 {
			b.WriteString("\n")
			col = 0
		}
		if col == 0 {
			b.WriteString(indent)
			col = len(indent)
		} else {
			b.WriteString(" ")
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	if col > 0 {
		b.WriteString("\n")
	}
}

// statusPart writes the message/delivery-status body (RFC 3464 §2.1).
func statusPart(f *ctlfile.File, opt Options, es []entry) []byte {
	var b bytes.Buffer
	field(&b, "Reporting-MTA", "dns; "+opt.MTA)
	field(&b, "X-Zsched-Queue-ID", f.Name)
	if f.ENVID != "" {
		field(&b, "Original-Envelope-Id", xtext(f.ENVID))
	}
	if !f.Arrival.IsZero() {
		field(&b, "Arrival-Date", f.Arrival.Format(time.RFC1123Z))
	}
	for _, e := range es {
		b.WriteString("\n")
		if e.rcpt != nil && e.rcpt.ORCPT != "" {
			field(&b, "Original-Recipient", typed(xtext(e.rcpt.ORCPT)))
		}
		field(&b, "Final-Recipient", typed(finalAddr(e)))
		field(&b, "Action", e.action)
		field(&b, "Status", status(e.n.Status, e.action))
		if m := strings.TrimSpace(e.n.RemoteMTA); m != "" {
			field(&b, "Remote-MTA", typedWith(m, "dns"))
		}
		diag := strings.TrimSpace(e.n.Diagnostic)
		if diag == "" {
			diag = firstLine(e.d.Text)
		}
		if diag != "" {
			field(&b, "Diagnostic-Code", typedWith(diag, "X-Zsched"))
		}
		if e.d.Time > 0 {
			field(&b, "Last-Attempt-Date", time.Unix(e.d.Time, 0).In(opt.Now.Location()).Format(time.RFC1123Z))
		}
	}
	return b.Bytes()
}

// finalAddr is the recipient a d line reports: the notary's, else the r
// line's (ZMailer's expiry writes a marker meaning just that).
func finalAddr(e entry) string {
	if a := strings.TrimSpace(e.n.Recipient); a != "" && a != "deferred" {
		return a
	}
	if e.rcpt != nil {
		return e.rcpt.User
	}
	return "unknown"
}

// typed gives an address its RFC 3464 address-type: "rfc822; a@b".
func typed(addr string) string { return typedWith(addr, "rfc822") }

// typedWith keeps a value that already names its type ("smtp; 550 …",
// "rfc822;a@b") and prefixes the others with def.
func typedWith(v, def string) string {
	if t, rest, ok := strings.Cut(v, ";"); ok && isAtom(strings.TrimSpace(t)) {
		return strings.TrimSpace(t) + "; " + strings.TrimSpace(rest)
	}
	return def + "; " + v
}

func isAtom(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// status returns an RFC 3463 code consistent with the action, keeping the
// agent's comment: "5.1.1 (User does not exist)". Postfix, too, reports an
// expired recipient as failed with the 4.x.x of its last deferral.
func status(s, action string) string {
	s = strings.TrimSpace(s)
	code, comment, _ := strings.Cut(s, " ")
	if !isCode(code) {
		code, comment = "", ""
	}
	switch action {
	case Failed:
		if code == "" || code[0] == '2' {
			code = "5.0.0"
		}
	case Delayed:
		if code == "" {
			code = "4.0.0"
		} else if code[0] != '4' {
			code = "4" + code[1:]
		}
	default:
		if code == "" || code[0] != '2' {
			code, comment = "2.0.0", ""
		}
	}
	if comment = strings.TrimSpace(comment); comment != "" {
		return code + " " + comment
	}
	return code
}

// isCode checks class.subject.detail (RFC 3463): a digit 2, 4 or 5, then
// two groups of 1–3 digits.
func isCode(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || len(parts[0]) != 1 || !strings.ContainsAny(parts[0], "245") {
		return false
	}
	for _, p := range parts[1:] {
		if len(p) < 1 || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

func firstLine(s string) string {
	for _, l := range strings.FieldsFunc(s, func(r rune) bool { return r == '\r' || r == '\n' }) {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// xtext decodes RFC 3461 xtext ("+2B" is '+'); bad escapes stay as they are.
func xtext(s string) string {
	if !strings.Contains(s, "+") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '+' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// maxField bounds a field's value: agents' texts reach 64 KiB and a mail
// line may not exceed 998 bytes.
const maxField = 900

// field writes "Name: value\n", the value cleaned of control characters,
// cut to maxField bytes and folded at blanks before 78 columns where it can.
func field(b *bytes.Buffer, name, value string) {
	value = clean(value)
	if len(value) > maxField {
		value = cut(value, maxField) + "..."
	}
	line := name + ":"
	col := len(line)
	b.WriteString(line)
	for i, w := range strings.Split(value, " ") {
		if w == "" && i > 0 {
			continue
		}
		if col+1+len(w) > 78 && col > len(name)+1 {
			b.WriteString("\n")
			col = 0
		}
		b.WriteString(" " + w)
		col += 1 + len(w)
	}
	b.WriteString("\n")
}

// token keeps the letters, digits, '-' and '.' of a file name, for use in
// a boundary or a Message-ID.
func token(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return -1
	}, s)
}

// cut returns s cut to at most n bytes, not inside a UTF-8 sequence.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clean replaces control characters (CR, LF, TAB, Ctrl-A…) with blanks.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func has8bit(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return true
		}
	}
	return false
}

// hasField reports whether a header block has a field called name.
func hasField(h []byte, name string) bool {
	for _, l := range bytes.Split(h, []byte("\n")) {
		if k, _, ok := bytes.Cut(l, []byte(":")); ok && strings.EqualFold(strings.TrimSpace(string(k)), name) {
			return true
		}
	}
	return false
}

// pickBoundary chooses a boundary that occurs in none of the parts.
func pickBoundary(f *ctlfile.File, opt Options, k int, parts ...[]byte) string {
	for n := 0; ; n++ {
		// "=_" cannot occur in quoted-printable text; the rest makes it
		// unique to this report.
		b := fmt.Sprintf("=_zsched.%d.%.20s.%d", opt.Now.Unix(), token(f.Name), k)
		if n > 0 {
			b += "." + strconv.Itoa(n)
		}
		clash := false
		for _, p := range parts {
			if bytes.Contains(p, []byte(b)) {
				clash = true
				break
			}
		}
		if !clash {
			return b
		}
	}
}

// Headers returns the header block of an m block at offset in a control
// file's bytes (ctlfile.Rcpt.HeaderOffset): up to the blank line that ends
// it, without that blank line. It is nil for an offset outside data.
func Headers(ctl []byte, offset int64) []byte {
	if offset < 0 || offset >= int64(len(ctl)) {
		return nil
	}
	h := ctl[offset:]
	if h[0] == '\n' {
		return nil
	}
	if i := bytes.Index(h, []byte("\n\n")); i >= 0 {
		h = h[:i+1]
	}
	return h
}

package trace

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// postfixParser reads a Postfix maillog:
//
//	Nov 25 09:46:48 client postfix/qmgr[22454]: 918C69847E8: from=<s@e.test>, size=279, nrcpt=2 (queue active)
//	Nov 25 09:46:49 client postfix/smtp[22460]: 918C69847E8: to=<u0.0@limited.test>, relay=127.0.0.1[127.0.0.1]:42667, delay=0.69, delays=0.04/0.05/0.25/0.35, dsn=2.0.0, status=sent (250 2.0.0 Ok: queued as 2CB799847FC)
//	Nov 25 09:46:49 client postfix/qmgr[22454]: 918C69847E8: removed
//
// Timestamps are syslog's ("Nov 25 09:46:48", whole seconds) or RFC 3339
// (rsyslog's high-precision format). Whole seconds are too coarse for
// sessions of a fraction of a second, so the lines of one second are held
// back until the next second begins and then spread over it in line order:
// the k-th of n lines in a second is placed at (k+½)/n. A delivery line is
// placed once more from its message's last "(queue active)" line, which
// Postfix wrote b+c+d (delays=) before it: the delivery's time is the mean
// of the two places, kept within both lines' seconds (shifted by b+c+d,
// give or take the rounding of the printed delays). delay=, which Postfix
// measures precisely, then places each message's arrival.
type postfixParser struct {
	opt   Options
	year  int
	month time.Month
	qids  map[string]*qidState
	jobs  map[string]postfixJob // per process: its current delivery
	// channels maps a destination to the delivery agent last seen
	// delivering there: error, retry and qmgr log deferrals on its behalf.
	channels map[string]string
	nextID   uint64
	sec      time.Time // the second being held back
	secLines int       // lines stamped with it
	held     []heldRecord
}

// qidState is what the log said so far of one queue id still in the queue.
type qidState struct {
	arrival time.Time
	rcpts   map[string]*rcptState
	// active is where its last "(queue active)" line was placed, and
	// that line's second; zero until one was seen.
	active, activeSec time.Time
}

type rcptState struct {
	attempts int
	final    bool
	channel  string
	host     string
}

// postfixJob identifies one delivery transaction of a delivery agent
// process: its records share the queue id and the delays.
type postfixJob struct {
	qid, delays string
	id          uint64
}

// heldRecord is a record (or, with mark, a "(queue active)" line) waiting
// for its second's line count.
type heldRecord struct {
	rec   Record
	line  int           // its line's index within the second
	delay time.Duration // delay=, to place the arrival; -1 unknown
	qs    *qidState
	mark  bool // a "(queue active)" line of qs, not a record
	// since is b+c+d of delays=: from the message's last queue active
	// line to the delivery; slack is its rounding. since < 0: unknown.
	since, slack time.Duration
}

func newPostfixParser(o Options) *postfixParser {
	return &postfixParser{opt: o, year: o.Year, qids: make(map[string]*qidState), jobs: make(map[string]postfixJob),
		channels: make(map[string]string)}
}

// postfixLine is a maillog line cut into its parts.
type postfixLine struct {
	at      time.Time
	precise bool   // the timestamp has a fraction of a second
	prog    string // "smtp", "qmgr", …
	pid     string
	qid     string
	text    string // after "QID: "
}

func (p *postfixParser) line(n int, l []byte, out []Record) ([]Record, error) {
	s := string(l)
	if !strings.Contains(s, "postfix") {
		return out, nil
	}
	var pl postfixLine
	if !p.split(s, &pl) {
		return out, nil
	}
	if !pl.precise {
		if !pl.at.Equal(p.sec) {
			out = p.release(out)
			p.sec = pl.at
		}
		p.secLines++
	}
	if pl.qid == "" {
		return out, nil
	}
	switch {
	case strings.HasPrefix(pl.text, "to=<"):
		return p.delivery(n, &pl, out)
	case pl.prog == "qmgr" && pl.text == "removed":
		delete(p.qids, pl.qid)
	case pl.prog == "qmgr" && strings.HasPrefix(pl.text, "from=<"):
		if strings.Contains(pl.text, "status=expired") {
			return p.expire(&pl, out), nil
		}
		if strings.HasSuffix(pl.text, "(queue active)") {
			qs := p.qid(pl.qid)
			if pl.precise {
				qs.active, qs.activeSec = pl.at, pl.at
			} else {
				p.held = append(p.held, heldRecord{line: p.secLines - 1, qs: qs, mark: true})
			}
		}
	}
	return out, nil
}

// flush releases the held second at the end of the input.
func (p *postfixParser) flush(out []Record) []Record { return p.release(out) }

// qid returns the state of an open queue id, opening it if need be.
func (p *postfixParser) qid(id string) *qidState {
	qs := p.qids[id]
	if qs == nil {
		qs = &qidState{rcpts: make(map[string]*rcptState)}
		p.qids[id] = qs
	}
	return qs
}

// split cuts a line into timestamp, program, pid, queue id and text; false
// for lines of another shape.
func (p *postfixParser) split(s string, pl *postfixLine) bool {
	rest, ok := p.timestamp(s, pl)
	if !ok {
		return false
	}
	// The host name, then "postfix/smtp[22460]: ".
	sp := strings.IndexByte(rest, ' ')
	if sp < 0 {
		return false
	}
	rest = rest[sp+1:]
	colon := strings.Index(rest, ": ")
	if colon < 0 {
		return false
	}
	tag := rest[:colon]
	rest = rest[colon+2:]
	lb := strings.IndexByte(tag, '[')
	if lb < 0 || !strings.HasSuffix(tag, "]") {
		return false
	}
	name := tag[:lb]
	if !strings.HasPrefix(name, "postfix") {
		return false
	}
	pl.prog = name[strings.LastIndexByte(name, '/')+1:]
	pl.pid = tag[lb+1 : len(tag)-1]
	// "QID: text"; other messages (warnings, connect from) have no queue id.
	if c := strings.Index(rest, ": "); c > 0 && queueID(rest[:c]) {
		pl.qid, pl.text = rest[:c], rest[c+2:]
	} else {
		pl.text = rest
	}
	return true
}

// queueID reports whether s looks like a Postfix queue id: short (hex) or
// long (enable_long_queue_ids), letters and digits only.
func queueID(s string) bool {
	if len(s) < 5 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

var months = map[string]time.Month{
	"Jan": 1, "Feb": 2, "Mar": 3, "Apr": 4, "May": 5, "Jun": 6,
	"Jul": 7, "Aug": 8, "Sep": 9, "Oct": 10, "Nov": 11, "Dec": 12,
}

// timestamp reads a line's timestamp and returns the rest of the line.
func (p *postfixParser) timestamp(s string, pl *postfixLine) (string, bool) {
	if len(s) > 0 && s[0] >= '0' && s[0] <= '9' {
		sp := strings.IndexByte(s, ' ')
		if sp < 0 {
			return "", false
		}
		t, err := time.Parse(time.RFC3339Nano, s[:sp])
		if err != nil {
			return "", false
		}
		pl.at = t
		pl.precise = t.Nanosecond() != 0 || strings.Contains(s[:sp], ".")
		return s[sp+1:], true
	}
	// "Nov 25 09:46:48" or "Nov  5 09:46:48", perhaps with a fraction.
	if len(s) < 16 {
		return "", false
	}
	mon, ok := months[s[:3]]
	if !ok || s[3] != ' ' {
		return "", false
	}
	rest := strings.TrimLeft(s[4:], " ")
	sp := strings.IndexByte(rest, ' ')
	if sp < 0 {
		return "", false
	}
	day, err := strconv.Atoi(rest[:sp])
	if err != nil || day < 1 || day > 31 {
		return "", false
	}
	rest = rest[sp+1:]
	sp = strings.IndexByte(rest, ' ')
	if sp < 8 {
		return "", false
	}
	clock := rest[:sp]
	if clock[2] != ':' || clock[5] != ':' {
		return "", false
	}
	hh, e1 := strconv.Atoi(clock[0:2])
	mm, e2 := strconv.Atoi(clock[3:5])
	ss, e3 := strconv.Atoi(clock[6:8])
	if e1 != nil || e2 != nil || e3 != nil || hh > 23 || mm > 59 || ss > 60 {
		return "", false
	}
	var nsec int
	if len(clock) > 9 && clock[8] == '.' {
		frac := clock[9:]
		if len(frac) > 9 {
			frac = frac[:9]
		}
		f, err := strconv.Atoi(frac)
		if err != nil || f < 0 {
			return "", false
		}
		for i := len(frac); i < 9; i++ {
			f *= 10
		}
		nsec, pl.precise = f, true
	} else if len(clock) != 8 {
		return "", false
	}
	// Syslog omits the year: a month earlier than the last one is the
	// next year's.
	if p.month != 0 && mon < p.month {
		p.year++
	}
	p.month = mon
	pl.at = time.Date(p.year, mon, day, hh, mm, ss, nsec, p.opt.Location)
	return rest[sp+1:], true
}

// release places the held lines in their second, in order, and appends
// the records to out.
func (p *postfixParser) release(out []Record) []Record {
	n := p.secLines
	for _, h := range p.held {
		frac := (float64(h.line) + 0.5) / float64(max(n, 1))
		at := p.sec.Add(time.Duration(frac * float64(time.Second)))
		if h.mark {
			h.qs.active, h.qs.activeSec = at, p.sec
			continue
		}
		h.rec.At = p.anchor(h, at)
		out = p.place(h, out)
	}
	clear(p.held)
	p.held = p.held[:0]
	p.secLines = 0
	return out
}

// anchor refines a delivery's place at from its message's queue active
// line, b+c+d earlier.
func (p *postfixParser) anchor(h heldRecord, at time.Time) time.Time {
	qs := h.qs
	if h.since < 0 || qs == nil || qs.active.IsZero() {
		return at
	}
	lo, hi := p.sec, p.sec.Add(time.Second)
	if l := qs.activeSec.Add(h.since - h.slack); l.After(lo) {
		lo = l
	}
	if u := qs.activeSec.Add(time.Second + h.since + h.slack); u.Before(hi) {
		hi = u
	}
	if !lo.Before(hi) {
		return at // the two lines disagree: keep the line's own place
	}
	mid := at.Add(qs.active.Add(h.since).Sub(at) / 2)
	switch {
	case mid.Before(lo):
		return lo
	case !mid.Before(hi):
		return hi.Add(-time.Microsecond)
	}
	return mid
}

// place sets a record's arrival from its delay (or its message's known
// arrival) and appends it.
func (p *postfixParser) place(h heldRecord, out []Record) []Record {
	switch {
	case h.delay >= 0:
		h.rec.Arrival = h.rec.At.Add(-h.delay)
		if h.qs != nil && h.qs.arrival.IsZero() {
			h.qs.arrival = h.rec.Arrival
		}
	case h.qs != nil && !h.qs.arrival.IsZero():
		h.rec.Arrival = h.qs.arrival
	default:
		h.rec.Arrival = h.rec.At
	}
	if h.rec.Arrival.After(h.rec.At) {
		// Lines of one second placed out of order against their delay.
		h.rec.Arrival = h.rec.At
	}
	return append(out, h.rec)
}

// emit holds rec back until its second is complete, or appends it at once
// when its timestamp is precise.
func (p *postfixParser) emit(pl *postfixLine, h heldRecord, out []Record) []Record {
	if pl.precise {
		// Held lines of an earlier second (a log that mixes both kinds)
		// come first.
		out = p.release(out)
		h.rec.At = pl.at
		return p.place(h, out)
	}
	h.line = p.secLines - 1
	p.held = append(p.held, h)
	return out
}

// delivery reads a delivery agent's "to=<…>, relay=…, …, status=…" line.
func (p *postfixParser) delivery(n int, pl *postfixLine, out []Record) ([]Record, error) {
	t := pl.text
	end := strings.Index(t, ">, ")
	if end < 0 {
		return out, lineError(n, "to=<…> not closed")
	}
	addr := t[len("to=<"):end]
	t = t[end+3:]
	var delayS, delaysS, status, text string
	for t != "" {
		if strings.HasPrefix(t, "status=") {
			v := t[len("status="):]
			if sp := strings.IndexByte(v, ' '); sp >= 0 {
				status, text = v[:sp], strings.TrimSpace(v[sp+1:])
				text = strings.TrimSuffix(strings.TrimPrefix(text, "("), ")")
			} else {
				status = v
			}
			break
		}
		var field string
		if c := strings.Index(t, ", "); c >= 0 {
			field, t = t[:c], t[c+2:]
		} else {
			field, t = t, ""
		}
		k, v, _ := strings.Cut(field, "=")
		switch k {
		case "delay":
			delayS = v
		case "delays":
			delaysS = v
		}
	}
	if status == "" {
		return out, lineError(n, "delivery without status=")
	}
	var st Status
	switch status {
	case "sent":
		st = Delivered
	case "bounced":
		st = Failed
	case "expired":
		st = Expired
	case "deferred":
		st = postfixDeferral(text)
	default:
		// Address verification probes (deliverable, undeliverable) and
		// the like are no deliveries.
		return out, nil
	}
	delay := time.Duration(-1)
	if delayS != "" {
		f, err := strconv.ParseFloat(delayS, 64)
		if err != nil || f < 0 || f > 1e8 {
			return out, lineError(n, "bad delay=%q", delayS)
		}
		delay = time.Duration(f * float64(time.Second))
	}
	service, setup, since, slack := time.Duration(-1), time.Duration(-1), time.Duration(-1), time.Duration(0)
	if delaysS != "" {
		var d [4]float64
		parts := strings.Split(delaysS, "/")
		if len(parts) != 4 {
			return out, lineError(n, "bad delays=%q", delaysS)
		}
		for i, s := range parts {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || f < 0 || f > 1e8 {
				return out, lineError(n, "bad delays=%q", delaysS)
			}
			d[i] = f
			if i > 0 {
				slack += halfUnit(s)
			}
		}
		setup = time.Duration(d[2] * float64(time.Second))
		service = time.Duration((d[2] + d[3]) * float64(time.Second))
		since = time.Duration((d[1] + d[2] + d[3]) * float64(time.Second))
	}
	if pl.prog == "" {
		// "postfix/[pid]": no agent names the channel.
		return out, lineError(n, "delivery from a process without a name")
	}
	qs := p.qid(pl.qid)
	rs := qs.rcpts[addr]
	if rs == nil {
		host := domain(addr)
		ch := pl.prog
		switch ch {
		case "error", "retry", "qmgr":
			// Deferred on a delivery agent's behalf: its destination is
			// the agent's.
			if ch = p.channels[host]; ch == "" {
				ch = "smtp"
			}
		default:
			p.channels[host] = ch
		}
		rs = &rcptState{channel: ch, host: host}
		qs.rcpts[addr] = rs
	}
	if st != Suspended || rs.attempts == 0 {
		rs.attempts++
	}
	rs.final = st.Final()
	rec := Record{
		Msg: pl.qid, Rcpt: addr, Channel: rs.channel, Host: rs.host, Status: st, Word: status,
		Attempt: max(rs.attempts, 1), Agent: pl.pid, Service: service, Setup: setup, Text: text,
	}
	rec.Job = p.job(pl, delaysS, st)
	return p.emit(pl, heldRecord{rec: rec, delay: delay, qs: qs, since: since, slack: slack}, out), nil
}

// job returns the delivery transaction a record belongs to.
func (p *postfixParser) job(pl *postfixLine, delays string, st Status) uint64 {
	if st == Suspended {
		p.nextID++
		return p.nextID
	}
	j := p.jobs[pl.pid]
	if j.id != 0 && j.qid == pl.qid && j.delays == delays {
		return j.id
	}
	p.nextID++
	p.jobs[pl.pid] = postfixJob{qid: pl.qid, delays: delays, id: p.nextID}
	return p.nextID
}

// expire reads qmgr's "from=<…>, status=expired, returned to sender": every
// recipient of the message not yet final expires.
func (p *postfixParser) expire(pl *postfixLine, out []Record) []Record {
	qs := p.qids[pl.qid]
	if qs == nil {
		return out
	}
	addrs := make([]string, 0, len(qs.rcpts))
	for a, rs := range qs.rcpts {
		if !rs.final {
			addrs = append(addrs, a)
		}
	}
	// Map order is random; the records' order must not be.
	slices.Sort(addrs)
	for _, a := range addrs {
		rs := qs.rcpts[a]
		rs.final = true
		p.nextID++
		rec := Record{Msg: pl.qid, Rcpt: a, Channel: rs.channel, Host: rs.host, Status: Expired,
			Word: "expired", Attempt: rs.attempts, Agent: pl.pid, Job: p.nextID, Service: -1, Setup: -1,
			Text: "expired, returned to sender"}
		out = p.emit(pl, heldRecord{rec: rec, delay: -1, qs: qs, since: -1}, out)
	}
	return out
}

// halfUnit is the rounding of a printed number: half a unit of its last
// digit ("2.3": 0.05 s; "0": 0.005 s).
func halfUnit(s string) time.Duration {
	dot := strings.IndexByte(s, '.')
	if dot < 0 {
		if s == "0" {
			return 5 * time.Millisecond
		}
		return 500 * time.Millisecond
	}
	u := 0.5
	for range s[dot+1:] {
		u /= 10
	}
	return time.Duration(u * float64(time.Second))
}

// domain is an address's destination: its domain, lowercased; local
// addresses (no domain) go to "localhost".
func domain(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 || at == len(addr)-1 {
		return "localhost"
	}
	return strings.TrimSuffix(strings.ToLower(addr[at+1:]), ".")
}

// siteFailures are the texts of Postfix deferrals that failed the session
// rather than one recipient: no connection, a refused or broken greeting or
// handshake — what Postfix's own concurrency feedback counts as negative.
var siteFailures = []string{
	"refused to talk to me",
	"connect to ",
	"while receiving the initial server greeting",
	"while performing the EHLO handshake",
	"while performing the HELO handshake",
	"while performing the LHLO handshake",
	"in reply to EHLO command",
	"in reply to HELO command",
	"in reply to LHLO command",
	"Host or domain name not found",
	"Name service error",
	"No route to host",
	"Network is unreachable",
	"Cannot start TLS",
	"TLS is required",
}

// postfixDeferral classifies a status=deferred text.
func postfixDeferral(text string) Status {
	if strings.Contains(text, "delivery temporarily suspended") {
		return Suspended
	}
	for _, s := range siteFailures {
		if strings.Contains(text, s) {
			return Refused
		}
	}
	return Deferred
}

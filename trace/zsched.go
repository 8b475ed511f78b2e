package trace

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// zschedParser reads zsched's outcome lines: hclog text
//
//	2026-11-25T09:46:48.123Z [INFO]  zsched: outcome: msg=5308609 rcpt=150 to=carol@example.net channel=smtp host=example.net ta=14866 status=ok3 delay=362ms attempts=1 next="" text="delivered to the sink"
//
// hclog JSON ({"@timestamp":…,"@message":"outcome","msg":…}), and statelog
// lines with the same keys (a leading timestamp, or a time key, and no
// message other than "outcome").
type zschedParser struct {
	jobs   map[string]zschedJob // per agent: its current job
	nextID uint64
}

// zschedJob identifies the job an agent's outcome belongs to: one agent
// works one job line at a time, and a vertex tried again has another
// attempt count.
type zschedJob struct {
	msg, host string
	attempts  int
	id        uint64
}

func newZschedParser() *zschedParser {
	return &zschedParser{jobs: make(map[string]zschedJob)}
}

// zschedLine is an outcome line's fields, as logged.
type zschedLine struct {
	at                                       time.Time
	msg, rcpt, to, channel, host, ta, status string
	delay, attempts, next, text              string
	haveAt                                   bool
}

func (p *zschedParser) flush(out []Record) []Record { return out }

func (p *zschedParser) line(n int, l []byte, out []Record) ([]Record, error) {
	var z zschedLine
	var ok bool
	var err error
	if t := bytes.TrimLeft(l, " \t"); len(t) > 0 && t[0] == '{' {
		ok, err = parseZschedJSON(n, t, &z)
	} else {
		ok, err = parseZschedText(n, l, &z)
	}
	if !ok || err != nil {
		return out, err
	}
	rec, err := p.record(n, &z)
	if err != nil {
		return out, err
	}
	return append(out, rec), nil
}

func (p *zschedParser) record(n int, z *zschedLine) (Record, error) {
	if !z.haveAt {
		return Record{}, lineError(n, "outcome line without a timestamp")
	}
	for _, f := range [...]struct{ k, v string }{{"msg", z.msg}, {"channel", z.channel}, {"status", z.status}} {
		if f.v == "" {
			return Record{}, lineError(n, "outcome line without %s", f.k)
		}
	}
	st, ok := zschedStatus(z.status)
	if !ok {
		return Record{}, lineError(n, "unknown status %q", z.status)
	}
	delay, err := time.ParseDuration(z.delay)
	if err != nil || delay < 0 {
		return Record{}, lineError(n, "bad delay %q", z.delay)
	}
	att, err := strconv.Atoi(z.attempts)
	if err != nil || att < 0 {
		return Record{}, lineError(n, "bad attempts %q", z.attempts)
	}
	var next time.Time
	if z.next != "" {
		if next, err = time.Parse(time.RFC3339Nano, z.next); err != nil {
			return Record{}, lineError(n, "bad next %q", z.next)
		}
	}
	rec := Record{
		At: z.at, Arrival: z.at.Add(-delay), Msg: z.msg, Rcpt: z.rcpt,
		Channel: z.channel, Host: strings.ToLower(z.host), Status: st, Word: z.status,
		Attempt: att, Next: next, Agent: z.ta, Service: -1, Setup: -1, Text: z.text,
	}
	if rec.Rcpt == "" {
		rec.Rcpt = z.to
	}
	rec.Job = p.job(&rec)
	return rec, nil
}

// job returns the job number of rec: the agent's current job when rec
// continues it, else a new one.
func (p *zschedParser) job(rec *Record) uint64 {
	if rec.Agent == "" || rec.Agent == "0" || rec.Status == Expired || rec.Status == Gone {
		// No live agent: an expiry, or an agent that was gone when its
		// outcome was logged.
		p.nextID++
		return p.nextID
	}
	j := p.jobs[rec.Agent]
	if j.id != 0 && j.msg == rec.Msg && j.host == rec.Host && j.attempts == rec.Attempt {
		return j.id
	}
	p.nextID++
	p.jobs[rec.Agent] = zschedJob{msg: rec.Msg, host: rec.Host, attempts: rec.Attempt, id: p.nextID}
	return p.nextID
}

// zschedStatus classifies a status word of zsched's outcome line.
func zschedStatus(w string) (Status, bool) {
	switch w {
	case "ok", "ok2", "ok3":
		return Delivered, true
	case "error", "error2":
		return Failed, true
	case "deferred", "deferback":
		return Deferred, true
	case "deferall", "retryat":
		return Refused, true
	case "expired":
		return Expired, true
	case "gone":
		return Gone, true
	}
	return 0, false
}

// The time layouts of zsched's logs: hclog's text format, then RFC 3339
// (hclog's JSON format, and what a statelog may use).
const hclogTime = "2006-01-02T15:04:05.000Z0700"

func parseTime(s string) (time.Time, bool) {
	for _, layout := range [...]string{hclogTime, time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// parseZschedText reads a text line. ok is false for lines that are not
// outcome lines (other log lines): they are skipped, not malformed.
func parseZschedText(n int, l []byte, z *zschedLine) (ok bool, err error) {
	if !bytes.Contains(l, []byte("status=")) || !bytes.Contains(l, []byte("msg=")) || !bytes.Contains(l, []byte("delay=")) {
		return false, nil
	}
	s := string(l)
	i := 0
	var header []string
	// The header: words before the first key=value.
	for i < len(s) {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		j := i
		for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '=' && s[j] != '"' {
			j++
		}
		if j < len(s) && s[j] == '=' || i == len(s) {
			break
		}
		for j < len(s) && s[j] != ' ' && s[j] != '\t' {
			j++
		}
		header = append(header, s[i:j])
		i = j
	}
	if !outcomeHeader(header) {
		return false, nil
	}
	if len(header) > 0 {
		z.at, z.haveAt = parseTime(header[0])
	}
	for i < len(s) {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		sp := strings.IndexAny(s[i:], " \t")
		if eq < 0 || (sp >= 0 && sp < eq) {
			return true, lineError(n, "expected key=value at column %d", i+1)
		}
		key := s[i : i+eq]
		i += eq + 1
		var val string
		if i < len(s) && s[i] == '"' {
			v, end, ok := unquote(s, i)
			if !ok {
				return true, lineError(n, "unterminated quoted value of %s", key)
			}
			val, i = v, end
		} else {
			j := i
			for j < len(s) && s[j] != ' ' && s[j] != '\t' {
				j++
			}
			val, i = s[i:j], j
		}
		z.set(key, val)
	}
	return true, nil
}

// outcomeHeader reports whether the words before a line's keys are an
// outcome line's: a timestamp, a level, a logger name, and the message
// "outcome" — or, in a statelog, nothing but a timestamp.
func outcomeHeader(h []string) bool {
	if len(h) == 0 {
		return true
	}
	last := strings.TrimSuffix(h[len(h)-1], ":")
	if last == "outcome" {
		return true
	}
	if len(h) == 1 {
		_, ok := parseTime(h[0])
		return ok
	}
	return false
}

// unquote reads the double-quoted value starting at s[i] as hclog writes
// it: \" for a quote, \n \t \r and \xNN for control characters, anything
// else (a backslash included) as is. It returns the value and the index
// after the closing quote.
func unquote(s string, i int) (string, int, bool) {
	i++ // the opening quote
	start := i
	plain := true
	for ; i < len(s); i++ {
		if s[i] == '\\' {
			plain = false
			i++
			continue
		}
		if s[i] == '"' {
			break
		}
	}
	if i >= len(s) {
		return "", 0, false
	}
	raw := s[start:i]
	if plain {
		return raw, i + 1, true
	}
	var b strings.Builder
	for k := 0; k < len(raw); k++ {
		c := raw[k]
		if c != '\\' || k+1 >= len(raw) {
			b.WriteByte(c)
			continue
		}
		k++
		switch raw[k] {
		case '"':
			b.WriteByte('"')
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'x':
			if k+2 < len(raw) {
				if v, err := strconv.ParseUint(raw[k+1:k+3], 16, 8); err == nil {
					b.WriteByte(byte(v))
					k += 2
					continue
				}
			}
			b.WriteString(`\x`)
		default:
			b.WriteByte('\\')
			b.WriteByte(raw[k])
		}
	}
	return b.String(), i + 1, true
}

// set records one key of an outcome line; unknown keys are ignored.
func (z *zschedLine) set(key, val string) {
	switch key {
	case "msg":
		z.msg = val
	case "rcpt":
		z.rcpt = val
	case "to":
		z.to = val
	case "channel":
		z.channel = val
	case "host":
		z.host = val
	case "ta":
		z.ta = val
	case "status":
		z.status = val
	case "delay":
		z.delay = val
	case "attempts":
		z.attempts = val
	case "next":
		z.next = val
	case "text":
		z.text = val
	case "time", "ts", "at", "@timestamp", "timestamp":
		if !z.haveAt {
			z.at, z.haveAt = parseTime(val)
		}
	}
}

// jsonValue is a JSON string or number, as text.
type jsonValue string

func (v *jsonValue) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = jsonValue(s)
		return nil
	}
	if string(b) == "null" {
		*v = ""
		return nil
	}
	var num json.Number
	if err := json.Unmarshal(b, &num); err != nil {
		return err
	}
	*v = jsonValue(num)
	return nil
}

// jsonOutcome is an outcome line in hclog's JSON format (or a JSON
// statelog line).
type jsonOutcome struct {
	Timestamp jsonValue `json:"@timestamp"`
	Message   jsonValue `json:"@message"`
	Time      jsonValue `json:"time"`
	Msg       jsonValue `json:"msg"`
	Rcpt      jsonValue `json:"rcpt"`
	To        jsonValue `json:"to"`
	Channel   jsonValue `json:"channel"`
	Host      jsonValue `json:"host"`
	TA        jsonValue `json:"ta"`
	Status    jsonValue `json:"status"`
	Delay     jsonValue `json:"delay"`
	Attempts  jsonValue `json:"attempts"`
	Next      jsonValue `json:"next"`
	Text      jsonValue `json:"text"`
}

func parseZschedJSON(n int, l []byte, z *zschedLine) (ok bool, err error) {
	if !bytes.Contains(l, []byte(`"status"`)) || !bytes.Contains(l, []byte(`"delay"`)) {
		return false, nil
	}
	var j jsonOutcome
	if err := json.Unmarshal(l, &j); err != nil {
		return true, lineError(n, "bad JSON: %v", err)
	}
	if j.Message != "" && j.Message != "outcome" {
		return false, nil
	}
	ts := string(j.Timestamp)
	if ts == "" {
		ts = string(j.Time)
	}
	z.at, z.haveAt = parseTime(ts)
	z.msg, z.rcpt, z.to, z.channel, z.host = string(j.Msg), string(j.Rcpt), string(j.To), string(j.Channel), string(j.Host)
	z.ta, z.status, z.delay, z.attempts = string(j.TA), string(j.Status), string(j.Delay), string(j.Attempts)
	z.next, z.text = string(j.Next), string(j.Text)
	return true, nil
}

package dsn

import (
	"bufio"
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"zsched/ctlfile"
	"zsched/report"
)

var now = time.Date(2026, 1, 8, 12, 0, 0, 0, time.UTC)

// rcpt is one r line of a fixture, with the d line written about it (if
// notary or text is set).
type rcpt struct {
	user    string
	notify  string // NOTIFY= value, "" for no N line
	orcpt   string
	status  byte // r status byte: ' ', '+', '-'
	notary  report.Notary
	text    string
	done    bool // the d line is already reported ('+')
	noDiag  bool
	senderB bool // under the second s line
}

type fixture struct {
	bounce    bool   // s line on channel error, no e line
	errorAddr string // e line ("" = none)
	second    string // a second s line's sender (with its own e line), for senderB recipients
	ret       string
	envid     string
	header    string // m block
	rcpts     []rcpt
}

const header = "From: sender@example.org\nTo: bad1@dest.test\nSubject: the original\nMessage-Id: <12345.test@example.org>\n"

// build lays the fixture out as ZMailer's router and agents do
// (zmailer-mkmsg.py, zmailer-ta-observed §3) and parses it.
func (fx fixture) build(t *testing.T) (*ctlfile.File, []byte) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("@ 0x00000007\ni 12345\no 120\nl <12345.test@example.org>\n")
	if fx.bounce {
		b.WriteString("s error localhost - 0\n")
	} else {
		if fx.errorAddr != "" {
			b.WriteString("e " + fx.errorAddr + "\n")
		}
		b.WriteString("s smtp example.org sender@example.org 0\n")
	}
	offs := make([]int64, len(fx.rcpts))
	wroteSecond := false
	for i, r := range fx.rcpts {
		if r.senderB && !wroteSecond {
			b.WriteString("e " + fx.second + "\ns smtp other.test " + fx.second + " 0\n")
			wroteSecond = true
		}
		st := r.status
		if st == 0 {
			st = ' '
		}
		offs[i] = int64(b.Len())
		b.WriteString("r" + string(st) + "          smtp dest.test " + r.user + " 0\n")
		if r.notify != "" || r.orcpt != "" {
			b.WriteString("N")
			if r.notify != "" {
				b.WriteString(" NOTIFY=" + r.notify)
			}
			if r.orcpt != "" {
				b.WriteString(" ORCPT=" + r.orcpt)
			}
			b.WriteString("\n")
		}
	}
	if fx.ret != "" {
		b.WriteString("R " + fx.ret + "\n")
	}
	if fx.envid != "" {
		b.WriteString("n " + fx.envid + "\n")
	}
	h := fx.header
	if h == "" {
		h = header
	}
	b.WriteString("m\n" + h + "\n")
	for i, r := range fx.rcpts {
		if r.noDiag {
			continue
		}
		d := ctlfile.Diag{RcptOffset: offs[i], HeaderOffset: -1, NOffset: -1, Time: now.Unix() - 60,
			Notary: r.notary.String(), Text: r.text}
		if r.done {
			d.Status = ctlfile.Done
		}
		b.Write(ctlfile.FormatDiag(d))
	}
	data := b.Bytes()
	f, err := ctlfile.Parse("12345", data)
	if err != nil {
		t.Fatalf("fixture does not parse: %v\n%s", err, data)
	}
	return f, data
}

var opts = Options{MTA: "mx.example.net", Now: now}

const body = "This is the body.\n--not a boundary\n"

func original(ctl []byte, f *ctlfile.File) Original {
	return Original{Header: Headers(ctl, f.Rcpts[0].HeaderOffset), Body: []byte(body)}
}

// parsed is a report taken apart with the standard library's parsers.
type parsed struct {
	hdr      mail.Header
	human    string
	perMsg   textproto.MIMEHeader
	perRcpt  []textproto.MIMEHeader
	third    string // its Content-Type
	original []byte
}

func parse(t *testing.T, r Report) parsed {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(r.Message()))
	if err != nil {
		t.Fatalf("report is not a mail message: %v\n%s", err, r.Message())
	}
	for _, l := range bytes.Split(r.Message(), []byte("\n")) {
		if len(l) > 998 {
			t.Fatalf("line of %d bytes", len(l))
		}
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/report" || params["report-type"] != "delivery-status" {
		t.Fatalf("Content-Type %q (%v)", msg.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var parts []*multipart.Part
	var bodies [][]byte
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("multipart: %v\n%s", err, r.Message())
		}
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
		bodies = append(bodies, b)
	}
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3 (RFC 3464 §2)\n%s", len(parts), r.Message())
	}
	if ct := parts[0].Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("first part is %s", ct)
	}
	if ct := parts[1].Header.Get("Content-Type"); ct != "message/delivery-status" {
		t.Fatalf("second part is %s", ct)
	}
	out := parsed{hdr: msg.Header, human: string(bodies[0]), third: parts[2].Header.Get("Content-Type"), original: bodies[2]}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(bodies[1])))
	out.perMsg, err = tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("per-message fields: %v\n%s", err, bodies[1])
	}
	for {
		h, err := tp.ReadMIMEHeader()
		if len(h) > 0 {
			out.perRcpt = append(out.perRcpt, h)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("per-recipient fields: %v\n%s", err, bodies[1])
		}
	}
	if out.perMsg.Get("Reporting-MTA") != "dns; mx.example.net" {
		t.Fatalf("Reporting-MTA %q", out.perMsg.Get("Reporting-MTA"))
	}
	return out
}

// observed is smtp's notary for a 550 (zmailer-ta-observed, A-transcripts).
var observed = report.ParseNotary("bad1@dest.test\x01failed\x015.1.1\x01smtp; 550 (<bad1@dest.test>: Recipient address rejected: User unknown)\x01X-IP-addr; [127.0.0.1] (127.0.0.1|2525|127.0.0.1|60284)\x01smtp[21148]")

const transcript = "\r<<- MAIL From:<sender@example.org> BODY=8BITMIME SIZE=201\r->> 250 2.1.0 Ok\r<<- RCPT To:<bad1@dest.test>\r->> 550 5.1.1 <bad1@dest.test>: Recipient address rejected: User unknown"

func TestFailureReport(t *testing.T) {
	fx := fixture{errorAddr: "sender@example.org", envid: "QQ+2B1", rcpts: []rcpt{
		{user: "bad1@dest.test", status: '-', orcpt: "rfc822;bad1+2Bx@dest.test", notary: observed, text: transcript},
		{user: "ok@dest.test", status: '+', noDiag: true},
	}}
	f, ctl := fx.build(t)
	res, err := Build(f, original(ctl, f), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Reports) != 1 || len(res.Done) != 1 || res.Done[0] != f.Diags[0].Offset {
		t.Fatalf("%d reports, done %v; want one report and the d line at %d", len(res.Reports), res.Done, f.Diags[0].Offset)
	}
	r := res.Reports[0]
	if r.To != "sender@example.org" || r.DoubleFault {
		t.Fatalf("report to %q (double fault %v)", r.To, r.DoubleFault)
	}
	p := parse(t, r)
	if to, err := p.hdr.AddressList("To"); err != nil || to[0].Address != "sender@example.org" {
		t.Fatalf("To: %v %v", to, err)
	}
	if _, err := p.hdr.AddressList("From"); err != nil {
		t.Fatalf("From: %v", err)
	}
	if d, err := p.hdr.Date(); err != nil || !d.Equal(now) {
		t.Fatalf("Date: %v %v", d, err)
	}
	if p.hdr.Get("Auto-Submitted") != "auto-replied" || p.hdr.Get("In-Reply-To") != "<12345.test@example.org>" {
		t.Fatalf("headers: %v", p.hdr)
	}
	if !strings.Contains(p.hdr.Get("Subject"), "FAILED(1)") {
		t.Fatalf("Subject %q", p.hdr.Get("Subject"))
	}
	if got := p.perMsg.Get("Original-Envelope-Id"); got != "QQ+1" {
		t.Fatalf("Original-Envelope-Id %q, want the xtext decoded", got)
	}
	if len(p.perRcpt) != 1 {
		t.Fatalf("%d recipients reported, want 1", len(p.perRcpt))
	}
	want := map[string]string{
		"Original-Recipient": "rfc822; bad1+x@dest.test",
		"Final-Recipient":    "rfc822; bad1@dest.test",
		"Action":             "failed",
		"Status":             "5.1.1",
		"Remote-Mta":         "X-IP-addr; [127.0.0.1] (127.0.0.1|2525|127.0.0.1|60284)",
		"Diagnostic-Code":    "smtp; 550 (<bad1@dest.test>: Recipient address rejected: User unknown)",
		"Last-Attempt-Date":  now.Add(-time.Minute).Format(time.RFC1123Z),
	}
	for k, v := range want {
		if got := unfold(p.perRcpt[0].Get(k)); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if !strings.Contains(p.human, "550 5.1.1 <bad1@dest.test>: Recipient address rejected") {
		t.Errorf("the human part lacks the transcript:\n%s", p.human)
	}
	if strings.Contains(p.human, "ok@dest.test") {
		t.Errorf("the human part names a delivered recipient that asked for nothing:\n%s", p.human)
	}
	// RET absent: the whole message (ZMailer's default).
	if p.third != "message/rfc822" {
		t.Fatalf("third part %s, want message/rfc822", p.third)
	}
	inner, err := mail.ReadMessage(bytes.NewReader(p.original))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(inner.Body)
	if inner.Header.Get("Subject") != "the original" || string(b) != body {
		t.Fatalf("returned message: subject %q body %q", inner.Header.Get("Subject"), b)
	}
}

func unfold(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestNotify(t *testing.T) {
	delivered := report.Notary{Recipient: "x", Action: "relayed", Status: "2.0.0", Diagnostic: "smtp; 250 (Ok: queued as FAKE1)"}
	delayed := report.Notary{Action: "delayed", Status: "4.4.1", Diagnostic: "smtp; 421 (try later)"}
	failed := report.Notary{Action: "failed", Status: "5.1.1", Diagnostic: "smtp; 550 (no)"}
	tests := []struct {
		name    string
		notify  string
		status  byte
		notary  report.Notary
		reports bool
		third   string
	}{
		{"default is FAILURE", "", '-', failed, true, "message/rfc822"},
		{"NEVER", "NEVER", '-', failed, false, ""},
		{"SUCCESS only: no failure report", "SUCCESS", '-', failed, false, ""},
		{"SUCCESS: relayed is reported, headers only", "SUCCESS", '+', delivered, true, "text/rfc822-headers"},
		{"default: no success report", "", '+', delivered, false, ""},
		{"DELAY asked", "DELAY", ' ', delayed, true, "text/rfc822-headers"},
		{"DELAY not asked", "FAILURE", ' ', delayed, false, ""},
		{"empty notary on a failed line reads as failed", "", '-', report.Notary{}, true, "message/rfc822"},
		{"empty notary on a delivered line reads as delivered", "SUCCESS", '+', report.Notary{}, true, "text/rfc822-headers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := fixture{errorAddr: "s@example.org", rcpts: []rcpt{{user: "u@dest.test", notify: tc.notify, status: tc.status, notary: tc.notary, text: "why"}}}
			f, ctl := fx.build(t)
			res, err := Build(f, original(ctl, f), opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Done) != 1 {
				t.Fatalf("done %v: every pending d line is dealt with, reported or not", res.Done)
			}
			if got := len(res.Reports) == 1; got != tc.reports {
				t.Fatalf("%d reports, want a report: %v", len(res.Reports), tc.reports)
			}
			if !tc.reports {
				return
			}
			p := parse(t, res.Reports[0])
			if p.third != tc.third {
				t.Fatalf("third part %s, want %s", p.third, tc.third)
			}
			st := p.perRcpt[0].Get("Status")
			act := p.perRcpt[0].Get("Action")
			// The status class matches the action (RFC 3464 §2.3.4).
			class := map[string]byte{"failed": '5', "delayed": '4', "delivered": '2', "relayed": '2'}[act]
			if class == 0 || st[0] != class {
				t.Fatalf("Action %s with Status %s", act, st)
			}
			if p.perRcpt[0].Get("Diagnostic-Code") == "" {
				t.Fatal("no Diagnostic-Code")
			}
		})
	}
}

func TestRETHeaders(t *testing.T) {
	fx := fixture{errorAddr: "s@example.org", ret: "HDRS", rcpts: []rcpt{{user: "u@dest.test", status: '-', notary: observed}}}
	f, ctl := fx.build(t)
	res, _ := Build(f, original(ctl, f), opts)
	p := parse(t, res.Reports[0])
	if p.third != "text/rfc822-headers" || strings.Contains(string(p.original), "This is the body") ||
		!strings.Contains(string(p.original), "Subject: the original") {
		t.Fatalf("RET=HDRS returned %s:\n%s", p.third, p.original)
	}
	// Too large for RET=FULL: the headers, and the human part says why.
	fx.ret = ""
	f, ctl = fx.build(t)
	o := opts
	o.FullLimit = 10
	res, _ = Build(f, original(ctl, f), o)
	p = parse(t, res.Reports[0])
	if p.third != "text/rfc822-headers" || !strings.Contains(p.human, "larger than 10 bytes") {
		t.Fatalf("over the limit: %s\n%s", p.third, p.human)
	}
}

func TestDoubleFault(t *testing.T) {
	fx := fixture{bounce: true, rcpts: []rcpt{{user: "sender@example.org", notify: "NEVER", status: '-', notary: observed}}}
	f, ctl := fx.build(t)
	res, _ := Build(f, original(ctl, f), opts)
	if len(res.Reports) != 1 {
		t.Fatalf("%d reports of a bounce that bounced, want one to the postmaster despite NOTIFY=NEVER", len(res.Reports))
	}
	r := res.Reports[0]
	p := parse(t, r)
	if r.To != "postmaster" || !r.DoubleFault || p.hdr.Get(DoubleFaultHeader) != "yes" {
		t.Fatalf("to %q, double fault %v, header %q", r.To, r.DoubleFault, p.hdr.Get(DoubleFaultHeader))
	}
	if to, err := p.hdr.AddressList("To"); err != nil || to[0].Address != "postmaster@mx.example.net" {
		t.Fatalf("To: %v %v", to, err)
	}
	// That report fails in turn: dropped, not reported again.
	fx.header = string(r.Header)
	f, ctl = fx.build(t)
	res, _ = Build(f, original(ctl, f), opts)
	if len(res.Reports) != 0 || res.Dropped == "" || len(res.Done) != 1 {
		t.Fatalf("a failed double-fault report gave %d reports (dropped %q, done %v)", len(res.Reports), res.Dropped, res.Done)
	}
}

func TestReportedLinesAreSkipped(t *testing.T) {
	fx := fixture{errorAddr: "s@example.org", rcpts: []rcpt{
		{user: "a@dest.test", status: '-', notary: observed, done: true},
		{user: "b@dest.test", status: '-', notary: observed},
	}}
	f, ctl := fx.build(t)
	res, _ := Build(f, original(ctl, f), opts)
	if len(res.Done) != 1 || res.Done[0] != f.Diags[1].Offset {
		t.Fatalf("done %v, want only the pending d line %d", res.Done, f.Diags[1].Offset)
	}
	p := parse(t, res.Reports[0])
	if len(p.perRcpt) != 1 || p.perRcpt[0].Get("Final-Recipient") != "rfc822; bad1@dest.test" {
		t.Fatalf("reported %v", p.perRcpt)
	}
}

func TestReturnPath(t *testing.T) {
	tests := []struct {
		errorAddr string
		want      string
	}{
		{"", "sender@example.org"}, // no e line: the s line's address
		{"<bounces@example.org>", "bounces@example.org"},
		{"|/usr/bin/prog", "postmaster"},
		{"/var/mail/x", "postmaster"},
	}
	for _, tc := range tests {
		fx := fixture{errorAddr: tc.errorAddr, rcpts: []rcpt{{user: "u@dest.test", status: '-', notary: observed}}}
		f, ctl := fx.build(t)
		res, _ := Build(f, original(ctl, f), opts)
		if len(res.Reports) != 1 || res.Reports[0].To != tc.want {
			t.Errorf("e %q: reports %v, want one to %s", tc.errorAddr, res.Reports, tc.want)
		}
	}
	// Two senders in one file: one report each.
	fx := fixture{errorAddr: "a@example.org", second: "b@example.org", rcpts: []rcpt{
		{user: "u1@dest.test", status: '-', notary: observed},
		{user: "u2@dest.test", status: '-', notary: observed, senderB: true},
	}}
	f, ctl := fx.build(t)
	res, _ := Build(f, original(ctl, f), opts)
	if len(res.Reports) != 2 || res.Reports[0].To != "a@example.org" || res.Reports[1].To != "b@example.org" {
		t.Fatalf("two senders: %d reports", len(res.Reports))
	}
}

// TestExpiryLine reports a d line as the scheduler writes it on expiry
// with no agent notary (core/retry.go expire).
func TestExpiryLine(t *testing.T) {
	n := report.Notary{Recipient: "u@dest.test", Action: "failed", Status: "5.4.7 (delivery time expired)",
		Diagnostic: "x-local; 500 (expired after 5d)"}
	fx := fixture{errorAddr: "s@example.org", rcpts: []rcpt{{user: "u@dest.test", notary: n, text: "expired after 5d"}}}
	f, ctl := fx.build(t)
	res, _ := Build(f, original(ctl, f), opts)
	p := parse(t, res.Reports[0])
	r := p.perRcpt[0]
	if r.Get("Action") != "failed" || r.Get("Status") != "5.4.7 (delivery time expired)" ||
		r.Get("Diagnostic-Code") != "x-local; 500 (expired after 5d)" || r.Get("Final-Recipient") != "rfc822; u@dest.test" {
		t.Fatalf("expiry reported as %v", r)
	}
}

func TestHeaders(t *testing.T) {
	ctl := []byte("r x\nm\nA: 1\nB: 2\n\nd ...\n")
	if got := string(Headers(ctl, 6)); got != "A: 1\nB: 2\n" {
		t.Fatalf("Headers = %q", got)
	}
	for _, off := range []int64{-1, int64(len(ctl)), 1000} {
		if Headers(ctl, off) != nil {
			t.Fatalf("Headers(%d) not nil", off)
		}
	}
}

func TestLongAndOddFields(t *testing.T) {
	long := strings.Repeat("word ", 3000)
	n := report.Notary{Recipient: "u@dest.test", Action: "failed", Status: "garbage",
		Diagnostic: "smtp; 550 " + long + "\x01\x7f", RemoteMTA: "mx.dest.test"}
	fx := fixture{errorAddr: "s@example.org", rcpts: []rcpt{{user: "u@dest.test", status: '-', notary: n, text: long}}}
	f, ctl := fx.build(t)
	res, _ := Build(f, original(ctl, f), opts)
	p := parse(t, res.Reports[0]) // checks every line is ≤ 998 bytes
	r := p.perRcpt[0]
	if r.Get("Status") != "5.0.0" || r.Get("Remote-Mta") != "dns; mx.dest.test" {
		t.Fatalf("Status %q Remote-MTA %q", r.Get("Status"), r.Get("Remote-Mta"))
	}
}

func FuzzBuild(f *testing.F) {
	f.Add("12345", []byte("@ 0x00000007\ni 12345\no 1\nl <x>\ne a@b\ns smtp b a@b 0\nr-          smtp h u 0\nm\nA: b\n\nd 54:-1:-1::1\t\x01failed\t\r\n"), []byte("x"))
	f.Add("1", []byte("@ 0x00000007\ni 1\no 1\nl <x>\ns error localhost - 0\nr-          smtp h u 0\nm\nX-Zsched-Double-Fault: yes\n\nd 54:-1:-1::1\t\t\n"), []byte(nil))
	f.Fuzz(func(t *testing.T, name string, ctl, body []byte) {
		file, err := ctlfile.Parse(name, ctl)
		if err != nil {
			return
		}
		var h []byte
		if len(file.Rcpts) > 0 {
			h = Headers(ctl, file.Rcpts[0].HeaderOffset)
		}
		res, err := Build(file, Original{Header: h, Body: body}, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Reports {
			m, err := mail.ReadMessage(bytes.NewReader(r.Message()))
			if err != nil {
				t.Fatalf("report does not parse: %v", err)
			}
			_, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
			if err != nil {
				t.Fatal(err)
			}
			mr := multipart.NewReader(m.Body, params["boundary"])
			n := 0
			for {
				p, err := mr.NextPart()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("part %d: %v", n, err)
				}
				io.Copy(io.Discard, p)
				n++
			}
			if n != 3 {
				t.Fatalf("%d parts", n)
			}
		}
	})
}

package main

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"zsched/ctlfile"
	"zsched/postfix"
	"zsched/report"
	"zsched/smtpclient"
)

// disconnects returns, per smtpd session in the maillog, its command
// counts ("ehlo=1 mail=2 ... quit=1") as a map.
func disconnects(log string) []map[string]int {
	var out []map[string]int
	re := regexp.MustCompile(`(\w+)=(\d+)`)
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "smtpd[") || !strings.Contains(l, ": disconnect from ") {
			continue
		}
		m := map[string]int{}
		for _, kv := range re.FindAllStringSubmatch(l, -1) {
			m[kv[1]], _ = strconv.Atoi(kv[2])
		}
		out = append(out, m)
	}
	return out
}

func waitLog(t *testing.T, in *postfix.Instance, what string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		log, err := in.Log()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log, what) {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("maillog has no %q after %v:\n%s", what, timeout, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The outcomes of one job against a real Postfix that rejects one
// address: ok, error2 with a d line, ok; status bytes + - +.
func TestDeliverOkAndRejected(t *testing.T) {
	t.Parallel()
	pf := startPostfix(t, postfix.Config{Reject: map[string]string{"bad@d1.test": "550 5.1.1 user unknown"}})
	sp := newSpool(t)
	rel := sp.enqueue("hello\n.leading dot\n", "ok1@d1.test", "bad@d1.test",
		ctlfile.Address{Channel: "smtp", Host: "d1.test", User: "ok2@d1.test", Notify: "SUCCESS,FAILURE", ORCPT: "rfc822;ok2@d1.test"})
	d := serve(t, sp, forced(t, newAgent(0), pf.Addr))
	rs := d.job(sp, rel, "d1.test")
	// ok2 asked for a success DSN; Postfix offers DSN, so it takes the duty: ok3.
	want := map[string]string{"ok1@d1.test": "ok", "bad@d1.test": "error2", "ok2@d1.test": "ok3"}
	if got := statuses(rs); !equalMaps(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	marks := sp.marks(rel)
	if marks["ok1@d1.test"] != ctlfile.Done || marks["bad@d1.test"] != ctlfile.Failed || marks["ok2@d1.test"] != ctlfile.Done {
		t.Errorf("marks %q", marks)
	}
	f := sp.read(rel)
	if len(f.Diags) != 1 {
		t.Fatalf("%d d lines, want 1 (for the rejected address)", len(f.Diags))
	}
	dl := f.Diags[0]
	i, _ := f.RcptAt(dl.RcptOffset)
	n := report.ParseNotary(dl.Notary)
	if f.Rcpts[i].User != "bad@d1.test" || n.Action != "failed" || n.Status != "5.1.1" ||
		!strings.HasPrefix(n.Diagnostic, "smtp; 550 5.1.1 <bad@d1.test>") || !strings.HasPrefix(n.Agent, "smtp-ta[") {
		t.Errorf("d line for %s: notary %+v", f.Rcpts[i].User, n)
	}
	if !strings.Contains(dl.Text, "<<- RCPT TO:<bad@d1.test>") {
		t.Errorf("d line text %q lacks the refused RCPT", dl.Text)
	}
	// The ok report carries the notary and the transcript, as ZMailer's.
	ok := rs["ok1@d1.test"]
	if ok.Notary.Action != "delivered" || ok.Notary.Status != "2.0.0" || !strings.HasPrefix(ok.Notary.RemoteMTA, "X-IP-addr; [127.0.0.1] (127.0.0.1|") {
		t.Errorf("ok notary %+v", ok.Notary)
	}
	if !strings.Contains(ok.Text, "<<- RCPT TO:<ok1@d1.test>") || !strings.Contains(ok.Text, "<<- .\r->> 250 2.0.0 Ok: queued as") {
		t.Errorf("ok text %q", ok.Text)
	}
	// Postfix delivers both, and sends the sender the success DSN ok2
	// asked for: NOTIFY went along with the RCPT.
	s, err := pf.WaitSent(3, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sent["ok1@d1.test"] != 1 || s.Sent["ok2@d1.test"] != 1 || s.Sent["sender@example.org"] != 1 || len(s.Sent) != 3 {
		t.Errorf("postfix delivered %v", s.Sent)
	}
	d.end()
}

func equalMaps[K, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// One session for jobs to one destination (across #idle), and for jobs to
// another destination routed to the same server (as Postfix's connection
// cache reuses a session by server address); a new one, with QUIT on the
// old, when the server changes.
func TestSessionReuseAndHostChange(t *testing.T) {
	t.Parallel()
	pf1, pf2 := startPostfix(t, postfix.Config{}), startPostfix(t, postfix.Config{})
	sp := newSpool(t)
	m1 := sp.enqueue("one\n", "a@d0.test", "b@d0.test")
	m2 := sp.enqueue("two\n", "c@d0.test")
	m3 := sp.enqueue("three\n", "d@d1.test")
	m4 := sp.enqueue("four\n", "e@d2.test")
	ag := newAgent(0)
	routes, err := smtpclient.ParseRoutes("routes", []byte(fmt.Sprintf(
		"d0.test [127.0.0.1]:%d\nd1.test [127.0.0.1]:%d\nd2.test [127.0.0.1]:%d\n", pf1.Port, pf1.Port, pf2.Port)), 25)
	if err != nil {
		t.Fatal(err)
	}
	ag.routes = routes
	d := serve(t, sp, ag)
	for _, j := range []struct{ rel, host string }{{m1, "d0.test"}, {m2, "d0.test"}} {
		for a, st := range statuses(d.job(sp, j.rel, j.host)) {
			if st != "ok" {
				t.Fatalf("%s: %s", a, st)
			}
		}
	}
	d.idle()
	if st := statuses(d.job(sp, m3, "d1.test")); st["d@d1.test"] != "ok" {
		t.Fatalf("d1.test: %v", st)
	}
	// Another server: the session to the first ends with QUIT now.
	if st := statuses(d.job(sp, m4, "d2.test")); st["e@d2.test"] != "ok" {
		t.Fatalf("d2.test: %v", st)
	}
	sessions := disconnects(waitLog(t, pf1, "quit=1 commands", 10*time.Second))
	if len(sessions) != 1 {
		t.Fatalf("%d sessions to the first server, want 1 (d0.test and d1.test):\n%v", len(sessions), sessions)
	}
	// It carried the three messages (one transaction each, no RSET
	// between them).
	if s := sessions[0]; s["mail"] != 3 || s["rcpt"] != 4 || s["data"] != 3 || s["quit"] != 1 || s["rset"] != 0 {
		t.Errorf("first server's session %v", s)
	}
	d.end()
	sessions = disconnects(waitLog(t, pf2, "quit=1 commands", 10*time.Second))
	if len(sessions) != 1 || sessions[0]["mail"] != 1 || sessions[0]["quit"] != 1 {
		t.Errorf("second server's sessions %v", sessions)
	}
}

// An idle session is kept with NOOP and reused by the next job.
func TestNoopKeepsIdleSession(t *testing.T) {
	t.Parallel()
	pf := startPostfix(t, postfix.Config{})
	sp := newSpool(t)
	m1 := sp.enqueue("one\n", "a@d0.test")
	m2 := sp.enqueue("two\n", "b@d0.test")
	ag := forced(t, newAgent(0), pf.Addr)
	ag.noop = 100 * time.Millisecond
	d := serve(t, sp, ag)
	d.job(sp, m1, "d0.test")
	d.idle()
	d.waitLog("NOOP ok", 2, 10*time.Second)
	if st := statuses(d.job(sp, m2, "d0.test")); st["b@d0.test"] != "ok" {
		t.Fatalf("%v", st)
	}
	d.end()
	sessions := disconnects(waitLog(t, pf, "quit=1", 10*time.Second))
	if len(sessions) != 1 || sessions[0]["noop"] < 2 || sessions[0]["mail"] != 2 {
		t.Fatalf("sessions %v, want one with both messages and at least 2 NOOPs", sessions)
	}
}

// A cached session the server has dropped is replaced transparently: the
// next job is delivered, not deferred.
func TestDroppedSessionReconnects(t *testing.T) {
	t.Parallel()
	pf := startPostfix(t, postfix.Config{Main: []string{"smtpd_timeout = 1s"}})
	sp := newSpool(t)
	m1 := sp.enqueue("one\n", "a@d0.test")
	m2 := sp.enqueue("two\n", "b@d0.test")
	d := serve(t, sp, forced(t, newAgent(0), pf.Addr)) // no NOOP
	d.job(sp, m1, "d0.test")
	d.idle()
	waitLog(t, pf, "timeout after", 10*time.Second)
	if st := statuses(d.job(sp, m2, "d0.test")); st["b@d0.test"] != "ok" {
		t.Fatalf("after the server dropped the idle session: %v", st)
	}
	if _, err := pf.WaitSent(2, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Every way a site can fail gives deferall for every recipient of the job
// (ZMailer's smtp gave it to the first only, O18), leaving them pending;
// per-recipient and per-message failures give their own words.
func TestFailureMapping(t *testing.T) {
	t.Parallel()
	three := []any{"a@d0.test", "b@d0.test", "c@d0.test"}
	cases := []struct {
		name   string
		server func(t *testing.T) string // its address
		want   string                    // every recipient's status
		mark   ctlfile.Status
		diag   string // prefix of the notary's diagnostic (or status)
	}{
		{"connection refused", func(t *testing.T) string { return freeAddr(t) }, "deferall", ctlfile.Pending, "X-zsched; 127.0.0.1:"},
		{"421 greeting", func(t *testing.T) string { return startSink(t, "-Q", "CONNECT").Addr }, "deferall", ctlfile.Pending, "smtp; 421"},
		{"554 greeting", func(t *testing.T) string { return startSink(t, "-f", "CONNECT").Addr }, "deferall", ctlfile.Pending, "smtp; 5"},
		{"421 after MAIL", func(t *testing.T) string { return startSink(t, "-Q", "MAIL").Addr }, "deferall", ctlfile.Pending, "smtp; 421"},
		{"421 after RCPT", func(t *testing.T) string { return startSink(t, "-Q", "RCPT").Addr }, "deferall", ctlfile.Pending, "smtp; 421"},
		{"421 after the dot", func(t *testing.T) string { return startSink(t, "-Q", ".").Addr }, "deferall", ctlfile.Pending, "smtp; 421"},
		{"4xx at MAIL", func(t *testing.T) string { return startSink(t, "-r", "MAIL").Addr }, "deferred", ctlfile.Pending, "smtp; 450"},
		{"4xx at RCPT", func(t *testing.T) string { return startSink(t, "-r", "RCPT").Addr }, "deferred", ctlfile.Pending, "smtp; 450"},
		{"4xx after the dot", func(t *testing.T) string { return startSink(t, "-r", ".").Addr }, "deferback", ctlfile.Pending, "smtp; 450"},
		{"5xx at MAIL", func(t *testing.T) string { return startSink(t, "-f", "MAIL").Addr }, "error2", ctlfile.Failed, "smtp; 500"},
		{"5xx after the dot", func(t *testing.T) string { return startSink(t, "-f", ".").Addr }, "error2", ctlfile.Failed, "smtp; 500"},
		{"postfix over its connection limit", func(t *testing.T) string {
			pf := startPostfix(t, postfix.Config{ConnectionLimit: 1, ProcessLimit: 10})
			// Hold the one allowed connection.
			c, err := smtpclient.Dial(context.Background(), smtpclient.Target{Addr: pf.Addr}, smtpclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return pf.Addr
		}, "deferall", ctlfile.Pending, "smtp; 421 4.7.0 sink.test Error: too many connections"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := tc.server(t)
			sp := newSpool(t)
			rel := sp.enqueue("x\n", three...)
			d := serve(t, sp, forced(t, newAgent(0), addr))
			rs := d.job(sp, rel, "d0.test")
			if len(rs) != 3 {
				t.Fatalf("%d reports, want 3", len(rs))
			}
			marks := sp.marks(rel)
			for a, r := range rs {
				if r.Status.String() != tc.want {
					t.Errorf("%s: %s %q, want %s", a, r.Status, r.Text, tc.want)
				}
				if marks[a] != tc.mark {
					t.Errorf("%s marked %q, want %q", a, marks[a], tc.mark)
				}
				n := r.Notary
				if r.Status == report.Error2 {
					// The notary went into the d line.
					for _, dl := range sp.read(rel).Diags {
						if i, _ := sp.read(rel).RcptAt(dl.RcptOffset); sp.read(rel).Rcpts[i].User == a {
							n = report.ParseNotary(dl.Notary)
						}
					}
				}
				if !strings.HasPrefix(n.Diagnostic, tc.diag) || n.Recipient != a {
					t.Errorf("%s: notary %+v, want diagnostic %q…", a, n, tc.diag)
				}
			}
		})
	}
}

// A body larger than the agent holds in memory is streamed from the queue
// file, dot-stuffed and with CRLF line ends like a small one.
func TestLargeBody(t *testing.T) {
	t.Parallel()
	sink := startSink(t)
	sp := newSpool(t)
	var body strings.Builder
	for i := 0; body.Len() <= maxInCore+maxInCore/2; i++ {
		fmt.Fprintf(&body, "line %d of a large message, caf\xc3\xa9\n.a line that starts with a dot\n", i)
	}
	rel := sp.enqueue(body.String(), "big@d0.test")
	d := serve(t, sp, forced(t, newAgent(0), sink.Addr))
	if st := statuses(d.job(sp, rel, "d0.test")); st["big@d0.test"] != "ok" {
		t.Fatalf("%v", st)
	}
	d.end()
	txs, err := sink.Transactions()
	if err != nil {
		t.Fatal(err)
	}
	if len(txs) != 1 {
		t.Fatalf("%d transactions, want 1", len(txs))
	}
	// smtp-sink dumps the message's lines as it took them off the wire,
	// dot-stuffing undone, LF-terminated, and a blank line after them.
	want := "From: sender@example.org\nSubject: zsched test\n\n" + body.String() + "\n"
	if got := txs[0].Message; !strings.HasSuffix(got, want) {
		t.Errorf("the sink got %d bytes, not the message of %d: ...%q", len(got), len(want), got[max(0, len(got)-200):])
	}
}

// A recipient cap splits a job's recipients over transactions, each with
// the same message; envelope parameters follow the N lines and what the
// server offers.
func TestRecipientCapAndDSNParameters(t *testing.T) {
	t.Parallel()
	sink := startSink(t) // offers PIPELINING, 8BITMIME, DSN
	sp := newSpool(t)
	rcpts := []any{"r1@d0.test", "r2@d0.test", "r3@d0.test", "r4@d0.test",
		ctlfile.Address{Channel: "smtp", Host: "d0.test", User: "r5@d0.test", Notify: "SUCCESS", ORCPT: "rfc822;r5@d0.test"}}
	rel := sp.enqueue("caf\xc3\xa9\n", rcpts...)
	ag := forced(t, newAgent(0), sink.Addr)
	ag.maxRcpt = 2
	d := serve(t, sp, ag)
	st := statuses(d.job(sp, rel, "d0.test"))
	for _, a := range []string{"r1@d0.test", "r2@d0.test", "r3@d0.test", "r4@d0.test"} {
		if st[a] != "ok" {
			t.Errorf("%s: %s", a, st[a])
		}
	}
	if st["r5@d0.test"] != "ok3" {
		t.Errorf("r5 (NOTIFY=SUCCESS to a DSN server): %s, want ok3", st["r5@d0.test"])
	}
	d.end()
	txs, err := sink.Transactions()
	if err != nil {
		t.Fatal(err)
	}
	if len(txs) != 3 || len(txs[0].Rcpts)+len(txs[1].Rcpts)+len(txs[2].Rcpts) != 5 {
		t.Fatalf("%d transactions %+v, want 3 carrying 5 recipients", len(txs), txs)
	}
	var withNotify int
	for _, tx := range txs {
		if len(tx.Rcpts) > 2 {
			t.Errorf("transaction with %d recipients, cap 2", len(tx.Rcpts))
		}
		if !strings.Contains(tx.Mail, "BODY=8BITMIME") || !strings.Contains(tx.Mail, "<sender@example.org>") {
			t.Errorf("MAIL args %q", tx.Mail)
		}
		if !strings.Contains(tx.Message, "Subject: zsched test") || !strings.Contains(tx.Message, "caf\xc3\xa9") {
			t.Errorf("message %q", tx.Message)
		}
		for _, r := range tx.Rcpts {
			if strings.Contains(r, "NOTIFY") {
				withNotify++
				if !strings.Contains(r, "<r5@d0.test>") || !strings.Contains(r, "NOTIFY=SUCCESS") || !strings.Contains(r, "ORCPT=rfc822;r5@d0.test") {
					t.Errorf("RCPT args %q", r)
				}
			}
		}
	}
	if withNotify != 1 {
		t.Errorf("%d RCPTs with NOTIFY, want 1 (only the recipient with an N line)", withNotify)
	}
}

// NOTIFY=SUCCESS to a server without DSN: the agent owes the success
// DSN, so ok2 and a d line with action "relayed".
func TestSuccessDSNWithoutServerDSN(t *testing.T) {
	t.Parallel()
	sink := startSink(t, "-N")
	sp := newSpool(t)
	rel := sp.enqueue("x\n", ctlfile.Address{Channel: "smtp", Host: "d0.test", User: "s@d0.test", Notify: "SUCCESS,FAILURE"})
	d := serve(t, sp, forced(t, newAgent(0), sink.Addr))
	if st := statuses(d.job(sp, rel, "d0.test")); st["s@d0.test"] != "ok2" {
		t.Fatalf("%v", st)
	}
	f := sp.read(rel)
	if len(f.Diags) != 1 || report.ParseNotary(f.Diags[0].Notary).Action != "relayed" {
		t.Fatalf("d lines %+v", f.Diags)
	}
	txs, _ := sink.Transactions()
	if len(txs) != 1 || strings.Contains(strings.Join(txs[0].Rcpts, " "), "NOTIFY") {
		t.Errorf("NOTIFY sent to a server without DSN: %+v", txs)
	}
}

// SMTPUTF8 and SIZE, as Postfix negotiates them.
func TestSMTPUTF8AndSize(t *testing.T) {
	t.Parallel()
	pf := startPostfix(t, postfix.Config{Main: []string{"message_size_limit = 4000"}})
	sp := newSpool(t)
	utf := sp.enqueue("x\n", "j\u00f6ran@d0.test")
	big := sp.enqueue(strings.Repeat("0123456789\n", 500), "big@d0.test")
	d := serve(t, sp, forced(t, newAgent(0), pf.Addr))
	// Postfix refuses a non-ASCII address unless MAIL declared SMTPUTF8.
	if st := statuses(d.job(sp, utf, "d0.test")); st["j\u00f6ran@d0.test"] != "ok" {
		t.Fatalf("UTF-8 address: %v", st)
	}
	rs := d.job(sp, big, "d0.test")
	if r := rs["big@d0.test"]; r.Status != report.Error2 || !strings.Contains(r.Text, "SIZE limit of 4000") {
		t.Fatalf("oversized message: %s %q", r.Status, r.Text)
	}
	s, err := pf.WaitSent(1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sent["j\u00f6ran@d0.test"] != 1 || s.Sent["big@d0.test"] != 0 {
		t.Errorf("sent %v", s.Sent)
	}

	// smtp-sink offers no SMTPUTF8: the address cannot be sent at all.
	sink := startSink(t)
	sp2 := newSpool(t)
	utf2 := sp2.enqueue("x\n", "j\u00f6ran@d0.test")
	d2 := serve(t, sp2, forced(t, newAgent(0), sink.Addr))
	if r := d2.job(sp2, utf2, "d0.test")["j\u00f6ran@d0.test"]; r.Status != report.Error2 || !strings.Contains(r.Text, "SMTPUTF8") {
		t.Fatalf("UTF-8 address to a server without SMTPUTF8: %s %q", r.Status, r.Text)
	}
}

// Destinations are found by MX in preference order, falling back to the
// next MX when one does not answer, and to A records without MX; a null MX
// fails permanently, a DNS failure defers the site.
func TestMXLookup(t *testing.T) {
	t.Parallel()
	pf := startPostfix(t, postfix.Config{})
	_, p, _ := net.SplitHostPort(pf.Addr)
	port, _ := strconv.Atoi(p)
	r := &smtpclient.StaticResolver{
		MX: map[string][]*net.MX{
			// 127.0.0.2 is loopback too, but Postfix listens on 127.0.0.1 only.
			"mx.test":   {{Host: "backup.mx.test.", Pref: 20}, {Host: "primary.mx.test.", Pref: 10}},
			"null.test": {{Host: ".", Pref: 0}},
		},
		Addr: map[string][]net.IPAddr{
			"primary.mx.test": {{IP: net.ParseIP("127.0.0.2")}},
			"backup.mx.test":  {{IP: net.ParseIP("127.0.0.1")}},
			"a-only.test":     {{IP: net.ParseIP("127.0.0.1")}},
		},
		Fail: map[string]bool{"servfail.test": true},
	}
	sp := newSpool(t)
	ag := newAgent(port)
	ag.resolver = r
	d := serve(t, sp, ag)
	cases := []struct{ dest, want, notary string }{
		{"mx.test", "ok", "dns; backup.mx.test (127.0.0.1|"},
		{"a-only.test", "ok", "dns; a-only.test (127.0.0.1|"},
		{"null.test", "error2", ""},
		{"servfail.test", "deferall", ""},
		{"nxdomain.test", "deferall", ""},
	}
	for _, tc := range cases {
		rel := sp.enqueue("x\n", "u@"+tc.dest)
		r := d.job(sp, rel, tc.dest)["u@"+tc.dest]
		if r.Status.String() != tc.want || !strings.HasPrefix(r.Notary.RemoteMTA, tc.notary) {
			t.Errorf("%s: %s (remote %q) %q, want %s", tc.dest, r.Status, r.Notary.RemoteMTA, r.Text, tc.want)
		}
	}
	if !strings.Contains(d.logs.String(), "primary.mx.test[127.0.0.2:") {
		t.Errorf("the preferred MX was not tried first:\n%s", d.logs.String())
	}
	s, _ := pf.WaitSent(2, 10*time.Second)
	if s.Sent["u@mx.test"] != 1 || s.Sent["u@a-only.test"] != 1 {
		t.Errorf("sent %v", s.Sent)
	}
}

// STARTTLS is used when offered; a route map sets the policy per
// destination; "verify" against an untrusted certificate defers the site.
func TestTLSPolicy(t *testing.T) {
	t.Parallel()
	pf := startPostfix(t, postfix.Config{TLS: true})
	hop := "[" + strings.Replace(pf.Addr, ":", "]:", 1)
	routes, err := smtpclient.ParseRoutes("routes", []byte(
		"plain.test "+hop+" tls=none\n"+
			"strict.test "+hop+" tls=verify\n"+
			"* "+hop+"\n"), 25)
	if err != nil {
		t.Fatal(err)
	}
	sp := newSpool(t)
	ag := newAgent(0)
	ag.routes = routes
	d := serve(t, sp, ag)
	for _, tc := range []struct{ dest, want string }{{"may.test", "ok"}, {"plain.test", "ok"}, {"strict.test", "deferall"}} {
		rel := sp.enqueue("x\n", "u@"+tc.dest)
		if r := d.job(sp, rel, tc.dest)["u@"+tc.dest]; r.Status.String() != tc.want {
			t.Errorf("%s: %s %q, want %s", tc.dest, r.Status, r.Text, tc.want)
		}
	}
	d.end()
	s, _ := pf.WaitSent(2, 10*time.Second)
	if s.TLS != 1 || len(s.Sent) != 2 {
		t.Errorf("%d TLS sessions, %v sent; want 1 (may.test) and 2", s.TLS, s.Sent)
	}
}

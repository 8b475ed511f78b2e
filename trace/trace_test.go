package trace

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"
)

func readFile(t *testing.T, path string, f Format) ([]Record, Stats) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, st := readAllFrom(t, string(b), f)
	checkRecords(t, recs, st)
	return recs, st
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// TestZschedTextLog reads lines a real daemon wrote (lab simulate-validate,
// run A, log_format = "text"): outcomes among the daemon's other lines.
func TestZschedTextLog(t *testing.T) {
	recs, st := readFile(t, "testdata/zsched-text.log", Zsched)
	if st.Lines != 66 || len(recs) != 45 || st.Malformed != 0 {
		t.Fatalf("lines %d records %d malformed %d (%v)", st.Lines, len(recs), st.Malformed, st.Examples)
	}
	// 2026-11-25T10:18:52.139Z [INFO]  zsched: outcome: msg=9984889 rcpt=105 to=u0.0@fast59.test channel=smtp host=fast59.test ta=3258 status=ok3 delay=268ms attempts=1 next="" text="delivered to the sink"
	r := recs[0]
	want := Record{At: mustTime(t, "2026-11-25T10:18:52.139Z"), Arrival: mustTime(t, "2026-11-25T10:18:51.871Z"),
		Msg: "9984889", Rcpt: "105", Channel: "smtp", Host: "fast59.test", Status: Delivered, Word: "ok3",
		Attempt: 1, Agent: "3258", Job: 1, Service: -1, Setup: -1, Text: "delivered to the sink"}
	if r != want {
		t.Errorf("first record\n got %+v\nwant %+v", r, want)
	}
	count := map[string]int{}
	for _, r := range recs {
		count[r.Word]++
	}
	if count["ok3"] == 0 || count["deferall"] == 0 || count["retryat"] == 0 {
		t.Errorf("words %v", count)
	}
	// The two recipients refused in one session share its job; its
	// deferral carries the retry time.
	var refused []Record
	for _, r := range recs {
		if r.Msg == "9978535" {
			refused = append(refused, r)
		}
	}
	if len(refused) != 2 || refused[0].Job != refused[1].Job || refused[0].Status != Refused ||
		!refused[0].Next.Equal(mustTime(t, "2026-11-25T10:20:09Z")) {
		t.Errorf("refused session %+v", refused)
	}
	// A retry: its attempt count and the arrival of its first attempt.
	for _, r := range recs {
		if r.Msg == "9984885" && r.Rcpt == "105" && r.Attempt == 2 {
			if !r.Arrival.Equal(mustTime(t, "2026-11-25T10:18:51.895Z")) {
				t.Errorf("retry's arrival %v", r.Arrival)
			}
			return
		}
	}
	t.Error("no second attempt read")
}

// TestZschedJSONLog reads lines a real daemon wrote with log_format =
// "json" (run B): numbers and strings as hclog writes them.
func TestZschedJSONLog(t *testing.T) {
	recs, st := readFile(t, "testdata/zsched-json.log", Zsched)
	if st.Lines != 60 || len(recs) != 43 || st.Malformed != 0 {
		t.Fatalf("lines %d records %d malformed %d (%v)", st.Lines, len(recs), st.Malformed, st.Examples)
	}
	// {"@level":"info","@message":"outcome","@module":"zsched","@timestamp":"2026-11-25T10:22:32.663773Z","attempts":1,"channel":"smtp","delay":"61ms","host":"fast258.test","msg":"9986107","next":"","rcpt":199,"status":"ok3","ta":10611,...}
	r := recs[0]
	if r.Msg != "9986107" || r.Rcpt != "199" || r.Agent != "10611" || r.Status != Delivered || r.Attempt != 1 ||
		!r.At.Equal(mustTime(t, "2026-11-25T10:22:32.663773Z")) || r.At.Sub(r.Arrival) != 61*time.Millisecond {
		t.Errorf("first record %+v", r)
	}
	last := recs[len(recs)-1]
	if last.Status != Refused || last.Word != "deferall" || last.Attempt != 2 || last.At.Sub(last.Arrival) != 111411*time.Millisecond {
		t.Errorf("last record %+v", last)
	}
}

// TestStatelogLines reads the statelog's layouts: one line per recipient
// outcome with the outcome line's keys, after a timestamp or with a time
// key, as text or JSON. (The statelog is being written by another change;
// these lines follow its stated key set, not its output.)
func TestStatelogLines(t *testing.T) {
	log := `2026-11-25T10:18:52.139Z msg=9984889 rcpt=105 to=a@x.test channel=smtp host=X.test ta=3258 status=ok3 delay=268ms attempts=1 next="" text="delivered"
time=2026-11-25T10:18:53.000Z msg=9984890 rcpt=105 to=b@y.test channel=smtp host=y.test ta=3258 status=deferred delay=1s attempts=1 next=2026-11-25T10:19:53Z text="452 4.2.2 \"full\""
{"time":"2026-11-25T10:18:54Z","msg":"9984891","rcpt":"105","channel":"smtp","host":"z.test","ta":"12","status":"error","delay":"2.5s","attempts":3,"next":"","text":"550"}
2026-11-25T10:18:55.000Z [INFO]  zsched: complete: msg=9984889
2026-11-25T10:18:55.000Z [INFO]  zsched: re-reading control file: msg=1 status=x delay=y error="gone"
`
	recs, st := readAllFrom(t, log, Zsched)
	checkRecords(t, recs, st)
	if len(recs) != 3 || st.Malformed != 0 {
		t.Fatalf("records %+v stats %+v", recs, st)
	}
	if recs[0].Host != "x.test" || recs[0].Status != Delivered || recs[0].At.Sub(recs[0].Arrival) != 268*time.Millisecond {
		t.Errorf("text line %+v", recs[0])
	}
	if recs[1].Status != Deferred || recs[1].Text != `452 4.2.2 "full"` || !recs[1].Next.Equal(mustTime(t, "2026-11-25T10:19:53Z")) {
		t.Errorf("time= line %+v", recs[1])
	}
	if recs[2].Status != Failed || recs[2].Attempt != 3 || recs[2].Rcpt != "105" {
		t.Errorf("JSON line %+v", recs[2])
	}
}

// TestPostfixMaillog reads a maillog Postfix 3.7 wrote
// (TestPostfixMaillogLive -trace.write): deliveries joined to their queue
// ids, every kind of deferral told apart, arrivals placed from delay=.
func TestPostfixMaillog(t *testing.T) {
	recs, st := readFile(t, "testdata/postfix-3.7.maillog", Postfix)
	if st.Lines != 107 || st.Malformed != 0 {
		t.Fatalf("lines %d malformed %d (%v)", st.Lines, st.Malformed, st.Examples)
	}
	by := map[string]Record{}
	for _, r := range recs {
		by[r.Rcpt] = r
	}
	for _, c := range []struct {
		rcpt   string
		status Status
		host   string
		agent  string
	}{
		{"a0@limited.test", Delivered, "limited.test", "3038"},
		{"b0@limited.test", Refused, "limited.test", "3043"}, // 421: too many connections
		{"x0@down.test", Refused, "down.test", "3059"},       // connect: connection refused
		{"e0@limited.test", Suspended, "limited.test", "3070"},
		{"bad@reject.test", Failed, "reject.test", "3046"},
		{"ok@reject.test", Delivered, "reject.test", "3051"},
	} {
		r, ok := by[c.rcpt]
		if !ok || r.Status != c.status || r.Host != c.host || r.Agent != c.agent || r.Channel != "smtp" || r.Attempt != 1 {
			t.Errorf("%s: %+v, want %v at %s by %s", c.rcpt, r, c.status, c.host, c.agent)
		}
	}
	// Nov 25 10:33:44 … 3F596986E83: to=<a0@limited.test>, …, delay=3.4, delays=0.4/0.37/1.1/1.5, …, status=sent
	a0, a1 := by["a0@limited.test"], by["a1@limited.test"]
	if a0.Msg != "3F596986E83" || a0.Job != a1.Job || a0.Service != 2600*time.Millisecond || a0.Setup != 1100*time.Millisecond {
		t.Errorf("a delivery of two recipients: %+v %+v", a0, a1)
	}
	sec := mustTime(t, "2026-11-25T10:33:44Z")
	if a0.At.Before(sec) || !a0.At.Before(sec.Add(time.Second)) || a0.At.Sub(a0.Arrival) != 3400*time.Millisecond || !a1.At.After(a0.At) {
		t.Errorf("placed in its second: %v %v, arrival %v", a0.At, a1.At, a0.Arrival)
	}
	// Its queue active line (10:33:41) was b+c+d = 2.97 s before it: the
	// two places agree on a time between 10:33:44 and 10:33:44.97.
	if a0.At.After(sec.Add(970*time.Millisecond + 60*time.Millisecond)) {
		t.Errorf("not anchored on its queue active line: %v", a0.At)
	}
}

// TestMalformedLinesSkipped mixes broken lines into real ones: each is
// skipped and counted, the rest is read, nothing is an error.
func TestMalformedLinesSkipped(t *testing.T) {
	b, err := os.ReadFile("testdata/zsched-text.log")
	if err != nil {
		t.Fatal(err)
	}
	good, _ := readAllFrom(t, string(b), Zsched)
	bad := []string{
		`2026-11-25T10:18:52.139Z [INFO]  zsched: outcome: msg=1 rcpt=105 channel=smtp host=h status=ok3 delay=soon attempts=1`,
		`2026-11-25T10:18:52.139Z [INFO]  zsched: outcome: msg=1 rcpt=105 channel=smtp host=h status=sent delay=1s attempts=1`,
		`2026-11-25T10:18:52.139Z [INFO]  zsched: outcome: msg=1 rcpt=105 channel=smtp host=h status=ok3 delay=1s attempts=-2`,
		`2026-11-25T10:18:52.139Z [INFO]  zsched: outcome: msg=1 rcpt=105 channel=smtp host=h status=ok3 delay=1s attempts=1 text="unterminated`,
		`[INFO]  zsched: outcome: msg=1 rcpt=105 channel=smtp host=h status=ok3 delay=1s attempts=1`,
		`{"@message":"outcome","msg":"1","status":"ok3","delay":"1s",`,
		`{"@timestamp":"2026-11-25T10:18:52Z","@message":"outcome","msg":"1","channel":"smtp","status":"ok3","delay":"1s","attempts":1,"next":"tomorrow"}`,
		`2026-11-25T10:18:52.139Z [INFO]  zsched: outcome: msg=1 rcpt=105 channel=smtp host=h status=ok3 delay=1s attempts=1 ` + strings.Repeat("x", maxLine),
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var mixed []string
	for i, l := range lines {
		mixed = append(mixed, l)
		if i < len(bad) {
			mixed = append(mixed, bad[i])
		}
	}
	recs, st := readAllFrom(t, strings.Join(mixed, "\n")+"\n", Zsched)
	checkRecords(t, recs, st)
	if len(recs) != len(good) || st.Malformed != len(bad) || st.Lines != len(lines)+len(bad) {
		t.Fatalf("read %d records (want %d), %d malformed of %d lines: %v", len(recs), len(good), st.Malformed, st.Lines, st.Examples)
	}
	if len(st.Examples) != maxExamples || !strings.Contains(st.Examples[0], "line 2: bad delay") {
		t.Errorf("examples %q", st.Examples)
	}

	pf := `Nov 25 10:33:44 client postfix/smtp[1]: ABCDEF123: to=<a@b.test>, relay=x, delay=zero, delays=0/0/0/0, dsn=2.0.0, status=sent (ok)
Nov 25 10:33:44 client postfix/smtp[1]: ABCDEF123: to=<a@b.test>, relay=x, delay=1, delays=0/0/0, dsn=2.0.0, status=sent (ok)
Nov 25 10:33:44 client postfix/smtp[1]: ABCDEF123: to=<a@b.test relay=x
Nov 25 10:33:44 client postfix/smtp[1]: ABCDEF123: to=<a@b.test>, relay=x, delay=1
Nov 25 10:33:44 client postfix/smtp[1]: ABCDEF123: to=<a@b.test>, relay=x, delay=1, delays=0/0/0.5/0.5, dsn=2.0.0, status=sent (ok)
`
	recs, st = readAllFrom(t, pf, Postfix)
	checkRecords(t, recs, st)
	if len(recs) != 1 || st.Malformed != 4 {
		t.Errorf("postfix: %d records, %d malformed: %v", len(recs), st.Malformed, st.Examples)
	}
}

// TestPostfixTimestamps: a syslog year turns at January; RFC 3339 stamps
// (rsyslog's high-precision format) are taken as they are; an expired
// message expires the recipients it still holds.
func TestPostfixTimestamps(t *testing.T) {
	log := `Dec 31 23:59:59 h postfix/qmgr[2]: ABCDE12345: from=<s@x>, size=1, nrcpt=2 (queue active)
Dec 31 23:59:59 h postfix/smtp[3]: ABCDE12345: to=<a@b.test>, relay=none, delay=0.5, delays=0/0/0.5/0, dsn=4.4.1, status=deferred (connect to b.test[1.2.3.4]:25: Connection refused)
Jan  1 00:00:00 h postfix/smtp[3]: ABCDE12345: to=<c@b.test>, relay=b.test[1.2.3.4]:25, delay=1.2, delays=0/0/0.2/0.2, dsn=4.2.2, status=deferred (host b.test[1.2.3.4] said: 452 4.2.2 mailbox full (in reply to RCPT TO command))
2026-01-06T00:00:00.250000+00:00 h postfix/qmgr[2]: ABCDE12345: from=<s@x>, status=expired, returned to sender
`
	recs, st := readAllFrom(t, log, Postfix)
	checkRecords(t, recs, st)
	if len(recs) != 4 {
		t.Fatalf("records %+v (%+v)", recs, st)
	}
	if recs[0].At.Year() != 2026 || recs[1].At.Year() != 2027 {
		t.Errorf("years %v %v", recs[0].At, recs[1].At)
	}
	if recs[0].Status != Refused || recs[1].Status != Deferred {
		t.Errorf("deferrals %v %v", recs[0].Status, recs[1].Status)
	}
	for _, r := range recs[2:] {
		if r.Status != Expired || !r.At.Equal(mustTime(t, "2026-01-06T00:00:00.25Z")) || r.Attempt != 1 {
			t.Errorf("expiry %+v", r)
		}
	}
}

func TestDetect(t *testing.T) {
	for path, want := range map[string]Format{
		"testdata/zsched-text.log": Zsched, "testdata/zsched-json.log": Zsched, "testdata/postfix-3.7.maillog": Postfix,
	} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := Detect(bufio.NewReader(f)); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
		f.Close()
	}
}

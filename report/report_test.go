package report

import (
	"errors"
	"strings"
	"testing"
)

func TestParseObservedLines(t *testing.T) {
	// Lines as ZMailer's smtp agent wrote them (zmailer-ta-observed.md A1, A2, A4).
	tests := []struct {
		line   string
		inum   int64
		off    int64
		status Status
		retry  string
		action string
		text   string
	}{
		{"10002561/121\t\tok3 \r<<- MAIL From:<sender@example.org>", 10002561, 121, OK3, "", "", "\r<<- MAIL From:<sender@example.org>"},
		{"10002568/164\ttmp1@dest.test\x01failed\x014.2.1\x01smtp; 451 (x)\x01X-IP-addr; [127.0.0.1]\x01smtp[21148]\tdeferred \rtext", 10002568, 164, Deferred, "", "failed", "\rtext"},
		{"10002601/121\t\tretryat +60 smtp; 500 (connect to 127.0.0.1: Connection refused)", 10002601, 121, RetryAt, "+60", "", "smtp; 500 (connect to 127.0.0.1: Connection refused)"},
		{"5/0\t\tdeferall", 5, 0, DeferAll, "", "", ""},
		{"7/9\t\terror2 message file is missing(!)", 7, 9, Error2, "", "", "message file is missing(!)"},
	}
	for _, tc := range tests {
		l, err := Parse(tc.line)
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if l.Inum != tc.inum || l.Offset != tc.off || l.Status != tc.status || l.Retry != tc.retry || l.Notary.Action != tc.action || l.Text != tc.text {
			t.Errorf("%q parsed as %+v", tc.line, l)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, line := range []string{
		"", "#hungry", "12/34 ok", "12\t\tok", "a/1\t\tok", "1/b\t\tok", "1/1\t\tdelivered",
		"1/1\tnotary only", "1/1\t\tretryat soon", "1/1\t\tretryat", "-1/1\t\tok",
		"1/1\t\t" + strings.Repeat("x", MaxLine),
	} {
		if _, err := Parse(line); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err %v, want ErrMalformed", line, err)
		}
	}
}

func TestClasses(t *testing.T) {
	want := map[Status]Class{
		OK: Delivered, OK2: Delivered, OK3: Delivered, Error: Permanent, Error2: Permanent,
		Deferred: Transient, Deferback: Transient, RetryAt: SiteFailed, DeferAll: SiteFailed,
	}
	for st, c := range want {
		if st.Class() != c {
			t.Errorf("%s: class %s, want %s", st, st.Class(), c)
		}
		if got, ok := ParseStatus(st.String()); !ok || got != st {
			t.Errorf("ParseStatus(%q) = %v, %v", st.String(), got, ok)
		}
	}
	if _, ok := ParseStatus("invalid"); ok {
		t.Error("the zero status parses")
	}
}

func TestRetryAfter(t *testing.T) {
	now := int64(1_800_000_000)
	for _, tc := range []struct {
		arg  string
		want int64
	}{{"+60", 60}, {"+0", 0}, {"1800000300", 300}, {"1700000000", 0}} {
		l := Line{Status: RetryAt, Retry: tc.arg}
		if got, ok := l.RetryAfter(now); !ok || got != tc.want {
			t.Errorf("retryat %s: %d, %v; want %d", tc.arg, got, ok, tc.want)
		}
	}
	if _, ok := (Line{Status: Deferred}).RetryAfter(now); ok {
		t.Error("deferred has a retry time")
	}
}

func TestFormatRoundTrip(t *testing.T) {
	l := Line{Inum: 42, Offset: 121, Status: RetryAt, Retry: "+30", Text: "two\nlines",
		Notary: Notary{Recipient: "a@b", Action: "failed", Status: "4.4.1", Diagnostic: "smtp; 421\tbusy", RemoteMTA: "mx", Agent: "smtp[1]"}}
	s := l.String()
	if strings.ContainsAny(s, "\n") || strings.Count(s, "\t") != 2 {
		t.Fatalf("framing broken: %q", s)
	}
	got, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Inum != 42 || got.Offset != 121 || got.Retry != "+30" || got.Text != "two\rlines" ||
		got.Notary.Diagnostic != "smtp; 421 busy" || got.Notary.Agent != "smtp[1]" {
		t.Fatalf("round trip: %+v", got)
	}
	if (Notary{}).String() != "" {
		t.Error("a zero notary is not empty on the wire")
	}
}

func FuzzParse(f *testing.F) {
	f.Add("10002561/121\t\tok3 \r<<- MAIL From:<sender@example.org>")
	f.Add("1/1\ta\x01b\x01c\x01d\x01e\x01f\tretryat +60 text")
	f.Add("1/1\t\tdeferall")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := Parse(s)
		if err != nil {
			return
		}
		// Whatever parses must format to a line that parses the same.
		again, err := Parse(l.String())
		if err != nil {
			t.Fatalf("%q formats to %q which does not parse: %v", s, l.String(), err)
		}
		if again.Inum != l.Inum || again.Offset != l.Offset || again.Status != l.Status || again.Retry != l.Retry {
			t.Fatalf("%q: %+v then %+v", s, l, again)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	line := "10002568/164\ttmp1@dest.test\x01failed\x014.2.1\x01smtp; 451 (x)\x01X-IP-addr; [127.0.0.1]\x01smtp[21148]\tdeferred \rtext"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(line); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseNotary checks the field split against strings.SplitN, the
// definition: missing trailing fields empty, a sixth field keeping any
// further Ctrl-A.
func TestParseNotary(t *testing.T) {
	for _, s := range []string{
		"", "a", "a\x01", "\x01\x01", "a\x01b\x01c", "a\x01b\x01c\x01d\x01e\x01f",
		"a\x01b\x01c\x01d\x01e\x01f\x01g\x01h", "\x01\x01\x01\x01\x01", "\x01\x01\x01\x01\x01\x01",
	} {
		var want Notary
		if s != "" {
			f := strings.SplitN(s, "\x01", 6)
			dst := []*string{&want.Recipient, &want.Action, &want.Status, &want.Diagnostic, &want.RemoteMTA, &want.Agent}
			for i := range f {
				*dst[i] = f[i]
			}
		}
		if got := ParseNotary(s); got != want {
			t.Errorf("ParseNotary(%q) = %q, want %q", s, got, want)
		}
	}
	line := "10002568/164\ttmp1@dest.test\x01failed\x014.2.1\x01smtp; 451 (x)\x01X-IP-addr; [127.0.0.1]\x01smtp[21148]\tdeferred \rtext"
	if n := testing.AllocsPerRun(100, func() { Parse(line) }); n != 0 {
		t.Errorf("Parse of a report with a notary: %v allocations, want 0", n)
	}
}

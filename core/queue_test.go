package core

import (
	"math/rand"
	"testing"
	"time"

	"zsched/config"
	"zsched/vertex"
)

// TestParseDest: one destination pattern for hold, release, flush, ETRN
// and -dest (issue 17: `hold 'smtp/*.example'` stored a literal host, and
// `flush dead.example` took the host for a channel and matched nothing).
func TestParseDest(t *testing.T) {
	for _, tc := range []struct {
		sel           string
		channel, host string
		match, miss   [][2]string
	}{
		{"", "*", "*", [][2]string{{"smtp", "a.test"}}, nil},
		{"smtp/*.example", "smtp", "*.example", [][2]string{{"smtp", "mx.example"}, {"SMTP", "MX.EXAMPLE"}},
			[][2]string{{"local", "mx.example"}, {"smtp", "example"}}},
		{"dead.example", "*", "dead.example", [][2]string{{"smtp", "dead.example"}, {"local", "dead.example"}},
			[][2]string{{"smtp", "x.dead.example"}}},
		{"@example.org", "*", "{example.org,*.example.org}", [][2]string{{"smtp", "example.org"}, {"smtp", "a.b.example.org"}},
			[][2]string{{"smtp", "badexample.org"}}},
		{"smtp/", "smtp", "*", [][2]string{{"smtp", "anything"}}, [][2]string{{"local", "anything"}}},
	} {
		p, err := ParseDest(tc.sel)
		if err != nil {
			t.Fatalf("%q: %v", tc.sel, err)
		}
		if p.Channel != tc.channel || p.Host != tc.host {
			t.Fatalf("%q: %+v, want %s/%s", tc.sel, p, tc.channel, tc.host)
		}
		for _, m := range tc.match {
			if !p.Match(m[0], m[1]) {
				t.Fatalf("%q does not match %s/%s", tc.sel, m[0], m[1])
			}
		}
		for _, m := range tc.miss {
			if p.Match(m[0], m[1]) {
				t.Fatalf("%q matches %s/%s", tc.sel, m[0], m[1])
			}
		}
	}
	for _, bad := range []string{"smtp/[a", "@", "smtp/{a,b"} {
		if _, err := ParseDest(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// TestFind: queue ids resolve to the message that has them; an id whose
// name is now another message's is refused, not taken for it.
func TestFind(t *testing.T) {
	c, err := config.Parse("test.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n[[clause]]\nselect = \"*/*\"\ncommand = \"true\"\nqueueonly = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	s := New(c, nil, rand.New(rand.NewSource(1)))
	if err := s.Arrive(now, Arrival{Inum: 42, Path: "42", ID: "42", QID: "42.abc", Arrival: now,
		Groups: []Group{{Channel: "local", Host: "h", Rcpts: []vertex.Rcpt{{Offset: 100, User: "u"}}}}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{"42.abc": true, "42": true} {
		lk, err := s.Find(id)
		if err != nil || lk.InCore != want {
			t.Fatalf("Find(%q) = %+v, %v", id, lk, err)
		}
	}
	if _, err := s.Find("42.xyz"); err == nil {
		t.Fatal("a queue id of a gone message resolved to the one that has its name now")
	}
	if lk, err := s.Find("43.abc"); err != nil || lk.InCore {
		t.Fatalf("Find of a message not in core: %+v, %v", lk, err)
	}
}

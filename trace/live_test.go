package trace

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"zsched/internal/need"
	"zsched/postfix"
	"zsched/smtpclient"
)

var writeSample = flag.Bool("trace.write", false, "TestPostfixMaillogLive: write the maillog of its run to testdata/postfix-3.7.maillog")

// needPostfix skips a test that needs private Postfix instances where they
// cannot run, and fails it in CI (ZSCHED_CI=1), which must run it.
func needPostfix(t *testing.T) {
	t.Helper()
	need.Met(t, "the postfix package, as root", postfix.Available())
}

// postfixDir returns a directory Postfix's unprivileged daemons can reach.
func postfixDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestPostfixMaillogLive runs Postfix itself as the scheduler — a private
// instance relaying to a second one that takes one session at a time and
// rejects one recipient, and to a port nobody listens on — and reads the
// maillog Postfix wrote: every kind of outcome, as Postfix logs it today.
func TestPostfixMaillogLive(t *testing.T) {
	needPostfix(t)
	dir := postfixDir(t)
	srv, err := postfix.Start(postfix.Config{Dir: filepath.Join(dir, "server"), ConnectionLimit: 1, ProcessLimit: 4,
		RcptDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	rej, err := postfix.Start(postfix.Config{Dir: filepath.Join(dir, "reject"),
		Reject: map[string]string{"bad@reject.test": "550 5.1.1 user unknown"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rej.Stop() })
	closed, err := postfix.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := postfix.Start(postfix.Config{Dir: filepath.Join(dir, "client"),
		Main: []string{"myhostname = client.test", "default_transport = smtp",
			"relayhost = [127.0.0.1]:" + strconv.Itoa(srv.Port),
			"transport_maps = inline:{down.test=smtp:[127.0.0.1]:" + strconv.Itoa(closed) +
				", reject.test=smtp:[127.0.0.1]:" + strconv.Itoa(rej.Port) + "}",
			"smtp_connection_cache_on_demand = no",
			"queue_run_delay = 1h", "minimal_backoff_time = 1h", "maximal_backoff_time = 1h"},
		Master: []string{"smtp unix - - n - - smtp"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Stop() })
	msgs := [][]string{
		{"a0@limited.test", "a1@limited.test"}, {"b0@limited.test", "bad@reject.test"}, {"ok@reject.test"},
		{"c0@limited.test"}, {"d0@limited.test"}, {"e0@limited.test"}, {"f0@limited.test"},
		{"x0@down.test"}, {"y0@down.test"}, {"z0@down.test"},
	}
	want := 0
	for _, rcpts := range msgs {
		c, err := smtpclient.Dial(context.Background(), smtpclient.Target{Addr: cli.Addr}, smtpclient.Options{HeloName: "inject.test"})
		if err != nil {
			t.Fatal(err)
		}
		env := smtpclient.Envelope{From: "s@example.org"}
		for _, r := range rcpts {
			env.Rcpts = append(env.Rcpts, smtpclient.Rcpt{Addr: r})
			want++
		}
		if _, err := c.Send(env, strings.NewReader("Subject: t\n\nbody\n")); err != nil {
			t.Fatal(err)
		}
		c.Quit()
	}
	// The first attempt of each recipient (the bounce of bad@reject.test
	// to s@example.org comes on top).
	attempts := func(log string) int {
		return strings.Count(log, ": to=<") - strings.Count(log, ": to=<s@example.org>")
	}
	var log string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if log, err = cli.Log(); err != nil {
			t.Fatal(err)
		}
		if attempts(log) >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d first attempts logged:\n%s", attempts(log), want, log)
		}
	}
	if *writeSample {
		if err := os.WriteFile("testdata/postfix-3.7.maillog", []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recs, st := readAllFrom(t, log, Postfix)
	checkRecords(t, recs, st)
	if st.Malformed != 0 {
		t.Errorf("malformed lines in Postfix's own log: %v", st.Examples)
	}
	by := map[string]Record{}
	count := map[Status]int{}
	for _, r := range recs {
		if r.Rcpt == "s@example.org" {
			continue // the bounce of bad@reject.test, on its way
		}
		by[r.Rcpt] = r
		count[r.Status]++
		if r.Attempt != 1 || r.Channel != "smtp" {
			t.Errorf("first pass only, all for smtp destinations: %+v", r)
		}
	}
	if len(by) != want {
		t.Fatalf("%d recipients in the records, want %d: %v", len(by), want, recs)
	}
	if r := by["bad@reject.test"]; r.Status != Failed || r.Host != "reject.test" {
		t.Errorf("the rejected recipient: %+v", r)
	}
	// Its service time is parsed from delays= (-1 without it); over
	// loopback c and d may both print as 0, so 0 is a time like another.
	if r := by["ok@reject.test"]; r.Status != Delivered || r.Service < 0 {
		t.Errorf("a delivered recipient: %+v", r)
	}
	// Which limited.test sessions found the one slot taken, and whether
	// Postfix then held the destination back, is Postfix's timing.
	for a, r := range by {
		switch {
		case strings.HasSuffix(a, "@limited.test") && r.Status != Delivered && r.Status != Refused && r.Status != Suspended,
			strings.HasSuffix(a, "@down.test") && r.Status != Refused && r.Status != Suspended:
			t.Errorf("%s: %+v", a, r)
		}
	}
	if count[Refused] == 0 || count[Delivered] < 2 {
		t.Errorf("want refused sessions (421, connection refused) and deliveries, got %v", count)
	}
}

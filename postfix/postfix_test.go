package postfix

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"testing"
	"time"

	"zsched/internal/need"
	"zsched/smtpclient"
)

// dir returns a test directory the postfix user can reach.
func dir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func start(t *testing.T, cfg Config) *Instance {
	t.Helper()
	need.Met(t, "the postfix package, as root", Available())
	cfg.Dir = dir(t)
	in, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Stop(); err != nil {
			t.Error(err)
		}
	})
	return in
}

func send(t *testing.T, addr string, rcpts ...string) (*smtpclient.Tx, error) {
	t.Helper()
	c, err := smtpclient.Dial(context.Background(), smtpclient.Target{Addr: addr}, smtpclient.Options{HeloName: "client.test"})
	if err != nil {
		return nil, err
	}
	defer c.Quit()
	env := smtpclient.Envelope{From: "s@e.test"}
	for _, r := range rcpts {
		env.Rcpts = append(env.Rcpts, smtpclient.Rcpt{Addr: r})
	}
	return c.Send(env, strings.NewReader("Subject: t\n\nbody\n"))
}

func TestInstanceDeliversAndRejects(t *testing.T) {
	in := start(t, Config{Reject: map[string]string{"bad@d1.test": "550 5.1.1 user unknown"}})
	tx, err := send(t, in.Addr, "a@d0.test", "bad@d1.test", "b@d1.test")
	if err != nil {
		t.Fatal(err)
	}
	if tx.Rcpts[1].Code != 550 || tx.Rcpts[1].Enhanced != "5.1.1" || tx.Final.Class() != 2 {
		t.Fatalf("tx %+v", tx)
	}
	s, err := in.WaitSent(2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sent["a@d0.test"] != 1 || s.Sent["b@d1.test"] != 1 || s.Sent["bad@d1.test"] != 0 {
		t.Errorf("sent %v", s.Sent)
	}
	if !strings.HasPrefix(s.Rejected["bad@d1.test"], "550 5.1.1") {
		t.Errorf("rejected %v", s.Rejected)
	}
	pgid := in.cmd.Process.Pid
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	if groupAlive(pgid) {
		t.Error("processes of the instance survive Stop")
	}
}

// Postfix answers a client over smtpd_client_connection_count_limit with
// 421 in place of the greeting, which the agent must map to deferall.
func TestConnectionLimitAnswers421(t *testing.T) {
	in := start(t, Config{ConnectionLimit: 2, ProcessLimit: 10})
	var conns []*smtpclient.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 2 {
		c, err := smtpclient.Dial(context.Background(), smtpclient.Target{Addr: in.Addr}, smtpclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	_, err := smtpclient.Dial(context.Background(), smtpclient.Target{Addr: in.Addr}, smtpclient.Options{})
	var e *smtpclient.Error
	if !errors.As(err, &e) || e.Stage != smtpclient.StageGreeting || e.Reply.Code != 421 {
		t.Fatalf("third session: %v, want a 421 greeting", err)
	}
	t.Logf("over the limit: %s", e.Reply)
	// smtpd logs the refusal through postlogd, which may write it after
	// the client has read the 421.
	deadline := time.Now().Add(15 * time.Second)
	for {
		s, err := in.Summary()
		if err != nil {
			t.Fatal(err)
		}
		if s.TooMany == 1 {
			break
		}
		if s.TooMany > 1 || time.Now().After(deadline) {
			t.Fatalf("log shows %d refusals for too many connections, want 1", s.TooMany)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRcptDelay(t *testing.T) {
	const delay = 150 * time.Millisecond
	in := start(t, Config{RcptDelay: delay})
	t0 := time.Now()
	if _, err := send(t, in.Addr, "a@d0.test", "b@d0.test"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el < 2*delay {
		t.Errorf("two recipients took %v, want at least %v", el, 2*delay)
	}
}

func TestTLS(t *testing.T) {
	in := start(t, Config{TLS: true})
	c, err := smtpclient.Dial(context.Background(), smtpclient.Target{Name: "[127.0.0.1]", Addr: in.Addr}, smtpclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLS() {
		t.Error("no TLS with a server offering STARTTLS")
	}
	c.Quit()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, _ := in.Summary()
		if s.TLS == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("maillog shows %d TLS sessions, want 1", s.TLS)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSinkFailsChosenCommands(t *testing.T) {
	need.Met(t, "the postfix package, as root", Available())
	need.Met(t, "smtp-sink (the postfix package)", SinkAvailable())
	s, err := StartSink(dir(t), 0, "-Q", "RCPT")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	_, err = send(t, s.Addr, "a@d0.test")
	var e *smtpclient.Error
	if !errors.As(err, &e) || e.Stage != smtpclient.StageRcpt || e.Reply.Code != 421 {
		t.Fatalf("err %v, want 421 at RCPT", err)
	}

	ok, err := StartSink(dir(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ok.Stop)
	if _, err := send(t, ok.Addr, "a@d0.test", "b@d0.test"); err != nil {
		t.Fatal(err)
	}
	var txs []Transaction
	deadline := time.Now().Add(5 * time.Second)
	for len(txs) == 0 && time.Now().Before(deadline) {
		txs, err = ok.Transactions()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(txs) != 1 || len(txs[0].Rcpts) != 2 || !strings.Contains(txs[0].Mail, "s@e.test") || !strings.Contains(txs[0].Message, "body") {
		t.Fatalf("dump %+v", txs)
	}
}

// A held instance keeps what it accepts in the incoming queue; StartQmgr
// starts the queue manager, which delivers it (here to discard).
func TestHoldThenStartQmgr(t *testing.T) {
	in := start(t, Config{Hold: true})
	if _, err := send(t, in.Addr, "a@d0.test", "b@d1.test"); err != nil {
		t.Fatal(err)
	}
	// smtpd's 250 after the dot comes once cleanup has written the file.
	incoming := filepath.Join(in.QueueDir(), "incoming")
	ents, err := os.ReadDir(incoming)
	if err != nil || len(ents) != 1 {
		t.Fatalf("incoming queue: %d files (%v), want the message", len(ents), err)
	}
	tail, err := in.Tail()
	if err != nil {
		t.Fatal(err)
	}
	if err := in.StartQmgr(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		p, err := tail.Read()
		if err != nil {
			t.Fatal(err)
		}
		if p.Removed == 1 && p.Sent == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after StartQmgr: %+v, want the message delivered and removed", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ents, _ := os.ReadDir(incoming); len(ents) != 0 {
		t.Errorf("incoming queue still holds %d files", len(ents))
	}
	if err := in.StartQmgr(); err == nil {
		t.Error("a second StartQmgr succeeded")
	}
}

func TestMergeMain(t *testing.T) {
	base := []string{"a = 1", "default_transport = discard", "b = 2"}
	got, err := mergeMain(base, []string{"default_transport = smtp", "c = 3", "a=4"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a=4", "default_transport = smtp", "b = 2", "c = 3"}
	if !slices.Equal(got, want) || base[1] != "default_transport = discard" {
		t.Errorf("merged %q, want %q (base untouched)", got, want)
	}
	for _, bad := range []string{"no equals sign", " = x", "two words = x"} {
		if _, err := mergeMain(base, []string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

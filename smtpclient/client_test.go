package smtpclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadReply(t *testing.T) {
	tests := []struct {
		in      string
		code    int
		enh     string
		lines   []string
		wantErr bool
	}{
		{in: "250 ok\r\n", code: 250, lines: []string{"ok"}},
		{in: "250 2.1.0 Ok\r\n", code: 250, enh: "2.1.0", lines: []string{"Ok"}},
		{in: "550 5.1.1 <a@b>: no\r\n", code: 550, enh: "5.1.1", lines: []string{"<a@b>: no"}},
		// The class of an enhanced code must match the reply's.
		{in: "550 2.1.1 odd\r\n", code: 550, lines: []string{"2.1.1 odd"}},
		{in: "421 4.3.2 a.test Service not available\r\n", code: 421, enh: "4.3.2", lines: []string{"a.test Service not available"}},
		{in: "250-a.test\r\n250-PIPELINING\r\n250 SIZE 100\r\n", code: 250, lines: []string{"a.test", "PIPELINING", "SIZE 100"}},
		{in: "550-5.7.1 first\r\n550 5.7.1 second\r\n", code: 550, enh: "5.7.1", lines: []string{"first", "second"}},
		{in: "250\r\n", code: 250, lines: []string{""}},
		{in: "250 bare LF\n", code: 250, lines: []string{"bare LF"}},
		{in: "25 short\r\n", wantErr: true},
		{in: "abc nope\r\n", wantErr: true},
		{in: "250x junk\r\n", wantErr: true},
		{in: "250-a\r\n251 b\r\n", wantErr: true},
		{in: "999 out of range\r\n", wantErr: true},
		{in: "250-never ends\r\n", wantErr: true},
		{in: "250 " + strings.Repeat("x", 5000) + "\r\n", wantErr: true},
	}
	for _, tc := range tests {
		r := bufio.NewReaderSize(strings.NewReader(tc.in), maxReplyLine)
		got, err := readReply(r)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%q: got %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got.Code != tc.code || got.Enhanced != tc.enh || !slices.Equal(got.Lines, tc.lines) {
			t.Errorf("%q: got %d %q %q, want %d %q %q", tc.in, got.Code, got.Enhanced, got.Lines, tc.code, tc.enh, tc.lines)
		}
	}
}

func TestReplyStatus(t *testing.T) {
	for _, tc := range []struct {
		r    Reply
		want string
	}{
		{Reply{Code: 550, Enhanced: "5.1.1"}, "5.1.1"},
		{Reply{Code: 451}, "4.0.0"},
		{Reply{Code: 250}, "2.0.0"},
		{Reply{}, ""},
	} {
		if got := tc.r.Status(); got != tc.want {
			t.Errorf("%+v.Status() = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func dialT(t *testing.T, s *fakeServer, o Options) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), s.target(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSendPipelinedWithExtensions(t *testing.T) {
	s := newFakeServer(t, "PIPELINING", "SIZE 1000000", "8BITMIME", "SMTPUTF8", "DSN", "ENHANCEDSTATUSCODES")
	s.reply = func(cmd string) string {
		switch {
		case strings.Contains(cmd, "<bad@"):
			return "550 5.1.1 <bad@d.test>: user unknown"
		case strings.Contains(cmd, "<tmp@"):
			return "451 4.2.1 try later"
		}
		return ""
	}
	s.start()
	c := dialT(t, s, Options{HeloName: "client.test"})
	env := Envelope{
		From: "s@e.test", Size: 42, EightBit: true, UTF8: true, RET: "HDRS", ENVID: "id1",
		Rcpts: []Rcpt{
			{Addr: "ok@d.test", Notify: "SUCCESS,FAILURE", ORCPT: "rfc822;ok@d.test"},
			{Addr: "bad@d.test"},
			{Addr: "tmp@d.test"},
		},
	}
	tx, err := c.Send(env, strings.NewReader("Subject: x\n\nline\n.dot line\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !tx.Pipelined {
		t.Error("not pipelined although the server offers PIPELINING")
	}
	// Everything up to DATA went out before the server answered MAIL.
	if b, want := s.batchedCmds(), []string{tx.MailCmd, tx.RcptCmds[0], tx.RcptCmds[1], tx.RcptCmds[2]}; len(b) < 4 || !slices.Equal(b[:4], want) {
		t.Errorf("commands buffered together %q, want %q", b, want)
	}
	if want := "MAIL FROM:<s@e.test> SIZE=42 BODY=8BITMIME SMTPUTF8 RET=HDRS ENVID=id1"; tx.MailCmd != want {
		t.Errorf("MAIL = %q, want %q", tx.MailCmd, want)
	}
	if want := "RCPT TO:<ok@d.test> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;ok@d.test"; tx.RcptCmds[0] != want {
		t.Errorf("RCPT = %q, want %q", tx.RcptCmds[0], want)
	}
	codes := []int{tx.Rcpts[0].Code, tx.Rcpts[1].Code, tx.Rcpts[2].Code}
	if !slices.Equal(codes, []int{250, 550, 451}) || tx.Rcpts[1].Enhanced != "5.1.1" {
		t.Errorf("RCPT replies %+v", tx.Rcpts)
	}
	if tx.Accepted() != 1 || tx.Data.Code != 354 || tx.Final.Code != 250 {
		t.Errorf("accepted %d, DATA %d, final %d", tx.Accepted(), tx.Data.Code, tx.Final.Code)
	}
	if want := "Subject: x\r\n\r\nline\r\n.dot line\r\n"; len(s.messages) != 1 || s.messages[0] != want {
		t.Errorf("server got %q, want %q (dot-stuffed on the wire, CRLF)", s.messages, want)
	}
	// A clean transaction needs no RSET before the next one.
	if _, err := c.Send(Envelope{From: "", Rcpts: []Rcpt{{Addr: "ok@d.test"}}}, strings.NewReader("x\n")); err != nil {
		t.Fatal(err)
	}
	cmds := s.commands()
	if slices.Contains(cmds, "RSET") {
		t.Errorf("RSET after a successful transaction: %q", cmds)
	}
	if !slices.Contains(cmds, "MAIL FROM:<>") {
		t.Errorf("null sender not sent as <>: %q", cmds)
	}
}

func TestSendLockstepWithoutExtensions(t *testing.T) {
	s := newFakeServer(t) // EHLO with no keywords at all
	s.reply = func(cmd string) string {
		if strings.Contains(cmd, "<bad@") {
			return "550 no such user"
		}
		return ""
	}
	s.start()
	c := dialT(t, s, Options{})
	env := Envelope{From: "s@e.test", Size: 42, EightBit: true, UTF8: true, RET: "FULL",
		Rcpts: []Rcpt{{Addr: "bad@d.test", Notify: "NEVER"}, {Addr: "ok@d.test"}}}
	tx, err := c.Send(env, strings.NewReader("hi\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b := s.batchedCmds(); tx.Pipelined || len(b) != 0 {
		t.Errorf("pipelined %v, batched %q: want lock-step without PIPELINING", tx.Pipelined, b)
	}
	// No parameter the server did not announce.
	if tx.MailCmd != "MAIL FROM:<s@e.test>" || tx.RcptCmds[0] != "RCPT TO:<bad@d.test>" {
		t.Errorf("MAIL %q RCPT %q", tx.MailCmd, tx.RcptCmds[0])
	}
	if tx.Rcpts[0].Status() != "5.0.0" || tx.Final.Code != 250 {
		t.Errorf("rcpt %+v final %+v", tx.Rcpts[0], tx.Final)
	}
}

func TestSendNoRecipientAccepted(t *testing.T) {
	for _, pipe := range []bool{false, true} {
		var ext []string
		if pipe {
			ext = []string{"PIPELINING"}
		}
		s := newFakeServer(t, ext...)
		s.reply = func(cmd string) string {
			switch {
			case strings.HasPrefix(cmd, "RCPT"):
				return "550 5.1.1 unknown"
			case cmd == "DATA":
				return "554 5.5.1 no valid recipients"
			}
			return ""
		}
		s.start()
		c := dialT(t, s, Options{})
		tx, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "x@y"}}}, strings.NewReader("m\n"))
		if err != nil {
			t.Fatal(err)
		}
		if tx.Accepted() != 0 || !tx.Final.IsZero() || len(s.messages) != 0 {
			t.Fatalf("pipelining %v: accepted %d final %+v messages %d", pipe, tx.Accepted(), tx.Final, len(s.messages))
		}
		// The failed transaction leaves state on the server: RSET first.
		if _, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "x@y"}}}, strings.NewReader("m\n")); err != nil {
			t.Fatal(err)
		}
		cmds := s.commands()
		i := slices.Index(cmds, "RSET")
		if i < 0 || !strings.HasPrefix(cmds[i+1], "MAIL") {
			t.Errorf("pipelining %v: want RSET before the second MAIL: %q", pipe, cmds)
		}
	}
}

func TestSend421ClosesSession(t *testing.T) {
	s := newFakeServer(t, "PIPELINING")
	s.reply = func(cmd string) string {
		if strings.Contains(cmd, "<second@") {
			return "421 4.7.0 fake.test too busy"
		}
		return ""
	}
	s.start()
	c := dialT(t, s, Options{})
	tx, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "first@y"}, {Addr: "second@y"}, {Addr: "third@y"}}}, strings.NewReader("m\n"))
	var e *Error
	if !errors.As(err, &e) || e.Stage != StageRcpt || !e.Reply.ShutsDown() {
		t.Fatalf("err = %v, want a 421 *Error at RCPT", err)
	}
	if tx.Rcpts[0].Code != 250 || tx.Rcpts[1].Code != 421 || !tx.Rcpts[2].IsZero() {
		t.Errorf("replies %+v", tx.Rcpts)
	}
	if !c.Closed() {
		t.Error("session still open after 421")
	}
	if _, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "x@y"}}}, strings.NewReader("m\n")); err == nil {
		t.Error("Send on a closed session succeeded")
	}
}

func TestSendRejectsInjection(t *testing.T) {
	s := newFakeServer(t).start()
	c := dialT(t, s, Options{})
	_, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "x@y>\r\nRCPT TO:<evil@z"}}}, strings.NewReader("m\n"))
	if !errors.Is(err, ErrCommand) {
		t.Fatalf("err = %v, want ErrCommand", err)
	}
	if slices.ContainsFunc(s.commands(), func(c string) bool { return strings.HasPrefix(c, "MAIL") }) {
		t.Error("a MAIL went out for an envelope with a line break")
	}
}

func TestDialGreetingAndHello(t *testing.T) {
	t.Run("421 greeting", func(t *testing.T) {
		s := newFakeServer(t)
		s.greeting = "421 4.3.2 fake.test Service not available"
		s.start()
		_, err := Dial(context.Background(), s.target(), Options{})
		var e *Error
		if !errors.As(err, &e) || e.Stage != StageGreeting || e.Reply.Code != 421 {
			t.Fatalf("err = %v, want a greeting 421", err)
		}
	})
	t.Run("554 greeting", func(t *testing.T) {
		s := newFakeServer(t)
		s.greeting = "554 5.3.2 No SMTP service here"
		s.start()
		_, err := Dial(context.Background(), s.target(), Options{})
		var e *Error
		if !errors.As(err, &e) || e.Stage != StageGreeting || e.Reply.Code != 554 {
			t.Fatalf("err = %v, want a greeting 554", err)
		}
	})
	t.Run("EHLO refused, HELO accepted", func(t *testing.T) {
		s := newFakeServer(t, "PIPELINING")
		s.reply = func(cmd string) string {
			if strings.HasPrefix(cmd, "EHLO") {
				return "502 5.5.2 command not recognized"
			}
			return ""
		}
		s.start()
		c := dialT(t, s, Options{HeloName: "me.test"})
		if _, ok := c.Extension("PIPELINING"); ok {
			t.Error("extensions kept from a refused EHLO")
		}
		if cmds := s.commands(); !slices.Equal(cmds[:2], []string{"EHLO me.test", "HELO me.test"}) {
			t.Errorf("commands %q", cmds)
		}
	})
	t.Run("connection refused", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = Dial(context.Background(), Target{Name: "[127.0.0.1]", Addr: addr}, Options{DialTimeout: 2 * time.Second})
		var e *Error
		if !errors.As(err, &e) || e.Stage != StageConnect || e.Err == nil {
			t.Fatalf("err = %v, want a connect error", err)
		}
	})
}

func TestStartTLSPolicies(t *testing.T) {
	cert, pool := selfSigned(t)
	s := newFakeServer(t, "STARTTLS", "PIPELINING")
	s.cert = cert
	s.start()

	c := dialT(t, s, Options{}) // may: unverified
	if !c.TLS() {
		t.Error("TLSMay: no TLS although offered")
	}
	// Probing an idle TLS session for staleness leaves it usable.
	if c.Stale() {
		t.Fatal("fresh TLS session reported stale")
	}
	if _, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "x@y"}}}, strings.NewReader("m\n")); err != nil {
		t.Fatal(err)
	}
	if c := dialT(t, s, Options{TLS: TLSNone}); c.TLS() {
		t.Error("TLSNone: TLS used")
	}
	if _, err := Dial(context.Background(), s.target(), Options{TLS: TLSVerify}); err == nil {
		t.Error("TLSVerify accepted an untrusted certificate")
	}
	if c := dialT(t, s, Options{TLS: TLSVerify, TLSConfig: &tls.Config{RootCAs: pool}}); !c.TLS() {
		t.Error("TLSVerify with the issuer trusted: no TLS")
	}

	plain := newFakeServer(t, "PIPELINING").start()
	if c := dialT(t, plain, Options{}); c.TLS() {
		t.Error("TLS without STARTTLS offered")
	}
	if _, err := Dial(context.Background(), plain.target(), Options{TLS: TLSEncrypt}); err == nil {
		t.Error("TLSEncrypt accepted a server without STARTTLS")
	}

	// A server that offers STARTTLS but cannot do the handshake: under
	// "may" the client reconnects in plaintext, as Postfix does.
	broken := newFakeServer(t, "STARTTLS") // no certificate: handshake fails
	broken.start()
	c = dialT(t, broken, Options{DialTimeout: 2 * time.Second, CommandTimeout: 2 * time.Second})
	if c.TLS() {
		t.Error("TLS reported over a failed handshake")
	}
	broken.mu.Lock()
	sessions := broken.sessions
	broken.mu.Unlock()
	if n := len(slices.DeleteFunc(broken.commands(), func(s string) bool { return s != "STARTTLS" })); sessions != 2 || n != 1 {
		t.Errorf("%d sessions with %d STARTTLS, want 2 sessions (TLS attempt, then plaintext) and 1 STARTTLS", sessions, n)
	}
	if _, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "x@y"}}}, strings.NewReader("m\n")); err != nil {
		t.Fatal(err)
	}
}

func TestNoopAndQuit(t *testing.T) {
	s := newFakeServer(t).start()
	c := dialT(t, s, Options{})
	if err := c.Noop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Quit(); err != nil {
		t.Fatal(err)
	}
	if !c.Closed() {
		t.Error("open after QUIT")
	}
	if err := c.Noop(); err == nil {
		t.Error("NOOP on a closed session succeeded")
	}
	cmds := s.commands()
	if !slices.Equal(cmds[len(cmds)-2:], []string{"NOOP", "QUIT"}) {
		t.Errorf("commands %q", cmds)
	}
}

func TestNoopDetectsDroppedSession(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, "220 x\r\n")
		br := bufio.NewReader(c)
		br.ReadString('\n') // EHLO
		io.WriteString(c, "250 x\r\n")
		c.Close() // the server drops the idle session
	}()
	c, err := Dial(context.Background(), Target{Addr: ln.Addr().String()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if err := c.Noop(); err == nil || !c.Closed() {
		t.Fatalf("NOOP on a dropped session: err %v, closed %v", err, c.Closed())
	}
}

// A session the server gave up while idle (Postfix sends a 421 and
// closes) is stale; a quiet one is not.
func TestStale(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	drop := make(chan struct{})
	dropped := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		io.WriteString(c, "220 x\r\n")
		br.ReadString('\n') // EHLO
		io.WriteString(c, "250 x\r\n")
		<-drop
		io.WriteString(c, "421 4.4.2 x Error: timeout exceeded\r\n")
		close(dropped)
	}()
	c, err := Dial(context.Background(), Target{Addr: ln.Addr().String()}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Stale() {
		t.Fatal("a live, quiet session reported stale")
	}
	close(drop)
	<-dropped
	deadline := time.Now().Add(5 * time.Second)
	for !c.Stale() {
		if time.Now().After(deadline) {
			t.Fatal("a session with an unsolicited 421 not reported stale")
		}
	}
	if !c.Closed() {
		t.Error("stale session left open")
	}
}

package smtpclient

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// The raw connection reads and writes like the one it wraps: a deadline
// is a timeout error, the peer's close is io.EOF, a large write goes out
// whole while the peer reads slowly.
func TestRawConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB: more than a socket buffer
	got := make(chan string, 1)
	release := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		<-release
		b, _ := io.ReadAll(io.LimitReader(c, int64(len(big))))
		c.Write([]byte("ok\n"))
		got <- string(b)
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// wrapRaw, not newRawConn, which leaves connections alone under the
	// race detector.
	c := wrapRaw(nc)
	if c == nil {
		t.Fatal("a TCP connection was not wrapped")
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err = c.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	c.SetReadDeadline(time.Time{})
	close(release)
	if n, err := c.Write([]byte(big)); n != len(big) || err != nil {
		t.Fatalf("write: %d of %d, %v", n, len(big), err)
	}
	br := bufio.NewReader(c)
	if l, err := br.ReadString('\n'); l != "ok\n" || err != nil {
		t.Fatalf("read %q, %v", l, err)
	}
	if s := <-got; s != big {
		t.Fatalf("peer got %d bytes, want %d", len(s), len(big))
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
}

// A session whose server closed the connection is stale at once.
func TestStaleAfterClose(t *testing.T) {
	s := newFakeServer(t).start()
	c := dialT(t, s, Options{})
	if c.raw == nil {
		// Under the race detector Dial leaves the connection alone;
		// Stale's check goes through the raw connection all the same.
		c.raw = wrapRaw(c.nc)
	}
	if c.Stale() {
		t.Fatal("a live, quiet session reported stale")
	}
	// The fake server ends the session after QUIT; send it behind the
	// client's back.
	c.w.WriteString("QUIT\r\n")
	c.w.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for !c.Stale() {
		if time.Now().After(deadline) {
			t.Fatal("a session the server closed not reported stale")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := c.Send(Envelope{From: "a@b", Rcpts: []Rcpt{{Addr: "x@y"}}}, strings.NewReader("m\n")); err == nil {
		t.Fatal("Send on a stale session succeeded")
	}
}

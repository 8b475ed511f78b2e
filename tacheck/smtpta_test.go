package tacheck

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"zsched/agent"
	"zsched/internal/need"
)

// smtpSink is the smallest SMTP server an agent can deliver to: it accepts
// every command on 127.0.0.1 and counts the messages it is given.
type smtpSink struct {
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	messages int
}

func startSMTPSink(t *testing.T) *smtpSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &smtpSink{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *smtpSink) serve(c net.Conn) {
	defer c.Close()
	// Agents keep idle sessions open; the test's end closes the listener,
	// and every agent has exited by then, so sessions end with them.
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	say := func(l string) bool {
		w.WriteString(l + "\r\n")
		return w.Flush() == nil
	}
	if !say("220 sink.test ESMTP ta-check") {
		return
	}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		verb := strings.ToUpper(strings.Fields(l + " x")[0])
		switch verb {
		case "EHLO":
			say("250-sink.test\r\n250-PIPELINING\r\n250-8BITMIME\r\n250 SIZE 10240000")
		case "DATA":
			say("354 go ahead")
			for {
				d, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if d == ".\r\n" || d == ".\n" {
					break
				}
			}
			s.mu.Lock()
			s.messages++
			s.mu.Unlock()
			say("250 2.0.0 queued")
		case "QUIT":
			say("221 2.0.0 bye")
			return
		default:
			say("250 2.0.0 ok")
		}
	}
}

func (s *smtpSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.messages
}

// zsched's SMTP agent keeps the protocol, delivering to a local sink: the
// kit's destination is forced to it (-F), as an operator would route a test
// host.
func TestSMTPAgentConforms(t *testing.T) {
	t.Parallel()
	_, err := os.Stat(filepath.Join(moduleRoot(t), "cmd", "smtp-ta"))
	need.Met(t, "cmd/smtp-ta in this tree", err)
	bin := bins.ProgramFor(t, "zsched/cmd/smtp-ta")
	sink := startSMTPSink(t)
	res, err := Run(context.Background(), Config{
		Command:   []string{bin, "-c", "$channel", "-tls", "none", "-F", "[127.0.0.1]:" + portOf(t, sink.ln.Addr())},
		Modes:     []agent.Stdio{agent.Socketpair},
		Timeout:   20 * time.Second,
		ExitBound: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Verdict != Pass {
			t.Errorf("%s %s: %v: %s\n%s", r.Stdio, r.Case, r.Verdict, r.Why, strings.Join(r.Transcript, "\n"))
		}
	}
	if sink.count() == 0 {
		t.Error("the sink received no message: the agent did not deliver")
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

func portOf(t *testing.T, a net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

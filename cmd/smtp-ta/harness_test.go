package main

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/ctlfile"
	"zsched/internal/agentbin"
	"zsched/internal/need"
	"zsched/postfix"
	"zsched/report"
	"zsched/smtpclient"
	"zsched/ta"
)

// bins are the programs the tests run (this command, the scheduler):
// each built on the first test that asks, once, and removed at exit.
var bins agentbin.Set

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

// binary is the program of ./cmd/NAME (smtp-ta or scheduler).
func binary(t *testing.T, name string) string {
	t.Helper()
	return bins.ProgramFor(t, "zsched/cmd/"+name)
}

// reachable returns a temporary directory the postfix user (and nobody,
// for smtp-sink) can search.
func reachable(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func startPostfix(t *testing.T, cfg postfix.Config) *postfix.Instance {
	t.Helper()
	need.Met(t, "the postfix package, as root", postfix.Available())
	cfg.Dir = reachable(t)
	in, err := postfix.Start(cfg)
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

func startSink(t *testing.T, flags ...string) *postfix.Sink {
	t.Helper()
	need.Met(t, "the postfix package, as root", postfix.Available())
	need.Met(t, "smtp-sink (the postfix package)", postfix.SinkAvailable())
	s, err := postfix.StartSink(reachable(t), 0, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// spool is a postoffice for the agent's tests.
type spool struct {
	t *testing.T
	*ctlfile.Spool
}

func newSpool(t *testing.T) *spool {
	t.Helper()
	sp := &ctlfile.Spool{Root: t.TempDir(), NoSync: true}
	if err := sp.Init(); err != nil {
		t.Fatal(err)
	}
	return &spool{t: t, Spool: sp}
}

// enqueue queues one message; rcpts are "user@host" (channel smtp, host
// the domain), or ctlfile.Address values.
func (s *spool) enqueue(body string, rcpts ...any) string {
	s.t.Helper()
	m := &ctlfile.Message{Sender: "sender@example.org", Header: []byte("From: sender@example.org\nSubject: zsched test\n"), Body: []byte(body)}
	for _, r := range rcpts {
		switch r := r.(type) {
		case string:
			_, host, _ := strings.Cut(r, "@")
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: host, User: r})
		case ctlfile.Address:
			m.Rcpts = append(m.Rcpts, r)
		}
	}
	rel, err := s.Enqueue(m)
	if err != nil {
		s.t.Fatal(err)
	}
	return rel
}

func (s *spool) read(rel string) *ctlfile.File {
	s.t.Helper()
	data, err := os.ReadFile(filepath.Join(s.TransportDir(), rel))
	if err != nil {
		s.t.Fatal(err)
	}
	f, err := ctlfile.Parse(filepath.Base(rel), data)
	if err != nil {
		s.t.Fatal(err)
	}
	return f
}

// marks returns each recipient's status byte, by address.
func (s *spool) marks(rel string) map[string]ctlfile.Status {
	out := map[string]ctlfile.Status{}
	for _, r := range s.read(rel).Rcpts {
		out[r.User] = r.Status
	}
	return out
}

// driver speaks the scheduler's side of the protocol to one agent.
type driver struct {
	t    *testing.T
	w    io.WriteCloser
	r    *bufio.Reader
	done chan error
	logs *logBuf
}

// logBuf collects the agent's log, for tests that wait on a log line.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitLog waits until the agent's log has n lines containing s.
func (d *driver) waitLog(s string, n int, timeout time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(d.logs.String(), s) < n {
		if time.Now().After(deadline) {
			d.t.Fatalf("agent log has %d lines with %q after %v, want %d:\n%s", strings.Count(d.logs.String(), s), s, timeout, n, d.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newAgent is an agent as main builds it, with test defaults: servers on
// loopback only, short timeouts, the resolver of the caller's choosing.
func newAgent(port int) *agent {
	return &agent{
		port: port, tls: smtpclient.TLSMay, maxRcpt: 100, noop: 0,
		resolver: &smtpclient.StaticResolver{},
		opts: smtpclient.Options{HeloName: "client.test", DialTimeout: 5 * time.Second,
			GreetingTimeout: 10 * time.Second, CommandTimeout: 10 * time.Second, DataTimeout: 10 * time.Second},
	}
}

// forced points every destination at addr ("127.0.0.1:port").
func forced(t *testing.T, a *agent, addr string) *agent {
	t.Helper()
	nh, err := smtpclient.ParseNexthop("["+strings.Replace(addr, ":", "]:", 1), 25)
	if err != nil {
		t.Fatal(err)
	}
	a.forced = &nh
	return a
}

// serve runs ag in this process on the spool's transport directory, as
// the scheduler would run the binary there.
func serve(t *testing.T, sp *spool, ag *agent) *driver {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	logs := &logBuf{}
	ag.log = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	ag.dir = sp.TransportDir()
	a := &ta.Agent{Channel: "smtp", Name: "smtp-ta", Dir: sp.TransportDir(), In: inR, Out: outW}
	d := &driver{t: t, w: inW, r: bufio.NewReader(outR), done: make(chan error, 1), logs: logs}
	go func() {
		err := a.Serve(ag.deliver)
		ag.close()
		outW.Close()
		d.done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		go io.Copy(io.Discard, outR)
		<-d.done
		t.Logf("agent log:\n%s", logs.String())
	})
	d.expectHungry()
	return d
}

// exec runs the agent binary with args in the spool's transport directory.
func execAgent(t *testing.T, sp *spool, args ...string) *driver {
	t.Helper()
	cmd := exec.Command(binary(t, "smtp-ta"), args...)
	cmd.Dir = sp.TransportDir()
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout.(io.Writer)
	d := &driver{t: t, w: w, r: bufio.NewReader(out), done: make(chan error, 1), logs: &logBuf{}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		w.Close()
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-d.done
		}
	})
	d.expectHungry()
	return d
}

func (d *driver) line() string {
	d.t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := d.r.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			d.t.Fatalf("agent output: %v (got %q)", r.err, r.s)
		}
		return strings.TrimSuffix(r.s, "\n")
	case <-time.After(60 * time.Second):
		d.t.Fatal("agent silent for 60s")
		return ""
	}
}

func (d *driver) expectHungry() {
	d.t.Helper()
	if l := d.line(); l != "#hungry" {
		d.t.Fatalf("agent said %q, want #hungry", l)
	}
}

func (d *driver) send(line string) {
	d.t.Helper()
	if _, err := io.WriteString(d.w, line+"\n"); err != nil {
		d.t.Fatal(err)
	}
}

// job feeds one job line and returns its reports, by recipient address
// (the agent reports in the notary or the text; the test maps offsets).
func (d *driver) job(sp *spool, rel, host string) map[string]report.Line {
	d.t.Helper()
	if host == "" {
		d.send(rel)
	} else {
		d.send(rel + "\t" + host)
	}
	f := sp.read(rel)
	out := map[string]report.Line{}
	for {
		l := d.line()
		if l == "#hungry" {
			return out
		}
		if strings.HasPrefix(l, "#") {
			d.t.Logf("agent: %s", l)
			continue
		}
		rl, err := report.Parse(l)
		if err != nil {
			d.t.Fatalf("bad report %q: %v", l, err)
		}
		i, ok := f.RcptAt(rl.Offset)
		if !ok {
			d.t.Fatalf("report for unknown offset: %q", l)
		}
		out[f.Rcpts[i].User] = rl
	}
}

// idle sends #idle and takes its #hungry.
func (d *driver) idle() {
	d.t.Helper()
	d.send("#idle")
	d.expectHungry()
}

// end sends the empty line and waits for the agent to exit.
func (d *driver) end() {
	d.t.Helper()
	d.send("")
	select {
	case err := <-d.done:
		if err != nil {
			d.t.Errorf("agent ended with %v", err)
		}
		d.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		d.t.Fatal("agent did not exit after the empty line")
	}
}

func statuses(rs map[string]report.Line) map[string]string {
	out := map[string]string{}
	for a, r := range rs {
		out[a] = r.Status.String()
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func execCommand(t *testing.T, sp *spool, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary(t, "smtp-ta"), args...)
	cmd.Dir = sp.TransportDir()
	return cmd
}

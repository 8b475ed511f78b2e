package control

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/internal/need"
)

// loop stands in for the scheduler's loop: it answers every request with
// handle, until the test ends.
func loop(t *testing.T, s *Server, handle func(*Request) Reply) {
	t.Helper()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case r := <-s.Requests():
				r.Respond(handle(r))
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() {
		s.Close()
		close(done)
		<-stopped
	})
}

func logger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Debug})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func listen(t *testing.T, opt Options) *Server {
	t.Helper()
	if opt.Path == "" && opt.TCP == "" {
		opt.Path = filepath.Join(t.TempDir(), "ctl.sock")
	}
	opt.Log = logger(t)
	s, err := Listen(opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dial(t *testing.T, s *Server) *Client {
	t.Helper()
	c, err := Dial(s.opt.Path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestListingIsDotStuffedBothWays(t *testing.T) {
	s := listen(t, Options{})
	body := []string{".", "..two", ".hidden", "plain", "", "a\tb"}
	loop(t, s, func(r *Request) Reply { return Listing(body) })
	c := dial(t, s)
	rep, err := c.Do("SHOW QUEUE THREADS")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || !rep.Multi || fmt.Sprintf("%q", rep.Lines) != fmt.Sprintf("%q", body) {
		t.Fatalf("listing %+v, want %q", rep, body)
	}

	// On the wire: "+OK until LF.LF", stuffed lines, ".".
	raw, err := net.Dial("unix", s.opt.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	fmt.Fprintf(raw, "SHOW QUEUE THREADS\nQUIT\n")
	b, _ := io.ReadAll(raw)
	lines := strings.Split(string(b), "\n")
	want := []string{Greeting, "", "+OK until LF.LF", "..", "...two", "..hidden", "plain", "", "a\tb", ".", "+Bye bye", ""}
	if len(lines) != len(want) {
		t.Fatalf("wire:\n%s", b)
	}
	for i, w := range want {
		if i == 1 {
			if !strings.HasPrefix(lines[i], "220 MAILQ-V2-CHALLENGE: ") {
				t.Fatalf("line 2 %q, want the challenge", lines[i])
			}
			continue
		}
		if lines[i] != w {
			t.Fatalf("wire line %d %q, want %q\n%s", i, lines[i], w, b)
		}
	}
}

func TestCommandsReachTheLoopParsed(t *testing.T) {
	s := listen(t, Options{})
	got := make(chan *Request, 10)
	loop(t, s, func(r *Request) Reply { got <- r; return OK("done") })
	c := dial(t, s)
	for _, tc := range []struct{ line, verb, args string }{
		{"show queue threads2", "SHOW QUEUE THREADS2", "[]"},
		{"SHOW THREAD smtp example.com", "SHOW THREAD", "[smtp example.com]"},
		{"ETRN @example.com 192.0.2.1", "ETRN", "[@example.com 192.0.2.1]"},
		{"KILL MSG A/12345", "KILL MSG", "[A/12345]"},
		{"FLUSH", "FLUSH", "[]"},
		{"FLUSH smtp/*.test", "FLUSH", "[smtp/*.test]"},
		{"FLUSH MSGS from=a@b.test", "FLUSH MSGS", "[from=a@b.test]"},
		{"FLUSH MSGS dry 123.abc 456.def", "FLUSH MSGS", "[dry 123.abc 456.def]"},
		{"KILL MSGS dest=x.test", "KILL MSGS", "[dest=x.test]"},
		{"HOLD THREAD smtp/x.test", "HOLD THREAD", "[smtp/x.test]"},
	} {
		rep, err := c.Do(tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK || rep.Text != "done" {
			t.Fatalf("%s: reply %+v", tc.line, rep)
		}
		r := <-got
		if r.Verb != tc.verb || fmt.Sprint(r.Args) != tc.args || r.Peer.Network != "unix" || r.Peer.UID != os.Geteuid() {
			t.Fatalf("%s: request %+v", tc.line, r)
		}
	}
	for line, want := range map[string]string{
		"FROB x":                 "MAILQ2 Unknown command, or refused by access control; VERB='FROB' REST='x'",
		"SHOW THREAD smtp":       "usage: SHOW THREAD channel host: one destination's recipients (mailq -dest channel/host)",
		"KILL THREAD smtp/x":     "MAILQ2 Unknown command, or refused by access control; VERB='KILL' REST='THREAD smtp/x'",
		"WHY a b":                "usage: WHY id: why each recipient of a message is waiting (why)",
		"AUTH nobody 0123456789": "", // accepted on the Unix socket, which trusts peer credentials
	} {
		rep, err := c.Do(line)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			if !rep.OK {
				t.Fatalf("%s: %+v", line, rep)
			}
			continue
		}
		if rep.OK || rep.Text != want {
			t.Fatalf("%s: reply %+v, want -%s", line, rep, want)
		}
	}
	select {
	case r := <-got:
		t.Fatalf("a refused command reached the loop: %+v", r)
	default:
	}
}

func TestManyClientsAtOnce(t *testing.T) {
	s := listen(t, Options{})
	loop(t, s, func(r *Request) Reply { return OK("pid " + fmt.Sprint(r.Peer.PID)) })
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(s.opt.Path, 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for k := 0; k < 5; k++ {
				rep, err := c.Do("SHOW COUNTERS")
				if err != nil || !rep.OK || rep.Text != fmt.Sprintf("pid %d", os.Getpid()) {
					errs <- fmt.Errorf("reply %+v, %v", rep, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestClientsAreBounded(t *testing.T) {
	s := listen(t, Options{MaxClients: 2})
	loop(t, s, func(r *Request) Reply { return OK("") })

	// Past MaxClients: refused at once.
	a, b := dial(t, s), dial(t, s)
	if _, err := Dial(s.opt.Path, 5*time.Second); err == nil || !strings.Contains(err.Error(), "BUSY") {
		t.Fatalf("third client: %v, want BUSY", err)
	}
	a.Close()
	b.Close()

	// A line over MaxLine ends the session.
	s = listen(t, Options{MaxLine: 100, IdleTimeout: 300 * time.Millisecond})
	loop(t, s, func(r *Request) Reply { return OK("") })
	raw := rawSession(t, s)
	fmt.Fprintf(raw.c, "SHOW %s\n", strings.Repeat("x", 200))
	if l := raw.line(); l != "-LINE TOO LONG" {
		t.Fatalf("overlong line: %q", l)
	}
	raw.eof()

	// A silent client is dropped after IdleTimeout.
	raw = rawSession(t, s)
	start := time.Now()
	raw.eof()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("idle client dropped after %v", d)
	}
}

// rawSession is a client without the Client type, for protocol errors.
type raw struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func rawSession(t *testing.T, s *Server) *raw {
	t.Helper()
	c, err := net.Dial("unix", s.opt.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := &raw{t: t, c: c, r: bufio.NewReader(c)}
	if g := r.line(); g != Greeting {
		t.Fatalf("greeting %q", g)
	}
	r.line() // challenge
	return r
}

func (r *raw) line() string {
	r.t.Helper()
	l, err := r.r.ReadString('\n')
	if err != nil {
		r.t.Fatalf("read: %v (got %q)", err, l)
	}
	return strings.TrimRight(l, "\n")
}

func (r *raw) eof() {
	r.t.Helper()
	if l, err := r.r.ReadString('\n'); err != io.EOF {
		r.t.Fatalf("want the server to close, got %q %v", l, err)
	}
}

func TestCloseAnswersWaitingCommands(t *testing.T) {
	s := listen(t, Options{})
	c := dial(t, s)
	// The loop takes the command and never answers (it is shutting down).
	taken := make(chan *Request, 1)
	go func() { taken <- <-s.Requests() }()
	done := make(chan Reply, 1)
	go func() {
		rep, _ := c.Do("RELOAD")
		done <- rep
	}()
	<-taken
	s.Close()
	rep := <-done
	if rep.OK || rep.Text != "scheduler shutting down" {
		t.Fatalf("reply %+v, want -scheduler shutting down", rep)
	}
}

func TestSecondListenerIsRefusedAndStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctl.sock")
	s := listen(t, Options{Path: path})
	if _, err := Listen(Options{Path: path}); !errors.Is(err, ErrRunning) {
		t.Fatalf("second listener: %v, want ErrRunning", err)
	}
	s.Close()
	// A socket file nobody listens on (a crashed scheduler's) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	s2 := listen(t, Options{Path: path})
	defer s2.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if _, err := Dial(filepath.Join(t.TempDir(), "none.sock"), time.Second); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("dial with no scheduler: %v, want ErrNotRunning", err)
	}
}

func TestTCPNeedsAuthAndHonoursRights(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "scheduler.auth")
	os.WriteFile(auth, []byte(`# user:password:attributes:addresses
viewer:look:QQ TT:[127.0.0.1]/32
op:secret:ALL:!10.0.0.0/8 127.0.0.0/8
far:away:ALL:192.0.2.0/24
`), 0o600)
	s := listen(t, Options{TCP: "127.0.0.1:0", AuthFile: auth})
	got := make(chan *Request, 10)
	loop(t, s, func(r *Request) Reply { got <- r; return OK("done") })
	addr := s.TCPAddr().String()

	op, err := DialTCP(addr, "op", "secret", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if rep, err := op.Do("KILL MSG 42"); err != nil || !rep.OK {
		t.Fatalf("op KILL: %+v %v", rep, err)
	}
	if r := <-got; r.Peer.Network != "tcp" || r.Peer.User != "op" || r.Verb != "KILL MSG" {
		t.Fatalf("request %+v", r)
	}

	viewer, err := DialTCP(addr, "viewer", "look", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	if rep, _ := viewer.Do("SHOW QUEUE SHORT"); !rep.OK {
		t.Fatalf("viewer SHOW QUEUE SHORT refused: %+v", rep)
	}
	<-got
	if rep, _ := viewer.Do("ETRN example.com"); rep.OK || rep.Text != "No ETRN allowed for you." {
		t.Fatalf("viewer ETRN: %+v", rep)
	}
	if rep, _ := viewer.Do("KILL MSG 42"); rep.OK || !strings.HasPrefix(rep.Text, "MAILQ2 Unknown command, or refused") {
		t.Fatalf("viewer KILL: %+v", rep)
	}

	for _, u := range [][2]string{{"op", "wrong"}, {"nobody", "nobody"}, {"far", "away"}} {
		if _, err := DialTCP(addr, u[0], u[1], 5*time.Second); !errors.Is(err, ErrRefused) {
			t.Fatalf("login %s/%s: %v, want ErrRefused", u[0], u[1], err)
		}
	}

	// Before AUTH nothing but AUTH and QUIT.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "SHOW QUEUE SHORT\nQUIT\n")
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "\n-BAD; USER MUST AUTHENTICATE\n+Bye bye\n") {
		t.Fatalf("unauthenticated session:\n%s", b)
	}
	select {
	case r := <-got:
		t.Fatalf("refused commands reached the loop: %+v", r)
	default:
	}

	// An address no line allows is refused at the greeting.
	os.WriteFile(auth, []byte("op:secret:ALL:192.0.2.0/24\n"), 0o600)
	if _, err := DialTCP(addr, "op", "secret", 5*time.Second); !errors.Is(err, ErrRefused) {
		t.Fatalf("client from an address not in the auth file: %v, want ErrRefused", err)
	}
}

func TestAuthFileErrorsNameTheLine(t *testing.T) {
	for text, want := range map[string]string{
		"a:b\n":              "x:1: want user:password:ATTRS:addresses",
		"\nu:p:TT BOGUS:\n":  `x:2: unknown attribute "BOGUS"`,
		"u:p:TT:10.0.0.1/99": `x:1: "10.0.0.1/99"`,
	} {
		a := ParseAuth("x", []byte(text))
		if len(a.Problems) != 1 || !errors.Is(a.Problems[0], ErrAuthFile) || !strings.Contains(a.Problems[0].Error(), want) {
			t.Errorf("%q: %v, want %s", text, a.Problems, want)
		}
	}
}

// TestPeerCredentialsRefuseAnotherUser connects as another uid from a child
// process. The socket is made world-writable for the test so that the
// refusal comes from SO_PEERCRED, not from the file mode.
func TestPeerCredentialsRefuseAnotherUser(t *testing.T) {
	need.Root(t) // to start a client under another uid
	dir, err := os.MkdirTemp("", "zsched-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	// The child is this test binary, copied where another user can run it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	const nobody, group = 65534, 65533
	s := listen(t, Options{Path: filepath.Join(dir, "ctl.sock")})
	loop(t, s, func(r *Request) Reply { return OK(fmt.Sprintf("uid %d", r.Peer.UID)) })
	os.Chmod(s.opt.Path, 0o666)

	run := func(uid, gid uint32) string {
		cmd := exec.Command(bin, "-test.run=^TestPeerHelper$")
		cmd.Env = []string{"ZSCHED_PEER_SOCKET=" + s.opt.Path}
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client as uid %d: %v\n%s", uid, err, out)
		}
		return string(out)
	}
	if out := run(nobody, nobody); !strings.Contains(out, "peer: refused: control: access refused: 550 NO ACCESS FOR YOU") {
		t.Fatalf("client of another uid was not refused:\n%s", out)
	}
	if out := run(0, 0); !strings.Contains(out, "peer: reply: uid 0") {
		t.Fatalf("root client:\n%s", out)
	}

	// Members of control_group get in.
	g := listen(t, Options{Path: filepath.Join(dir, "grp.sock"), Group: fmt.Sprint(group)})
	loop(t, g, func(r *Request) Reply { return OK(fmt.Sprintf("uid %d", r.Peer.UID)) })
	if fi, err := os.Stat(g.opt.Path); err != nil || fi.Mode().Perm() != 0o660 || fi.Sys().(*syscall.Stat_t).Gid != group {
		t.Fatalf("group socket: %v %v", fi.Mode(), err)
	}
	s.opt.Path = g.opt.Path
	if out := run(nobody, group); !strings.Contains(out, fmt.Sprintf("peer: reply: uid %d", nobody)) {
		t.Fatalf("member of control_group refused:\n%s", out)
	}
}

// TestPeerHelper is the child of TestPeerCredentialsRefuseAnotherUser.
func TestPeerHelper(t *testing.T) {
	path := os.Getenv("ZSCHED_PEER_SOCKET")
	if path == "" {
		t.Skip("only run as a child process")
	}
	c, err := Dial(path, 5*time.Second)
	if err != nil {
		fmt.Println("peer: refused:", err)
		return
	}
	defer c.Close()
	rep, err := c.Do("SHOW COUNTERS")
	fmt.Println("peer: reply:", rep.Text, err)
}

package control

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// logBuf collects a server's log lines for assertions.
type logBuf struct {
	t  *testing.T
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return l.b.Write(p)
}

func (l *logBuf) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), sub)
}

func listenLogged(t *testing.T, opt Options) (*Server, *logBuf) {
	t.Helper()
	lb := &logBuf{t: t}
	opt.Log = hclog.New(&hclog.LoggerOptions{Output: lb, Level: hclog.Debug})
	s, err := Listen(opt)
	if err != nil {
		t.Fatal(err)
	}
	loop(t, s, func(r *Request) Reply { return OK("done " + r.Verb) })
	return s, lb
}

// zmailerAuth is an auth file in the form ZMailer 3.0.1 ships
// (proto/scheduler.auth): bracketed addresses, IPv6 written [ipv6.addr].
const zmailerAuth = `#
# APOP-like authentication control file for the ZMailer scheduler.
#
nobody:nobody:SNMP QQ TT ETRN:  [127.0.0.0]/8 [ipv6.0::1]/128
nobody:nobody:SNMP ETRN:        [0.0.0.0]/0   [ipv6.0::0]/0
#watcher:zzzzz:SNMP QQ TT ETRN: [127.0.0.0]/8 [192.168.0.1]/32
*root:zzzzzzz:ALL:              [127.0.0.0]/8 [192.168.0.2]/32
`

func TestZMailerAuthFileForms(t *testing.T) {
	a := ParseAuth("scheduler.auth", []byte(zmailerAuth))
	if len(a.Problems) > 0 || len(a.Entries) != 2 {
		t.Fatalf("ZMailer's shipped auth file: %d entries, problems %v", len(a.Entries), a.Problems)
	}
	const chal = "220 MAILQ-V2-CHALLENGE: 1.2.3"
	login := func(addr string) Perm {
		p, err := a.Check("nobody", Authenticator(chal, "nobody"), chal, netip.MustParseAddr(addr))
		if err != nil {
			t.Fatalf("nobody from %s: %v", addr, err)
		}
		return p
	}
	for addr, want := range map[string]Perm{
		"127.0.0.1":        PermSNMP | PermQQ | PermTT | PermETRN,
		"::1":              PermSNMP | PermQQ | PermTT | PermETRN,
		"::ffff:127.0.0.9": PermSNMP | PermQQ | PermTT | PermETRN, // v4-mapped: compared as IPv4
		"192.0.2.7":        PermSNMP | PermETRN,
		"2001:db8::1":      PermSNMP | PermETRN,
	} {
		if got := login(addr); got != want {
			t.Errorf("nobody from %s: rights %b, want %b", addr, got, want)
		}
	}

	// Every form ZMailer's parser takes, and zsched's bare ones.
	for _, w := range []string{"[10.1.2.3]", "[10.0.0.0]/8", "[IPv6:2001:db8::]/32", "[ipv6.2001:db8::1]",
		"[IPV6.::1]/128", "!192.0.2.0/24", "::1", "10.0.0.0/8", "[ipv6.::ffff:10.0.0.0]/104"} {
		if _, err := parseAuthAddr(w); err != nil {
			t.Errorf("%s: %v", w, err)
		}
	}
	for _, w := range []string{"[10.1.2.3", "[10.1.2.3]/", "[10.1.2.3]/33", "[ipv6.10.1.2.3]/200", "[x]/8", "10.0.0.0/x"} {
		if _, err := parseAuthAddr(w); err == nil {
			t.Errorf("%s accepted", w)
		}
	}
}

// One bad line is reported and skipped; the others still let clients in.
func TestAuthFileBadLineSkipped(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "scheduler.auth")
	os.WriteFile(auth, []byte("op:secret:ALL:[127.0.0.0]/8\nbroken line\nx:y:TT:[300.1.1.1]/8\nv:w:TT BOGUS:\n"), 0o600)
	s, lb := listenLogged(t, Options{TCP: "127.0.0.1:0", AuthFile: auth})
	for range 2 {
		c, err := DialTCP(s.TCPAddr().String(), "op", "secret", 5*time.Second)
		if err != nil {
			t.Fatalf("a good line beside bad ones: %v", err)
		}
		c.Close()
	}
	c, err := DialTCP(s.TCPAddr().String(), "v", "w", 5*time.Second)
	if err != nil {
		t.Fatalf("a line with an unknown attribute keeps its others: %v", err)
	}
	if rep, _ := c.Do("SHOW QUEUE THREADS"); !rep.OK {
		t.Errorf("v: %+v", rep)
	}
	c.Close()
	// Each bad line is named once, not at every connection.
	for _, want := range []string{"scheduler.auth:2:", "scheduler.auth:3:", "scheduler.auth:4:"} {
		if n := lb.count(want); n != 1 {
			t.Errorf("%s logged %d times, want 1", want, n)
		}
	}
}

// MAILQ v2's two refusals, and a failed AUTH ends the session.
func TestAuthRefusals(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "scheduler.auth")
	os.WriteFile(auth, []byte("op:secret:ALL:[127.0.0.0]/8\nfar:away:ALL:[192.0.2.0]/24\n"), 0o600)
	s, _ := listenLogged(t, Options{TCP: "127.0.0.1:0", AuthFile: auth})
	for _, tt := range []struct{ user, pass, want string }{
		{"nosuch", "x", "-BAD USER OR AUTHENTICATOR OR CONTACT ADDRESS"},
		{"far", "away", "-BAD USER OR AUTHENTICATOR OR CONTACT ADDRESS"}, // not from here
		{"op", "wrong", "-BAD USER OR PASSWORD"},
	} {
		c, r := tcpSession(t, s)
		fmt.Fprintf(c, "AUTH %s %s\nSHOW QUEUE SHORT\n", tt.user, Authenticator(r.chal, tt.pass))
		if l := r.line(); l != tt.want {
			t.Errorf("AUTH %s/%s: %q, want %q", tt.user, tt.pass, l, tt.want)
		}
		r.eof()
	}
}

type tcpReader struct {
	t    *testing.T
	r    *bufio.Reader
	chal string
}

func (r *tcpReader) line() string {
	r.t.Helper()
	l, err := r.r.ReadString('\n')
	if err != nil {
		r.t.Fatalf("read: %v (got %q)", err, l)
	}
	return strings.TrimRight(l, "\r\n")
}

func (r *tcpReader) eof() {
	r.t.Helper()
	if l, err := r.r.ReadString('\n'); err == nil {
		r.t.Fatalf("session goes on: %q", l)
	}
}

func tcpSession(t *testing.T, s *Server) (net.Conn, *tcpReader) {
	t.Helper()
	c, err := net.Dial("tcp", s.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := &tcpReader{t: t, r: bufio.NewReader(c)}
	if l := r.line(); l != Greeting {
		t.Fatalf("greeting %q", l)
	}
	r.chal = r.line()
	return c, r
}

// A burst of wrong passwords is logged once and then refused; other
// addresses are not affected.
func TestAuthFailuresRateLimited(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "scheduler.auth")
	os.WriteFile(auth, []byte("op:secret:ALL:\n"), 0o600)
	s, lb := listenLogged(t, Options{TCP: "127.0.0.1:0", AuthFile: auth, AuthFailures: 3, AuthWindow: time.Hour})
	for range 3 {
		if _, err := DialTCP(s.TCPAddr().String(), "op", "guess", 5*time.Second); !errors.Is(err, ErrRefused) {
			t.Fatalf("wrong password: %v", err)
		}
	}
	for range 3 {
		_, err := DialTCP(s.TCPAddr().String(), "op", "secret", 5*time.Second)
		if err == nil || !strings.Contains(err.Error(), Refusal) {
			t.Fatalf("after the attempts are used up: %v, want %s", err, Refusal)
		}
	}
	if n := lb.count("authentication failed"); n != 1 {
		t.Errorf("authentication failures logged %d times, want once per burst", n)
	}
	if n := lb.count("refusing an address"); n != 1 {
		t.Errorf("refusals logged %d times, want once per burst", n)
	}
	// The window is per address: the limiter lets another one in.
	if !s.fails.allow(netip.MustParseAddr("127.0.0.2"), time.Now(), hclog.NewNullLogger()) {
		t.Error("another address is refused")
	}
}

// TCP clients that never log in cannot take the Unix socket's slots, are
// capped on their own, and are dropped after PreAuthTimeout.
func TestPreAuthCannotLockOutLocalOperators(t *testing.T) {
	auth := filepath.Join(t.TempDir(), "scheduler.auth")
	os.WriteFile(auth, []byte("op:secret:ALL:\n"), 0o600)
	s, _ := listenLogged(t, Options{Path: filepath.Join(t.TempDir(), "ctl.sock"), TCP: "127.0.0.1:0", AuthFile: auth,
		MaxClients: 2, MaxTCPClients: 8, MaxPreAuth: 3, PreAuthTimeout: 500 * time.Millisecond, IdleTimeout: time.Hour})
	var idle []*tcpReader
	for range 3 {
		_, r := tcpSession(t, s)
		idle = append(idle, r)
	}
	// A fourth client waiting to log in is refused...
	c, err := net.Dial("tcp", s.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b := bufio.NewReader(c)
	b.ReadString('\n')
	if l, _ := b.ReadString('\n'); !strings.HasPrefix(l, "-BUSY") {
		t.Fatalf("fourth pre-AUTH client: %q, want -BUSY", l)
	}
	c.Close()
	// ...while local operators get in, every slot of theirs.
	for range 2 {
		u := dial(t, s)
		if rep, err := u.Do("SHOW COUNTERS"); err != nil || !rep.OK {
			t.Fatalf("local operator while TCP clients wait: %+v %v", rep, err)
		}
	}
	// The idle ones are dropped without having logged in.
	for _, r := range idle {
		r.eof()
	}
	// And a client that logs in no longer counts against MaxPreAuth.
	var ok []*Client
	for range 5 {
		cl, err := DialTCP(s.TCPAddr().String(), "op", "secret", 5*time.Second)
		if err != nil {
			t.Fatalf("logged-in client: %v", err)
		}
		ok = append(ok, cl)
	}
	for _, cl := range ok {
		cl.Close()
	}
}

// Out of descriptors, the listener backs off and accepts again once some
// are free, as net/http's does.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	s, lb := listenLogged(t, Options{Path: filepath.Join(t.TempDir(), "ctl.sock")})
	// Take every descriptor but one, which the client's connection uses:
	// the server's accept then fails with EMFILE.
	lowered := lim
	lowered.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lowered); err != nil {
		t.Fatal(err)
	}
	var hog []*os.File
	release := func() {
		for _, f := range hog {
			f.Close()
		}
		hog = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	defer release()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		hog = append(hog, f)
	}
	hog[len(hog)-1].Close()
	hog = hog[:len(hog)-1]
	c, err := net.Dial("unix", s.opt.Path)
	if err != nil {
		release()
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for lb.count("accept failed") == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	release()
	if lb.count("accept failed") != 1 {
		t.Fatalf("the accept failure was not logged once: %d", lb.count("accept failed"))
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || strings.TrimSpace(l) != Greeting {
		t.Fatalf("after EMFILE the listener does not serve: %q %v", l, err)
	}
	if u := dial(t, s); u == nil {
		t.Fatal("no client after EMFILE")
	}
}

// HELP names every command, one per line, each line starting with it.
func TestHelpNamesEveryCommand(t *testing.T) {
	s := listen(t, Options{})
	loop(t, s, func(r *Request) Reply { return OK("") })
	rep, err := dial(t, s).Do("HELP")
	if err != nil || !rep.Multi {
		t.Fatalf("HELP: %+v %v", rep, err)
	}
	for _, v := range Verbs {
		found := false
		for _, l := range rep.Lines {
			if strings.HasPrefix(l, v.Name+" ") || strings.HasPrefix(l, v.Name+":") {
				found = true
			}
		}
		if !found {
			t.Errorf("HELP has no line for %s", v.Name)
		}
	}
	for _, l := range rep.Lines {
		word := strings.FieldsFunc(l, func(r rune) bool { return r == ' ' || r == ':' })[0]
		if _, _, ok := parse(l[:strings.IndexByte(l, ':')]); !ok && word != "AUTH" && word != "HELP" && word != "QUIT" {
			if v, _, _ := parse(word); v.Name == "" {
				t.Errorf("HELP line names no command: %q", l)
			}
		}
	}
	for _, w := range []string{"AUTH", "HELP", "QUIT"} {
		if !strings.Contains(strings.Join(rep.Lines, "\n"), "\n"+w) {
			t.Errorf("HELP does not name %s", w)
		}
	}
}

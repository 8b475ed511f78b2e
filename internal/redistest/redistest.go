// Package redistest runs private redis-server instances for tests and
// experiments, as package postfix does for Postfix: each listens on
// 127.0.0.1 only, on a free port, with its own directory, no persistence
// (--save "" --appendonly no), as a child process stopped by its pid. A
// system Redis is never used or touched.
package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"zsched/internal/need"
)

// Program is Debian's redis-server (package redis-server; .ci/run installs
// it where missing).
const Program = "redis-server"

// ErrUnavailable is wrapped by Available's error.
var ErrUnavailable = errors.New("redistest: cannot run a private redis-server")

// Available reports whether a private instance can be started here.
func Available() error {
	if _, err := exec.LookPath(Program); err != nil {
		return fmt.Errorf("%w: %s is not installed (apt-get install redis-server): %w", ErrUnavailable, Program, err)
	}
	return nil
}

// Require skips t when redis-server is missing, and fails it instead when
// ZSCHED_CI=1: CI must run every test (package need).
func Require(t testing.TB) {
	t.Helper()
	need.Met(t, "redis-server", Available())
}

// Server is a running private redis-server.
type Server struct {
	Dir  string
	Port int
	Addr string // "127.0.0.1:port"

	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *bytes.Buffer
}

// New starts a server for t in a fresh temporary directory and stops it
// when t ends. It calls Require first.
func New(t testing.TB) *Server {
	t.Helper()
	Require(t)
	s, err := Start(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

// Start starts redis-server with dir as its directory, on port (0: a free
// one), and waits until it accepts connections. args are more options,
// such as "--requirepass", "secret".
func Start(dir string, port int, args ...string) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{Dir: dir, args: args}
	// A port picked free may be taken before the server binds it: it then
	// exits at once, and another is tried.
	for attempt := 0; ; attempt++ {
		p := port
		if p == 0 {
			if p, err = freePort(); err != nil {
				return nil, err
			}
		}
		err = s.start(p)
		if err == nil || port != 0 || attempt == 2 || !errors.Is(err, errExited) {
			return s, err
		}
	}
}

var errExited = errors.New("redistest: redis-server exited during start-up")

func (s *Server) start(port int) error {
	s.Port, s.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(Program,
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", s.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--logfile", "",
		"--loglevel", "warning",
		"--databases", "4",
	)
	cmd.Args = append(cmd.Args, s.args...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.out = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", Program, err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	s.exited = exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
	// A failure guard, not a synchronisation: readiness is the PING.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if s.ping() {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %s", errExited, s.out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redistest: redis-server on %s not ready within 15s: %s", s.Addr, s.out.String())
		}
	}
}

// ping reports whether the server answers PING (with PONG, or, when it
// wants a password, with NOAUTH: it is up all the same).
func (s *Server) ping() bool {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 7)
	n, _ := c.Read(buf)
	return string(buf[:n]) == "+PONG\r\n" || string(buf[:n]) == "-NOAUTH"
}

// URL is the server's redis:// URL for database db.
func (s *Server) URL(db int) string { return "redis://" + s.Addr + "/" + strconv.Itoa(db) }

// Pid is the server's process id, 0 when it is not running.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill kills the server with SIGKILL, as a crash would, and waits for it
// to be gone. Its data is lost (nothing is persisted). Safe to call when
// it is not running.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	s.cmd = nil
}

// Stop stops the server (SIGKILL: it is disposable and keeps nothing).
func (s *Server) Stop() { s.Kill() }

// Restart starts the server again on the same port and directory, after
// Kill: empty, as a Redis without persistence comes back.
func (s *Server) Restart() error {
	s.Kill()
	return s.start(s.Port)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

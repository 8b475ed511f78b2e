package redistest

import (
	"os"
	"strconv"
	"testing"
)

// TestStartKillRestart: a private server answers, dies with Kill, and comes
// back empty on the same port with Restart; Stop leaves no process.
func TestStartKillRestart(t *testing.T) {
	s := New(t)
	if !s.ping() {
		t.Fatal("no PONG after start")
	}
	pid := s.Pid()
	s.Kill()
	if s.ping() {
		t.Fatal("PONG after kill")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Fatalf("pid %d still there after Kill", pid)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if !s.ping() || s.Pid() == pid {
		t.Fatalf("restart: ping %v, pid %d (was %d)", s.ping(), s.Pid(), pid)
	}
	s.Stop()
	if s.Pid() != 0 || s.ping() {
		t.Fatal("still running after Stop")
	}
}

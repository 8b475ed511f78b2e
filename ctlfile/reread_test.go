package ctlfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestRereadKeepsLiveLocks(t *testing.T) {
	s := &Spool{Root: t.TempDir()}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	rel, err := s.Enqueue(&Message{Sender: "a@example.org", Header: []byte("Subject: x\n"), Body: []byte("b\n"),
		Rcpts: []Address{{Channel: "smtp", Host: "one.test", User: "x@one.test"}, {Channel: "smtp", Host: "two.test", User: "y@two.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(filepath.Join(s.TransportDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if ok, err := h.Lock(0, os.Getpid()); !ok || err != nil {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if _, err := s.Read(rel); !errors.Is(err, ErrLiveLock) {
		t.Fatalf("Read: %v, want ErrLiveLock", err)
	}
	f, err := s.Reread(rel)
	if err != nil {
		t.Fatalf("Reread: %v", err)
	}
	if f.Rcpts[0].Status != Locked || f.Rcpts[0].PID != os.Getpid() || f.Rcpts[1].Status != Pending {
		t.Fatalf("Reread statuses %q %q, want the live lock kept and the other pending", f.Rcpts[0].Status, f.Rcpts[1].Status)
	}
}

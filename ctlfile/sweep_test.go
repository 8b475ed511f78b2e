package ctlfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"zsched/ctlfile"
)

func TestSweepTempRemovesOnlyOldDebris(t *testing.T) {
	s := &ctlfile.Spool{Root: t.TempDir(), Hash: 1, NoSync: true}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	rel, err := s.Enqueue(&ctlfile.Message{Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "a.test", User: "u@a.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	write := func(p string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(s.Root, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(s.Root, p), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("queue/.new-123", old)        // a body a killed enqueue never named
	write("transport/.456.tmp", old)    // a control file never renamed
	write("queue/.new-789", time.Now()) // an enqueue in progress
	write("transport/.999.tmp", time.Now())
	write("transport/.keep", old) // not an enqueue's name

	removed, err := s.SweepTemp(time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{"queue/.new-123", "transport/.456.tmp"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %q, want %q", removed, want)
	}
	for _, p := range []string{"queue/.new-789", "transport/.999.tmp", "transport/.keep"} {
		if _, err := os.Stat(filepath.Join(s.Root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := s.Read(rel); err != nil {
		t.Errorf("the queued message after the sweep: %v", err)
	}
}

// TestReadAfterInterruptedRemove: a control file without its body (left
// by a Remove of the order before the control file went first). Read
// returns such a file when every recipient is settled (for the scheduler
// to complete it again), and still reports ErrBodyMissing when one is
// pending.
func TestReadAfterInterruptedRemove(t *testing.T) {
	s := &ctlfile.Spool{Root: t.TempDir(), Hash: 1, NoSync: true}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	for _, settled := range []bool{true, false} {
		rel, err := s.Enqueue(&ctlfile.Message{Rcpts: []ctlfile.Address{
			{Channel: "smtp", Host: "a.test", User: "u@a.test"},
			{Channel: "smtp", Host: "b.test", User: "v@b.test"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := ctlfile.Open(filepath.Join(s.TransportDir(), rel))
		if err != nil {
			t.Fatal(err)
		}
		id := h.File.ID
		if err := h.Mark(0, ctlfile.Done); err != nil {
			t.Fatal(err)
		}
		if settled {
			if err := h.Mark(1, ctlfile.Failed); err != nil {
				t.Fatal(err)
			}
		}
		h.Close()
		if err := os.Remove(filepath.Join(s.QueueDir(), ctlfile.QueuePath(rel, id))); err != nil {
			t.Fatal(err)
		}
		f, err := s.Read(rel)
		switch {
		case settled && err != nil:
			t.Errorf("settled message without its body: %v, want it read", err)
		case settled && !f.Arrival.IsZero():
			t.Errorf("arrival %v without a body", f.Arrival)
		case !settled && !errors.Is(err, ctlfile.ErrBodyMissing):
			t.Errorf("pending message without its body: %v, want ErrBodyMissing", err)
		}
		if err := s.Remove(ctlfile.Files{Rel: rel, ID: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Read(rel); !errors.Is(err, ctlfile.ErrNotFound) {
			t.Errorf("after Remove: %v, want ErrNotFound", err)
		}
	}
}

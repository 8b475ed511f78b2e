package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/ctlfile"
)

func queueMessages(t *testing.T, s *ctlfile.Spool, n int) (rels []string, files []ctlfile.Files) {
	t.Helper()
	for i := range n {
		host := fmt.Sprintf("d%d.test", i)
		rel, err := s.Enqueue(&ctlfile.Message{Rcpts: []ctlfile.Address{{Channel: "smtp", Host: host, User: "u@" + host}}})
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		rels, files = append(rels, rel), append(files, f.Files(rel))
	}
	return rels, files
}

// TestRemoverDrainRemovesAll: close(true) returns once every queued
// message's control file and body are gone, and take hands back every name
// exactly once.
func TestRemoverDrainRemovesAll(t *testing.T) {
	s := &ctlfile.Spool{Root: t.TempDir(), Hash: 2, NoSync: true}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	rels, files := queueMessages(t, s, 300)
	r := newRemover(s, hclog.NewNullLogger(), time.Now, newRateLog(rateEvery))
	for i := range rels {
		r.remove(files[i])
	}
	r.close(true)
	got := r.take()
	slices.Sort(got)
	want := slices.Clone(rels)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("taken back %d names, want the %d queued", len(got), len(want))
	}
	if !r.idle() {
		t.Error("remover not idle after every name was taken back")
	}
	for i, rel := range rels {
		if _, err := s.Read(rel); err == nil {
			t.Errorf("%s still readable", rel)
		}
		if _, err := os.Stat(filepath.Join(s.QueueDir(), ctlfile.QueuePath(rel, files[i].ID))); err == nil {
			t.Errorf("body of %s still there", rel)
		}
	}
}

// TestRemoverStopLeavesBacklog: close(false) does not wait for a backlog;
// whatever it leaves is still whole on disk (the next start completes it).
func TestRemoverStopLeavesBacklog(t *testing.T) {
	s := &ctlfile.Spool{Root: t.TempDir(), Hash: 1, NoSync: true}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	rels, files := queueMessages(t, s, 2000)
	r := newRemover(s, hclog.NewNullLogger(), time.Now, newRateLog(rateEvery))
	for i := range rels {
		r.remove(files[i])
	}
	r.close(false)
	removed := map[string]bool{}
	for _, rel := range r.take() {
		removed[rel] = true
	}
	for _, rel := range rels {
		_, err := s.Read(rel)
		if removed[rel] == (err == nil) {
			t.Fatalf("%s: taken back as removed %v, readable %v", rel, removed[rel], err == nil)
		}
	}
	t.Logf("%d of %d removed before the stop", len(removed), len(rels))
}

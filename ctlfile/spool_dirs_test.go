package ctlfile

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheckRelAndBodyRel(t *testing.T) {
	for _, c := range []struct{ rel, id, body string }{
		{"12", "12", "12"},
		{"12", "345", "345"},
		{"A/12", "12", "A/12"},
		{"A/12", "7", "A/7"},
		{"Z/B/12-etrn", "99", "Z/B/99"},
	} {
		if err := checkRel(c.rel); err != nil {
			t.Errorf("checkRel(%q) = %v", c.rel, err)
		}
		if got := bodyRel(c.rel, c.id); got != c.body {
			t.Errorf("bodyRel(%q, %q) = %q, want %q", c.rel, c.id, got, c.body)
		}
	}
	for _, rel := range []string{"", "/12", "A/B/C/12", "a/12", "AB/12", "../12", "A/../12", "A/", "x12", "A//12", "1\x002", "/etc/passwd"} {
		if err := checkRel(rel); !errors.Is(err, ErrBadPath) {
			t.Errorf("checkRel(%q) = %v, want ErrBadPath", rel, err)
		}
	}
}

// openFDs returns the directories the process has descriptors of under root.
func openFDs(t *testing.T, root string) map[string]int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	got := map[string]int{}
	for _, e := range ents {
		p, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(p, root+"/") {
			got[strings.TrimPrefix(p, root+"/")]++
		}
	}
	return got
}

func queueOne(t *testing.T, s *Spool) string {
	t.Helper()
	rel, err := s.Enqueue(&Message{Sender: "s@example.org", Rcpts: []Address{{Channel: "smtp", Host: "h.test", User: "u@h.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// TestSpoolDirDescriptors: Read and Remove go through descriptors of
// transport/ and queue/, one each, close-on-exec, released by Close; the
// Spool works again after Close.
func TestSpoolDirDescriptors(t *testing.T) {
	s := newSpool(t, 2)
	root, err := filepath.EvalSymlinks(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	rel := queueOne(t, s)
	for range 3 {
		if _, err := s.Read(rel); err != nil {
			t.Fatal(err)
		}
	}
	if got := openFDs(t, root); len(got) != 2 || got["transport"] != 1 || got["queue"] != 1 {
		t.Fatalf("descriptors under the spool: %v, want one of transport and one of queue", got)
	}
	c := s.dirs.Load()
	for tree := range numTrees {
		v := c.fds.slot[tree].Load()
		if v == 0 {
			t.Fatalf("tree %d: no descriptor", tree)
		}
		flags, err := unix.FcntlInt(uintptr(v-1), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("tree %d: descriptor flags %#x, %v: not close-on-exec", tree, flags, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := openFDs(t, root); len(got) != 0 {
		t.Fatalf("after Close, descriptors under the spool: %v", got)
	}
	if err := s.Remove(Files{Rel: rel, ID: path.Base(rel)}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.ctlPath(rel), s.bodyPath(rel, path.Base(rel))} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Remove: %v", p, err)
		}
	}
	s.Close()
}

// TestSpoolDirReplaced: transport/ and queue/ (or a hash directory)
// removed and made again after the Spool opened them are noticed: their
// files are still read and removed, and errors name the file's full path.
func TestSpoolDirReplaced(t *testing.T) {
	for _, hash := range []bool{false, true} {
		s := newSpool(t, 1)
		t.Cleanup(func() { s.Close() })
		rel := queueOne(t, s)
		f, err := s.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		// Move the directories away and put copies in their place.
		for _, tree := range []string{s.TransportDir(), s.QueueDir()} {
			d := tree
			if hash {
				d = filepath.Join(tree, path.Dir(rel))
			}
			if err := os.Rename(d, d+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(d, os.DirFS(d+".old")); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(d + ".old"); err != nil {
				t.Fatal(err)
			}
		}
		// Copies: other files than the ones read before.
		if err := s.Remove(f.Files(rel)); !errors.Is(err, ErrChanged) {
			t.Fatalf("Remove of files replaced by copies: %v, want ErrChanged", err)
		}
		if f, err = s.Read(rel); err != nil {
			t.Fatalf("Read after the directories were replaced (hash dirs %v): %v", hash, err)
		}
		if err := s.Remove(f.Files(rel)); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{s.ctlPath(rel), s.bodyPath(rel, f.ID)} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s after Remove: %v", p, err)
			}
		}
		if _, err = s.Read(rel); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Read of a removed file: %v, want ErrNotFound", err)
		}
		// The new directories are used from now on.
		rel = queueOne(t, s)
		if _, err := s.Read(rel); err != nil {
			t.Fatal(err)
		}
	}
	s := newSpool(t, 1)
	t.Cleanup(func() { s.Close() })

	// A body that cannot be stat'ed for another reason than its absence:
	// the error names the full path.
	rel := queueOne(t, s)
	body := s.bodyPath(rel, path.Base(rel))
	if err := os.Remove(body); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(body), body); err != nil { // a loop
		t.Fatal(err)
	}
	_, err := s.Read(rel)
	if err == nil || !strings.Contains(err.Error(), body) || !errors.Is(err, unix.ELOOP) {
		t.Fatalf("Read with a looping body: %v, want ELOOP naming %s", err, body)
	}
}

// TestSpoolNewRoot: a Spool given another Root reaches files there.
func TestSpoolNewRoot(t *testing.T) {
	s := newSpool(t, 2)
	t.Cleanup(func() { s.Close() })
	rel := queueOne(t, s)
	if _, err := s.Read(rel); err != nil {
		t.Fatal(err)
	}
	s.Root = t.TempDir()
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(rel); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read of the old Root's file in the new Root: %v, want ErrNotFound", err)
	}
	rel = queueOne(t, s)
	if _, err := s.Read(rel); err != nil {
		t.Fatal(err)
	}
}

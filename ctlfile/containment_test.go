package ctlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// routerWrite writes a message at name n in the way ZMailer's router
// does (../shared/tools/zmailer-mkmsg.py): the body renamed into
// queue/<dir>/<n>, the control file written as transport/.<n> and renamed
// to transport/<dir>/<n> — renames that replace whatever has the names.
func routerWrite(t *testing.T, s *Spool, rel string, marker string) {
	t.Helper()
	dir, n := path.Split(rel)
	body := "Subject: " + marker + "\n\nbody of " + marker + "\n"
	tmp := filepath.Join(s.QueueDir(), ".tmp-router")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.QueueDir(), dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.QueueDir(), dir, n)); err != nil {
		t.Fatal(err)
	}
	ctl := fmt.Sprintf("@ 0x00000007\ni %s\no 0\nl <%s>\ns smtp example.org s@example.org 0\nr           smtp dest.test u@dest.test 0\nm\n\n", n, marker)
	dot := filepath.Join(s.TransportDir(), "."+n)
	if err := os.WriteFile(dot, []byte(ctl), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.TransportDir(), dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dot, filepath.Join(s.TransportDir(), dir, n)); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveNameReusedBetweenUnlinks (issue 16, item 1): a router that
// gets the inode freed by the first of Remove's two unlinks writes a new
// message under the same name before the second. Remove must leave the
// new message whole: the control file goes first (while the body exists
// its inode, hence the name, cannot be reused), and nothing is unlinked
// that is not the file read. The hook stands for the router's timing.
func TestRemoveNameReusedBetweenUnlinks(t *testing.T) {
	for _, hash := range []int{0, 2} {
		s := newSpool(t, hash)
		rel, err := s.Enqueue(testMessage(2))
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		reused := false
		s.hook = func(step string) {
			if step == "remove-between-unlinks" && !reused {
				reused = true
				routerWrite(t, s, rel, "the new message")
			}
		}
		if err := s.Remove(f.Files(rel)); err != nil && !errors.Is(err, ErrChanged) {
			t.Fatal(err)
		}
		s.hook = nil
		if !reused {
			t.Fatal("Remove never reached the point between its two unlinks")
		}
		nf, err := s.Read(rel)
		if err != nil {
			t.Fatalf("hash %d: the new message under the reused name: %v", hash, err)
		}
		if nf.LogIdent != "<the new message>" {
			t.Fatalf("hash %d: transport/%s is %q, want the new message", hash, rel, nf.LogIdent)
		}
		if !bytes.Contains(readFile(t, s.bodyPath(rel, nf.ID)), []byte("body of the new message")) {
			t.Fatalf("hash %d: queue/%s is not the new message's body", hash, rel)
		}
	}
}

// TestRemoveLeavesAnotherFile: a file that is no longer the one read is
// left, with ErrChanged; files that are gone are no error.
func TestRemoveLeavesAnotherFile(t *testing.T) {
	s := newSpool(t, 1)
	rel, err := s.Enqueue(testMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	// The control file replaced (a rename over it): both files stay.
	routerWrite(t, s, rel, "a replacement")
	if err := s.Remove(f.Files(rel)); !errors.Is(err, ErrChanged) {
		t.Fatalf("Remove of a replaced control file: %v, want ErrChanged", err)
	}
	for _, p := range []string{s.ctlPath(rel), s.bodyPath(rel, f.ID)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	// Only the body replaced: the control file goes, the body stays.
	nf, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	routerWrite(t, s, rel, "another")
	m := nf.Files(rel)
	m.Control = FileID{} // as if only the body had changed
	if err := s.Remove(m); !errors.Is(err, ErrChanged) {
		t.Fatalf("Remove of a replaced body: %v, want ErrChanged", err)
	}
	if _, err := os.Stat(s.ctlPath(rel)); !os.IsNotExist(err) {
		t.Errorf("control file: %v, want it removed", err)
	}
	if !bytes.Contains(readFile(t, s.bodyPath(rel, nf.ID)), []byte("body of another")) {
		t.Error("the other body was not left alone")
	}
}

// TestFileIDTellsReusedInodesApart (issue 16, item 1): a file created and
// removed again and again gets the same inode number — on ext4 often the
// same birth time too — but another FileID and another QueueID each time;
// the same file read twice (a restart) has the same ones.
func TestFileIDTellsReusedInodesApart(t *testing.T) {
	s := newSpool(t, 0)
	seen := map[FileID]bool{}
	qids := map[string]bool{}
	reusedIno := 0
	var lastIno uint64
	for i := range 20 {
		rel, err := s.Enqueue(testMessage(1))
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		if f.Control != again.Control || f.Body != again.Body || f.QueueID() != again.QueueID() {
			t.Fatalf("one file read twice: %v / %v, %s / %s", f.Control, again.Control, f.QueueID(), again.QueueID())
		}
		if !f.Control.Known() || !f.Body.Known() {
			t.Fatalf("identities not known: %v, %v", f.Control, f.Body)
		}
		if seen[f.Control] || seen[f.Body] || qids[f.QueueID()] {
			t.Fatalf("round %d: an identity or queue id seen before: %v %v %s", i, f.Control, f.Body, f.QueueID())
		}
		seen[f.Control], seen[f.Body], qids[f.QueueID()] = true, true, true
		if i > 0 && f.Control.Ino == lastIno {
			reusedIno++
		}
		lastIno = f.Control.Ino
		if err := s.Remove(f.Files(rel)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("control file inode numbers reused %d times in 20; source %v; e.g. queue id %s", reusedIno, lastSrc(seen), anyKey(qids))
	if reusedIno == 0 {
		if os.Getenv("ZSCHED_CI") != "" {
			t.Fatal("no inode number was reused: this filesystem (tmpfs?) cannot show what the test is about")
		}
		t.Skip("no inode number was reused on this filesystem: nothing to tell apart")
	}
}

func lastSrc(m map[FileID]bool) IDSource {
	for id := range m {
		return id.Src
	}
	return IDNone
}

func anyKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}

// TestQueueID: the name, a dot and the generation in lowercase
// Crockford base 32; an unknown FileID gives the bare name.
func TestQueueID(t *testing.T) {
	for _, c := range []struct {
		id   FileID
		want string
	}{
		{FileID{}, "123"},
		{FileID{Ino: 9, Gen: 0, Src: IDHandle}, "123.0"},
		{FileID{Ino: 9, Gen: 31, Src: IDHandle}, "123.z"},
		{FileID{Ino: 9, Gen: 32, Src: IDHandle}, "123.10"},
		{FileID{Ino: 9, Gen: 0xffffffff, Src: IDHandle}, "123.3zzzzzz"},
		{FileID{Ino: 9, Gen: 1<<64 - 1, Src: IDBirth}, "123.fzzzzzzzzzzzz"},
	} {
		if got := c.id.QueueID("123"); got != c.want {
			t.Errorf("%v.QueueID = %q, want %q", c.id, got, c.want)
		}
	}
	s := newSpool(t, 2)
	rel, err := s.Enqueue(testMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	if re := regexp.MustCompile(`^` + path.Base(rel) + `\.[0-9a-hjkmnp-tv-z]{1,13}$`); !re.MatchString(f.QueueID()) {
		t.Errorf("queue id %q of %s", f.QueueID(), rel)
	}
}

// TestGenOf: the inode number is taken out of a handle, wherever the
// filesystem puts it.
func TestGenOf(t *testing.T) {
	words := func(ws ...uint32) *rawsys.FileHandle {
		h := &rawsys.FileHandle{Bytes: uint32(4 * len(ws))}
		for i, w := range ws {
			copy(h.Data[4*i:], []byte{byte(w), byte(w >> 8), byte(w >> 16), byte(w >> 24)})
		}
		return h
	}
	for _, c := range []struct {
		name string
		h    *rawsys.FileHandle
		ino  uint64
		want uint64
	}{
		{"ext4: inode, generation", words(12, 0xdead), 12, 0xdead},
		{"tmpfs: generation, inode, high inode", words(0xbeef, 12, 0), 12, 0xbeef},
		{"64-bit inode", words(5, 1, 0xcafe), 1<<32 | 5, 0xcafe},
	} {
		if got := genOf(c.h, c.ino); got != c.want {
			t.Errorf("%s: gen %#x, want %#x", c.name, got, c.want)
		}
		if !handleHas(c.h, c.ino) {
			t.Errorf("%s: the inode is not found in the handle", c.name)
		}
	}
	if handleHas(words(13, 0xdead), 12) {
		t.Error("a handle of inode 13 passes for inode 12")
	}
}

// TestReadRefusesWhatIsNotARegularFile (issue 16, item 5): a FIFO, a
// symbolic link, a directory or a socket at a control file's name is
// ErrNotRegular, at once: nothing is opened for reading that could block.
func TestReadRefusesWhatIsNotARegularFile(t *testing.T) {
	s := newSpool(t, 0)
	tr := s.TransportDir()
	if err := unix.Mkfifo(filepath.Join(tr, "100"), 0o644); err != nil {
		t.Fatal(err)
	}
	real := writeFile(t, t.TempDir(), "real", []byte("@ 0x00000007\n"))
	if err := os.Symlink(real, filepath.Join(tr, "101")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(tr, "102"), 0o755); err != nil {
		t.Fatal(err)
	}
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	if err := unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(tr, "103")}); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"100", "101", "102", "103"} {
		done := make(chan error, 1)
		go func() {
			_, err := s.Read(rel)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("Read(%s): %v, want ErrNotRegular", rel, err)
			}
		case <-time.After(10 * time.Second): // a failure guard: the read blocks
			f, _ := os.OpenFile(filepath.Join(tr, "100"), os.O_WRONLY, 0)
			f.Close() // release the reader so the test can end
			t.Fatalf("Read(%s) blocked", rel)
		}
	}
	if _, err := s.ReadControl("100"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadControl(FIFO): %v, want ErrNotRegular", err)
	}
	if err := s.AppendDiags("100", []Diag{{RcptOffset: 1}}); err == nil {
		t.Error("AppendDiags wrote into a FIFO")
	}
}

// TestReadRefusesTooLarge (issue 16, item 7): a control file larger than
// the limit is a MalformedError (ErrTooLarge) with its identity, found by
// its size before any byte is read; within the limit it reads.
func TestReadRefusesTooLarge(t *testing.T) {
	s := newSpool(t, 0)
	rel, err := s.Enqueue(testMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(readFile(t, s.ctlPath(rel))))
	s.SetMaxControlSize(size)
	if _, err := s.Read(rel); err != nil {
		t.Fatalf("a file of exactly the limit: %v", err)
	}
	s.SetMaxControlSize(size - 1)
	_, err = s.Read(rel)
	var me *MalformedError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &me) || !me.Control.Known() {
		t.Fatalf("one byte over the limit: %v, want a MalformedError with ErrTooLarge and the file's identity", err)
	}
	// A sparse file of 1 TiB: read, it would never end.
	big := filepath.Join(s.TransportDir(), "4242")
	fd, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := fd.Truncate(1 << 40); err != nil {
		t.Skipf("no sparse file of 1 TiB here: %v", err)
	}
	fd.Close()
	s.SetMaxControlSize(0)
	if _, err := s.Read("4242"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 1 TiB control file: %v, want ErrTooLarge", err)
	}
}

// TestControlNames (issue 16, item 18): only all-digit names (and
// <digits>-etrn, ZMailer's ETRN requests) are control files; Scan skips
// the rest and Read refuses them.
func TestControlNames(t *testing.T) {
	s := newSpool(t, 0)
	data := []byte(a1)
	for _, n := range []string{"12345", "A/777", "12346.bak", "12347.tmp", "12348~", "12349-old", "A/12350.bak", "90-etrn"} {
		writeFile(t, s.TransportDir(), n, data)
	}
	var got []string
	if err := s.Scan(func(rel string) { got = append(got, rel) }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if fmt.Sprint(got) != "[12345 90-etrn A/777]" {
		t.Errorf("Scan found %v, want [12345 90-etrn A/777]", got)
	}
	for _, rel := range []string{"12346.bak", "12347.tmp", "A/12350.bak"} {
		if _, err := s.Read(rel); !errors.Is(err, ErrBadPath) {
			t.Errorf("Read(%s): %v, want ErrBadPath", rel, err)
		}
		if IsControlPath(rel) {
			t.Errorf("IsControlPath(%s)", rel)
		}
	}
}

// TestSweepBodies (issue 16, item 1): bodies without their control file
// are removed once older than the cutoff; a body with its control file, a
// young one (a router between its two files), one a control file of
// another name refers to, and other names stay.
func TestSweepBodies(t *testing.T) {
	s := newSpool(t, 1)
	keep, err := s.Enqueue(testMessage(1)) // body and control file
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := s.Enqueue(testMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.ctlPath(orphan)); err != nil {
		t.Fatal(err)
	}
	referred, err := s.Enqueue(testMessage(1)) // named by another control file's i line
	if err != nil {
		t.Fatal(err)
	}
	other := writeFile(t, s.TransportDir(), path.Dir(referred)+"/99999999",
		bytes.Replace(readFile(t, s.ctlPath(referred)), []byte("l <"), []byte("l <other"), 1))
	if err := os.Remove(s.ctlPath(referred)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.QueueDir(), ".new-1", []byte("an enqueue's")) // not a body's name

	// Nothing is old yet.
	removed, failed, err := s.SweepBodies(time.Now().Add(-time.Hour))
	if err != nil || len(failed) > 0 || len(removed) > 0 {
		t.Fatalf("young bodies: removed %v, failed %v, %v", removed, failed, err)
	}
	// All old now.
	removed, failed, err = s.SweepBodies(time.Now().Add(time.Hour))
	if err != nil || len(failed) > 0 {
		t.Fatal(err, failed)
	}
	if want := "[queue/" + orphan + "]"; fmt.Sprint(removed) != want {
		t.Fatalf("old bodies: removed %v, want %s", removed, want)
	}
	for _, p := range []string{s.bodyPath(keep, path.Base(keep)), s.bodyPath(referred, path.Base(referred)), other,
		filepath.Join(s.QueueDir(), ".new-1")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestSweepBodiesListsControlFiles: the sweep learns which bodies have
// their control file from a listing of each directory of transport/, and
// stats a control file only for a body the listing did not show — the
// orphan here, not the messages that are whole — with the same result.
func TestSweepBodiesListsControlFiles(t *testing.T) {
	for _, hash := range []int{0, 2} {
		s := newSpool(t, hash)
		var whole []string
		for range 6 {
			rel, err := s.Enqueue(testMessage(1))
			if err != nil {
				t.Fatal(err)
			}
			whole = append(whole, rel)
		}
		orphan := whole[0]
		whole = whole[1:]
		if err := os.Remove(s.ctlPath(orphan)); err != nil {
			t.Fatal(err)
		}
		stats := 0
		s.hook = func(step string) {
			if step == "sweep-stat-control" {
				stats++
			}
		}
		removed, failed, err := s.SweepBodies(time.Now().Add(time.Hour))
		if err != nil || len(failed) > 0 {
			t.Fatal(err, failed)
		}
		if want := "[queue/" + orphan + "]"; fmt.Sprint(removed) != want {
			t.Errorf("hash %d: removed %v, want %s", hash, removed, want)
		}
		if stats != 1 {
			t.Errorf("hash %d: the sweep stat'ed %d control files; want 1 (the orphan's), the others listed", hash, stats)
		}
		for _, rel := range whole {
			if _, err := os.Stat(s.bodyPath(rel, path.Base(rel))); err != nil {
				t.Errorf("hash %d: %v", hash, err)
			}
		}
	}
}

// TestFinishRemovals (issue 16, item 1): a Remove killed between its two
// unlinks leaves a body without its control file; the removal log lets the
// next start remove it at once — but not a body whose control file is
// still there, nor one that is no longer the file read.
func TestFinishRemovals(t *testing.T) {
	s := newSpool(t, 2)
	var batch []Files
	for range 3 {
		rel, err := s.Enqueue(testMessage(1))
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, f.Files(rel))
	}
	log, err := s.OpenRemovalLog(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Begin(batch); err != nil {
		t.Fatal(err)
	}
	// The first is killed between its unlinks; the second never started;
	// the third's body was replaced (by a rename over it) meanwhile.
	s.hook = func(step string) {
		if step == "remove-between-unlinks" {
			panic("killed")
		}
	}
	func() {
		defer func() { recover() }()
		s.Remove(batch[0])
	}()
	s.hook = nil
	os.Remove(s.ctlPath(batch[2].Rel))
	replaced := s.bodyPath(batch[2].Rel, batch[2].ID)
	if err := os.WriteFile(replaced+".new", []byte("another"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(replaced+".new", replaced); err != nil {
		t.Fatal(err)
	}
	log.Close()

	removed, err := s.FinishRemovals()
	if err != nil {
		t.Fatal(err)
	}
	if want := "[" + filepath.Join("queue", batch[0].Rel) + "]"; fmt.Sprint(removed) != want {
		t.Fatalf("removed %v, want %s", removed, want)
	}
	if _, err := os.Stat(s.bodyPath(batch[1].Rel, batch[1].ID)); err != nil {
		t.Errorf("the body of a message still queued: %v", err)
	}
	if _, err := os.Stat(replaced); err != nil {
		t.Errorf("a body that is not the one read: %v", err)
	}
	if got := string(readFile(t, filepath.Join(s.StateDir(), "removing.0"))); got != "zsched removals 0000000\n" {
		t.Errorf("the log after FinishRemovals: %q", got)
	}
	if removed, err := s.FinishRemovals(); err != nil || len(removed) > 0 {
		t.Errorf("a second FinishRemovals: %v, %v", removed, err)
	}
}

// TestRemovalLogEnd: a finished batch leaves nothing to finish, and a
// shorter batch written over a longer one counts only its own entries.
func TestRemovalLogEnd(t *testing.T) {
	s := newSpool(t, 0)
	log, err := s.OpenRemovalLog(1)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	long := []Files{{Rel: "1", ID: "1"}, {Rel: "2", ID: "2"}, {Rel: "3", ID: "3"}}
	if err := log.Begin(long); err != nil {
		t.Fatal(err)
	}
	if err := log.Begin(long[:1]); err != nil {
		t.Fatal(err)
	}
	if got := parseRemovalLog(readFile(t, filepath.Join(s.StateDir(), "removing.1"))); len(got) != 1 || got[0].Rel != "1" {
		t.Fatalf("entries %v, want only the last batch's", got)
	}
	if err := log.End(); err != nil {
		t.Fatal(err)
	}
	if got := parseRemovalLog(readFile(t, filepath.Join(s.StateDir(), "removing.1"))); len(got) != 0 {
		t.Fatalf("entries %v after End", got)
	}
}

// TestReadBreakingResetsOnlyJudgedLocks (issue 16, item 3): a lock held by
// a live process is a LockError with the lock and the file's change time;
// ReadBreaking resets exactly the locks it was given, and none if the
// file changed since.
func TestReadBreakingResetsOnlyJudgedLocks(t *testing.T) {
	s := newSpool(t, 0)
	rel, err := s.Enqueue(testMessage(2))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(s.ctlPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getpid() // alive, and no agent
	if ok, err := h.Lock(0, me); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h.Close()
	_, err = s.Read(rel)
	var le *LockError
	if !errors.As(err, &le) || !errors.Is(err, ErrLiveLock) {
		t.Fatalf("Read of a live lock: %v, want a LockError", err)
	}
	if len(le.Locks) != 1 || le.Locks[0].PID != me || le.Locks[0].Host == "" || le.Changed.IsZero() || !le.Control.Known() {
		t.Fatalf("LockError %+v", le)
	}
	// A judgment of the file as it was before a change is void.
	earlier := *le
	earlier.Changed = le.Changed.Add(-time.Second)
	if _, err := s.ReadBreaking(rel, &earlier); !errors.Is(err, ErrLiveLock) {
		t.Fatalf("ReadBreaking after the file changed: %v, want the lock reported again", err)
	}
	// A lock taken since is not in the judgment: it stays.
	h, err = Open(s.ctlPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Lock(1, me); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h.Close()
	if _, err := s.ReadBreaking(rel, le); !errors.Is(err, ErrLiveLock) {
		t.Fatalf("ReadBreaking with a lock it was not given: %v, want the lock reported", err)
	}
	_, err = s.Read(rel)
	if !errors.As(err, &le) || len(le.Locks) != 2 {
		t.Fatalf("Read: %v, want both locks", err)
	}
	f, err := s.ReadBreaking(rel, le)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range f.Rcpts {
		if r.Status != Pending {
			t.Errorf("recipient %d: %v after its lock was broken", i, r.Status)
		}
	}
	if g, err := s.Read(rel); err != nil || g.Rcpts[0].Status != Pending {
		t.Fatalf("on disk: %v", err)
	}
}

// TestQuarantineChecksIdentity: Quarantine leaves a file that is not the
// one found malformed.
func TestQuarantineChecksIdentity(t *testing.T) {
	s := newSpool(t, 0)
	writeFile(t, s.TransportDir(), "77", []byte("garbage\n"))
	_, err := s.Read("77")
	var me *MalformedError
	if !errors.As(err, &me) {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(s.TransportDir(), "77"))
	routerWrite(t, s, "77", "good mail")
	if err := s.Quarantine("77", me.Control, err); !errors.Is(err, ErrChanged) {
		t.Fatalf("Quarantine of a replaced file: %v, want ErrChanged", err)
	}
	if _, err := s.Read("77"); err != nil {
		t.Fatalf("the good message: %v", err)
	}
	if ents, _ := os.ReadDir(s.BadDir()); len(ents) != 0 {
		t.Errorf("bad/ holds %d files", len(ents))
	}
}

// TestFileIDFallback: without file handles (simulated), identities come
// from statx's birth time or the ctime, and Remove still checks them.
func TestFileIDFallback(t *testing.T) {
	s := newSpool(t, 0)
	c := s.cache()
	for tree := range numTrees {
		c.fds.noHandles[tree].Store(true)
	}
	rel, err := s.Enqueue(testMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	if f.Control.Src != IDBirth && f.Control.Src != IDChange {
		t.Fatalf("source %v without handles", f.Control.Src)
	}
	routerWrite(t, s, rel, "replacement")
	if err := s.Remove(f.Files(rel)); !errors.Is(err, ErrChanged) {
		t.Fatalf("Remove of a replaced file without handles: %v", err)
	}
	nf, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(nf.Files(rel)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.ctlPath(rel)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("control file: %v", err)
	}
}

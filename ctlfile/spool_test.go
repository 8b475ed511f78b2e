package ctlfile

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/internal/need"
)

const toolsDir = "/work/shared/tools"

func newSpool(t *testing.T, hash int) *Spool {
	t.Helper()
	s := &Spool{Root: t.TempDir(), Hash: hash}
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	return s
}

// mkmsg runs zmailer-mkmsg.py into s and returns the control file's name.
func mkmsg(t *testing.T, s *Spool, args ...string) string {
	t.Helper()
	need.Program(t, "python3")
	cmd := exec.Command("python3", append([]string{"-I", "-S", filepath.Join(toolsDir, "zmailer-mkmsg.py"), "--po", s.Root}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mkmsg %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// dumpctl runs zmailer-dumpctl.py and returns its line offsets and lines.
func dumpctl(t *testing.T, path string) map[int64]string {
	t.Helper()
	out, err := exec.Command("python3", "-I", "-S", filepath.Join(toolsDir, "zmailer-dumpctl.py"), path).Output()
	if err != nil {
		t.Fatalf("dumpctl: %v", err)
	}
	lines := map[int64]string{}
	re := regexp.MustCompile(`^\s*(\d+)\| (.*)$`)
	for _, l := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			off, _ := strconv.ParseInt(m[1], 10, 64)
			lines[off] = m[2]
		}
	}
	return lines
}

func TestReadMkmsg(t *testing.T) {
	t.Parallel() // python3 starts slowly on a loaded machine
	s := newSpool(t, 0)
	rcpts := []string{"a@dest.test", "local|localhost|root", "smtp:other.test:b@other.test", "c@dest.test", "smtp|DEST.TEST|d@dest.test"}
	name := mkmsg(t, s, append([]string{"--notify", "SUCCESS,FAILURE"}, rcpts...)...)
	f, err := s.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	lines := dumpctl(t, filepath.Join(s.TransportDir(), name))
	var mOff int64 = -1
	for off, l := range lines {
		if l == "m" {
			mOff = off
		}
	}
	want := []struct{ ch, host, user string }{
		{"smtp", "dest.test", "a@dest.test"},
		{"local", "localhost", "root"},
		{"smtp", "other.test", "b@other.test"},
		{"smtp", "dest.test", "c@dest.test"},
		{"smtp", "dest.test", "d@dest.test"},
	}
	if len(f.Rcpts) != len(want) {
		t.Fatalf("%d rcpts", len(f.Rcpts))
	}
	for i, r := range f.Rcpts {
		if l := lines[r.Offset]; !strings.HasPrefix(l, "r ") || !strings.Contains(l, " "+want[i].user+" 0") {
			t.Errorf("rcpt %d: dumpctl has %q at offset %d", i, l, r.Offset)
		}
		if l := lines[r.NOffset]; l != "N NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;"+want[i].user {
			t.Errorf("rcpt %d: dumpctl has %q at N offset %d", i, l, r.NOffset)
		}
		if r.HeaderOffset != mOff+2 {
			t.Errorf("rcpt %d: header offset %d, m line at %d", i, r.HeaderOffset, mOff)
		}
		if r.Channel != want[i].ch || r.Host != want[i].host || r.User != want[i].user {
			t.Errorf("rcpt %d: %s %s %s, want %v", i, r.Channel, r.Host, r.User, want[i])
		}
		if r.Notify != NotifySuccess|NotifyFailure || r.ORCPT != "rfc822;"+want[i].user || r.Sender != 0 {
			t.Errorf("rcpt %d: notify %v orcpt %q sender %d", i, r.Notify, r.ORCPT, r.Sender)
		}
	}
	wantGroups := []Group{
		{"smtp", "dest.test", []int{0, 3, 4}},
		{"local", "localhost", []int{1}},
		{"smtp", "other.test", []int{2}},
	}
	if gs := f.Groups(); !reflect.DeepEqual(gs, wantGroups) {
		t.Errorf("Groups() = %v, want %v", gs, wantGroups)
	}
	body, err := os.ReadFile(filepath.Join(s.QueueDir(), f.ID))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(body[f.BodyOffset:]), "This is a test body line 1.") {
		t.Errorf("body at offset %d: %q", f.BodyOffset, body[f.BodyOffset:])
	}
	st, _ := os.Stat(filepath.Join(s.QueueDir(), f.ID))
	if !f.Arrival.Equal(st.ModTime()) || uint64(f.Inum) != st.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("arrival %v inum %d; body mtime %v", f.Arrival, f.Inum, st.ModTime())
	}
}

func TestReadMkmsgBounceAndBadFormat(t *testing.T) {
	t.Parallel()
	s := newSpool(t, 0)
	name := mkmsg(t, s, "--sender-chan", "error", "x@dest.test")
	f, err := s.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	if !f.IsBounce() {
		t.Error("a message from the error channel is not a bounce")
	}
	name = mkmsg(t, s, "--format", "0x00000017", "x@dest.test")
	if _, err := s.Read(name); !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), name) {
		t.Errorf("Read(0x17) = %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	s := newSpool(t, 0)
	if _, err := s.Read("123"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read(missing) = %v", err)
	}
	for _, rel := range []string{"../x", "/etc/passwd", "A/../../1", "a/1", "AB/1", "A/B/C/1", "x1", ".1", "", "A/"} {
		if _, err := s.Read(rel); !errors.Is(err, ErrBadPath) {
			t.Errorf("Read(%q) = %v, want ErrBadPath", rel, err)
		}
	}
	writeFile(t, s.TransportDir(), "10002561", observedFiles[0].beforeBytes())
	if _, err := s.Read("10002561"); !errors.Is(err, ErrBodyMissing) {
		t.Errorf("Read(no body) = %v", err)
	}
	writeFile(t, s.TransportDir(), "10002562", []byte("@ 0x00000007\ni 10002562\nl <x>\nr  bad\n"))
	_, err := s.Read("10002562")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Line != 4 || !strings.Contains(err.Error(), "10002562") {
		t.Errorf("Read(bad r line) = %v", err)
	}
	writeFile(t, s.TransportDir(), "77-etrn", []byte("T example.com 192.0.2.7\n"))
	f, err := s.Read("77-etrn")
	if err != nil || f.Inum != 77 || len(f.ETRNs) != 1 || f.ETRNs[0].Domain != "example.com" {
		t.Errorf("Read(T file) = %+v, %v", f, err)
	}
}

// deadPID returns the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestReadResetsStaleLocks(t *testing.T) {
	s := newSpool(t, 2)
	o := observedFiles[1]
	inum, _ := strconv.ParseInt(o.name, 10, 64)
	rel := HashPath(o.name, inum, 2)
	orig := o.beforeBytes()
	p := writeFile(t, s.TransportDir(), rel, orig)
	writeFile(t, s.QueueDir(), filepath.Join(filepath.Dir(rel), o.name), []byte("body"))

	// A dead agent's locks on rcpts 0 and 2; rcpt 1 delivered.
	h, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	dead := deadPID(t)
	for _, i := range []int{0, 2} {
		if ok, err := h.Lock(i, dead); !ok || err != nil {
			t.Fatalf("Lock = %v, %v", ok, err)
		}
	}
	if err := h.Mark(1, Done); err != nil {
		t.Fatal(err)
	}
	h.Close()
	wantAfter := append([]byte(nil), orig...)
	wantAfter[o.rOffs[1]+1] = '+'

	f, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); !bytes.Equal(got, wantAfter) {
		t.Errorf("after reset the file differs at %v", diffOffsets(got, wantAfter))
	}
	for i, want := range []Status{Pending, Done, Pending} {
		if f.Rcpts[i].Status != want || f.Rcpts[i].PID != 0 {
			t.Errorf("rcpt %d: %v pid %d, want %v", i, f.Rcpts[i].Status, f.Rcpts[i].PID, want)
		}
	}
	if gs := f.Groups(); len(gs) != 1 || !reflect.DeepEqual(gs[0].Rcpts, []int{0, 2}) {
		t.Errorf("groups %v", gs)
	}

	// A live lock (ours) makes the whole file wait, and nothing is written.
	h, err = Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Lock(2, os.Getpid()); !ok || err != nil {
		t.Fatalf("Lock = %v, %v", ok, err)
	}
	if ok, err := h.Lock(0, dead); !ok || err != nil {
		t.Fatalf("Lock = %v, %v", ok, err)
	}
	h.Close()
	before := readFile(t, p)
	if _, err := s.Read(rel); !errors.Is(err, ErrLiveLock) || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
		t.Errorf("Read with a live lock = %v", err)
	}
	if got := readFile(t, p); !bytes.Equal(got, before) {
		t.Errorf("Read changed a file it refused: %v", diffOffsets(got, before))
	}
}

func TestQuarantine(t *testing.T) {
	s := newSpool(t, 1)
	a := writeFile(t, s.TransportDir(), "A/26", []byte("garbage one\n"))
	b := writeFile(t, s.TransportDir(), "B/26", []byte("garbage two\n"))
	body := writeFile(t, s.QueueDir(), "A/26", []byte("body"))
	for _, rel := range []string{"A/26", "B/26"} {
		_, perr := s.Read(rel)
		if perr == nil {
			t.Fatal("garbage parsed")
		}
		var me *MalformedError
		if !errors.As(perr, &me) || !me.Control.Known() {
			t.Fatalf("Read of garbage: %v, want a MalformedError with the file's identity", perr)
		}
		if err := s.Quarantine(rel, me.Control, perr); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still in transport/", p)
		}
	}
	if _, err := os.Stat(body); !os.IsNotExist(err) {
		t.Errorf("body left in queue/: %v", err)
	}
	if got := string(readFile(t, filepath.Join(s.BadDir(), "26.body"))); got != "body" {
		t.Errorf("bad/26.body = %q, want the body", got)
	}
	for name, want := range map[string]string{"26": "garbage one\n", "26.1": "garbage two\n"} {
		if got := string(readFile(t, filepath.Join(s.BadDir(), name))); got != want {
			t.Errorf("bad/%s = %q, want %q", name, got, want)
		}
		why := string(readFile(t, filepath.Join(s.BadDir(), name+".why")))
		if !strings.Contains(why, "reason: ctlfile: line 1: bad tag") && !strings.Contains(why, "reason: ctlfile:") {
			t.Errorf("bad/%s.why = %q", name, why)
		}
		if !strings.Contains(why, "time: "+time.Now().UTC().Format("2006-01-02")) {
			t.Errorf("bad/%s.why has no time: %q", name, why)
		}
	}
	if why := string(readFile(t, filepath.Join(s.BadDir(), "26.1.why"))); !strings.Contains(why, "file: transport/B/26\nmoved to: bad/26.1\nbody: none at queue/B/26\n") {
		t.Errorf("why does not say where the files are: %q", why)
	}
	if why := string(readFile(t, filepath.Join(s.BadDir(), "26.why"))); !strings.Contains(why, "file: transport/A/26\nmoved to: bad/26\nbody: queue/A/26 moved to bad/26.body\n") {
		t.Errorf("why does not say where the files are: %q", why)
	}
	if err := s.Quarantine("A/26", FileID{}, errors.New("again")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Quarantine(gone) = %v", err)
	}
}

func TestScan(t *testing.T) {
	s := newSpool(t, 0)
	files := []string{"1", "22-etrn", "A/3", "Z/4", "A/B/5", "Q/Q/66"}
	skipped := []string{".7.tmp", "x8", "a/9", "AB/10", "A/B/C/11", "A/.12"}
	for _, f := range append(append([]string{}, files...), skipped...) {
		writeFile(t, s.TransportDir(), f, []byte("x"))
	}
	if err := os.Mkdir(filepath.Join(s.TransportDir(), "13"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Not regular files: a symbolic link to one, a FIFO.
	if err := os.Symlink("1", filepath.Join(s.TransportDir(), "14")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(s.TransportDir(), "15"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := s.Scan(func(rel string) { got = append(got, rel) }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	sort.Strings(files)
	if !reflect.DeepEqual(got, files) {
		t.Errorf("Scan found %v, want %v", got, files)
	}
}

// TestScannerResumes takes a pass one name at a time, removing files and a
// whole hash directory behind and ahead of it: every file that stays is
// found exactly once, nothing beyond what Scan accepts, and the pass ends.
func TestScannerResumes(t *testing.T) {
	s := newSpool(t, 0)
	var files []string
	for i := range 3000 { // several ReadDir batches in one directory
		files = append(files, strconv.Itoa(i+1))
	}
	files = append(files, "A/3", "Z/4", "A/B/5", "Q/Q/66", "Q/R/67")
	for _, f := range files {
		writeFile(t, s.TransportDir(), f, []byte("x"))
	}
	writeFile(t, s.TransportDir(), ".tmp", []byte("x"))
	sc := s.NewScanner()
	defer sc.Close()
	seen := map[string]int{}
	var batch []string
	removedQ := false
	for step := 0; ; step++ {
		var done bool
		var err error
		batch, done, err = sc.Next(batch[:0], 1+step%3)
		if err != nil {
			t.Fatal(err)
		}
		for _, rel := range batch {
			seen[rel]++
		}
		if len(seen) > 100 && !removedQ {
			// Q/ vanishes mid-pass, whether or not it was reached.
			removedQ = true
			if err := os.RemoveAll(filepath.Join(s.TransportDir(), "Q")); err != nil {
				t.Fatal(err)
			}
		}
		if done {
			if len(batch) > 3 {
				t.Fatalf("Next returned %d names for at most 3", len(batch))
			}
			break
		}
		if len(batch) == 0 {
			t.Fatal("Next returned no name and not done")
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "Q/") {
			continue // either way is right
		}
		if seen[f] != 1 {
			t.Errorf("%s seen %d times", f, seen[f])
		}
	}
	for rel, n := range seen {
		if n != 1 || (!slices.Contains(files, rel)) {
			t.Errorf("unexpected %s ×%d", rel, n)
		}
	}
	if b, done, err := sc.Next(nil, 10); !done || err != nil || len(b) != 0 {
		t.Errorf("Next after the end = %v, %v, %v", b, done, err)
	}
}

func TestMarkAndAppendDiags(t *testing.T) {
	s := newSpool(t, 0)
	o := observedFiles[3] // two d lines
	orig := o.afterBytes()
	p := writeFile(t, s.TransportDir(), o.name, orig)
	if err := s.MarkDiags(o.name, []int64{o.dOffs[1]}); err != nil {
		t.Fatal(err)
	}
	got := readFile(t, p)
	if d := diffOffsets(orig, got); !reflect.DeepEqual(d, []int{int(o.dOffs[1]) + 1}) || got[o.dOffs[1]+1] != '+' {
		t.Errorf("MarkDiags changed offsets %v", d)
	}
	f, err := Parse(o.name, got)
	if err != nil || f.Diags[0].Status != Pending || f.Diags[1].Status != Done {
		t.Errorf("after MarkDiags: %v %+v", err, f)
	}
	if err := s.MarkDiags(o.name, []int64{o.rOffs[0]}); err == nil {
		t.Error("MarkDiags on an r line succeeded")
	}

	add := []Diag{
		{RcptOffset: 121, HeaderOffset: 315, NOffset: 164, Time: 1800000000, Notary: "ok3@dest.test\x01failed\x015.4.7", Text: "expired after 5d"},
		{RcptOffset: 216, HeaderOffset: 315, NOffset: 260, Time: 1800000000, Text: "expired"},
	}
	if err := s.AppendDiags(o.name, add); err != nil {
		t.Fatal(err)
	}
	got2 := readFile(t, p)
	if !bytes.HasPrefix(got2, got) {
		t.Fatal("AppendDiags changed existing bytes")
	}
	f, err = Parse(o.name, got2)
	if err != nil || len(f.Diags) != 4 {
		t.Fatalf("after AppendDiags: %v, %d diags", err, len(f.Diags))
	}
	for i, d := range f.Diags[2:] {
		add[i].Offset, add[i].Status = d.Offset, Pending
		if d != add[i] {
			t.Errorf("appended diag %d parsed as %+v, want %+v", i, d, add[i])
		}
	}
}

func TestRemove(t *testing.T) {
	s := newSpool(t, 2)
	rel, err := s.Enqueue(testMessage(3))
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(f.Files(rel)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{s.ctlPath(rel), s.bodyPath(rel, f.ID)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived Remove: %v", p, err)
		}
	}
	if err := s.Remove(f.Files(rel)); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if err := s.Remove(Files{Rel: rel, ID: "../../etc/passwd"}); !errors.Is(err, ErrBadPath) {
		t.Errorf("Remove with a path as body name = %v", err)
	}
}

func TestNotifyScheduler(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, ".scheduler.notify")
	if err := NotifyScheduler(sock, "A/B/1"); err == nil {
		t.Error("NotifyScheduler without a listener succeeded")
	}
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := NotifyScheduler(sock, "A/B/1"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := l.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "NEW A/B/1" {
		t.Errorf("datagram %q", got)
	}
}

// TestReadKeepsAtime: the scheduler's read of a control file does not
// update its access time (O_NOATIME, permitted to the file's owner), where
// relatime would write the inode: the access time is not after the
// modification time, as it is in every control file a router has just
// written.
func TestReadKeepsAtime(t *testing.T) {
	s := newSpool(t, 1)
	rel, err := s.Enqueue(testMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	ctl := s.ctlPath(rel)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(ctl, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(rel); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ctl, &st); err != nil {
		t.Fatal(err)
	}
	if atime := time.Unix(st.Atim.Unix()); !atime.Equal(old) {
		t.Errorf("control file's access time %v after the read, want %v (untouched)", atime, old)
	}
}

// TestBodyAfterControlFile: a control file whose body is not there yet is
// a transient error while it is younger than BodyWait (its body may be on
// its way: a writer that renames the control file first), malformed
// (quarantined) only after; once the body is there it reads.
func TestBodyAfterControlFile(t *testing.T) {
	s := newSpool(t, 0)
	writeFile(t, s.TransportDir(), "10002561", observedFiles[0].beforeBytes())
	_, err := s.Read("10002561")
	var me *MalformedError
	if !errors.Is(err, ErrBodyMissing) || errors.As(err, &me) {
		t.Fatalf("Read of a new control file without its body: %v (malformed: %v), want a transient ErrBodyMissing", err, me != nil)
	}
	s.now = func() time.Time { return time.Now().Add(BodyWait + time.Minute) }
	if _, err := s.Read("10002561"); !errors.Is(err, ErrBodyMissing) || !errors.As(err, &me) {
		t.Fatalf("Read of a control file without its body for BodyWait: %v, want a MalformedError", err)
	}
	s.now = nil
	writeFile(t, s.QueueDir(), "10002561", []byte("Subject: late\n\nthe body\n"))
	if f, err := s.Read("10002561"); err != nil || !f.Body.Known() {
		t.Fatalf("Read once the body came: %v", err)
	}
}

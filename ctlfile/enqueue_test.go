package ctlfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
)

func testMessage(n int) *Message {
	m := &Message{
		Sender: "sender@example.org",
		Header: []byte("From: sender@example.org\nTo: several\nSubject: test"),
		Body:   []byte("line 1\n.dot line\nlast\n"),
		RET:    "HDRS",
		ENVID:  "env-1",
	}
	for i := range n {
		a := Address{Channel: "smtp", Host: "dest.test", User: fmt.Sprintf("u%d@dest.test", i)}
		switch i % 3 {
		case 1:
			a.Host = "other.test"
			a.Notify = "SUCCESS,FAILURE"
			a.ORCPT = "rfc822;" + a.User
		case 2:
			a.Channel, a.Host, a.User = "local", "localhost", fmt.Sprintf("user %d", i)
			a.Notify = "NEVER"
		}
		m.Rcpts = append(m.Rcpts, a)
	}
	return m
}

func TestEnqueueRoundTrip(t *testing.T) {
	for levels := 0; levels <= 2; levels++ {
		t.Run(fmt.Sprint("hash", levels), func(t *testing.T) {
			s := newSpool(t, levels)
			m := testMessage(5)
			var rels []string
			for range 3 {
				rel, err := s.Enqueue(m)
				if err != nil {
					t.Fatal(err)
				}
				rels = append(rels, rel)
			}
			for _, rel := range rels {
				f, err := s.Read(rel)
				if err != nil {
					t.Fatal(err)
				}
				bodyPath := filepath.Join(s.QueueDir(), filepath.FromSlash(path.Dir(rel)), f.ID)
				st, err := os.Stat(bodyPath)
				if err != nil {
					t.Fatal(err)
				}
				ino := st.Sys().(*syscall.Stat_t).Ino
				if f.Name != f.ID || f.ID != fmt.Sprint(ino) || f.Inum != int64(ino) {
					t.Errorf("name %q id %q inum %d; body inode %d", f.Name, f.ID, f.Inum, ino)
				}
				if want := HashPath(f.Name, f.Inum, levels); rel != want || strings.Count(rel, "/") != levels {
					t.Errorf("rel %q, want %q", rel, want)
				}
				if !f.Arrival.Equal(st.ModTime()) {
					t.Errorf("arrival %v, body mtime %v", f.Arrival, st.ModTime())
				}
				body, _ := os.ReadFile(bodyPath)
				if want := string(m.Header) + "\n\n" + string(m.Body); string(body) != want {
					t.Errorf("body file %q, want %q", body, want)
				}
				if got := string(body[f.BodyOffset:]); got != string(m.Body) {
					t.Errorf("body at 'o' %d: %q", f.BodyOffset, got)
				}
				ctl, _ := os.ReadFile(filepath.Join(s.TransportDir(), filepath.FromSlash(rel)))
				if !bytes.HasPrefix(ctl, []byte("@ 0x00000007\ni "+f.Name+"\n")) {
					t.Errorf("control file starts %q", ctl[:30])
				}
				if got, want := string(ctl[f.Rcpts[0].HeaderOffset:]), string(m.Header)+"\n\n"; got != want {
					t.Errorf("m block %q, want %q", got, want)
				}
				if !strings.HasPrefix(f.LogIdent, "<"+f.Name+".zsched@") || f.ErrorAddr != m.Sender ||
					f.RET != "HDRS" || f.ENVID != "env-1" || f.IsBounce() {
					t.Errorf("l %q e %q R %q n %q", f.LogIdent, f.ErrorAddr, f.RET, f.ENVID)
				}
				if len(f.Senders) != 1 || f.Senders[0] != (Sender{"smtp", "example.org", "sender@example.org", 0, "sender@example.org"}) {
					t.Errorf("senders %+v", f.Senders)
				}
				if len(f.Rcpts) != len(m.Rcpts) {
					t.Fatalf("%d rcpts", len(f.Rcpts))
				}
				for i, r := range f.Rcpts {
					a := m.Rcpts[i]
					wantNotify := NotifyFailure
					if a.Notify != "" {
						wantNotify, _ = ParseNotify(a.Notify)
					}
					if r.Channel != a.Channel || r.Host != a.Host || r.User != a.User || r.Notify != wantNotify ||
						r.ORCPT != a.ORCPT || r.Status != Pending || (r.NOffset >= 0) != (a.Notify != "" || a.ORCPT != "") {
						t.Errorf("rcpt %d = %+v from %+v", i, r, a)
					}
				}
			}
			var found []string
			if err := s.Scan(func(rel string) { found = append(found, rel) }); err != nil {
				t.Fatal(err)
			}
			sort.Strings(found)
			sort.Strings(rels)
			if !reflect.DeepEqual(found, rels) {
				t.Errorf("Scan found %v, enqueued %v", found, rels)
			}
			for _, rel := range rels {
				if err := s.Remove(Files{Rel: rel, ID: path.Base(rel)}); err != nil {
					t.Fatal(err)
				}
			}
			found = nil
			if err := s.Scan(func(rel string) { found = append(found, rel) }); err != nil || len(found) != 0 {
				t.Errorf("after Remove Scan found %v, %v", found, err)
			}
			assertNoFiles(t, s.QueueDir())
		})
	}
}

// assertNoFiles fails if dir holds any regular file at any depth.
func assertNoFiles(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

// TestEnqueueMatchesMkmsg: Enqueue's @, r and N lines are byte-identical
// to those of zmailer-mkmsg.py, the router's layout.
func TestEnqueueMatchesMkmsg(t *testing.T) {
	t.Parallel()
	s := newSpool(t, 0)
	users := []string{"a@dest.test", "b@other.test", "root"}
	hosts := []string{"dest.test", "other.test", "localhost"}
	chans := []string{"smtp", "smtp", "local"}
	var args []string
	m := &Message{Sender: "sender@example.org", Header: []byte("Subject: x\n")}
	for i := range users {
		args = append(args, chans[i]+"|"+hosts[i]+"|"+users[i])
		m.Rcpts = append(m.Rcpts, Address{Channel: chans[i], Host: hosts[i], User: users[i],
			Notify: "SUCCESS,FAILURE", ORCPT: "rfc822;" + users[i]})
	}
	name := mkmsg(t, s, append([]string{"--notify", "SUCCESS,FAILURE"}, args...)...)
	rel, err := s.Enqueue(m)
	if err != nil {
		t.Fatal(err)
	}
	pick := func(p string) []string {
		var out []string
		for _, l := range strings.SplitAfter(string(readFile(t, p)), "\n") {
			if l != "" && strings.Contains("@rNs", l[:1]) {
				out = append(out, l)
			}
		}
		return out
	}
	theirs := pick(filepath.Join(s.TransportDir(), name))
	ours := pick(filepath.Join(s.TransportDir(), rel))
	if !reflect.DeepEqual(ours, theirs) {
		t.Errorf("Enqueue lines\n%q\nmkmsg lines\n%q", ours, theirs)
	}
}

func TestEnqueueBounce(t *testing.T) {
	s := newSpool(t, 1)
	rel, err := s.Enqueue(&Message{Rcpts: []Address{{Channel: "smtp", Host: "dest.test", User: "sender@dest.test"}},
		Header: []byte("Subject: failure notice\n"), Body: []byte("x\n")})
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	if !f.IsBounce() || f.ErrorAddr != "" {
		t.Errorf("bounce %v, error address %q", f.IsBounce(), f.ErrorAddr)
	}
	if bytes.Contains(readFile(t, s.ctlPath(rel)), []byte("\ne ")) {
		t.Error("a bounce has an e line; the router writes none")
	}
}

func TestEnqueueRejects(t *testing.T) {
	s := newSpool(t, 0)
	ok := Address{Channel: "smtp", Host: "h", User: "u"}
	for name, m := range map[string]*Message{
		"no rcpts":          {},
		"blank line":        {Rcpts: []Address{ok}, Header: []byte("A: b\n\nC: d\n")},
		"leading blank":     {Rcpts: []Address{ok}, Header: []byte("\nA: b\n")},
		"space in host":     {Rcpts: []Address{{Channel: "smtp", Host: "a b", User: "u"}}},
		"newline in user":   {Rcpts: []Address{{Channel: "smtp", Host: "h", User: "u\nr x"}}},
		"empty channel":     {Rcpts: []Address{{Host: "h", User: "u"}}},
		"bad notify":        {Rcpts: []Address{{Channel: "smtp", Host: "h", User: "u", Notify: "SOMETIMES"}}},
		"sender with blank": {Sender: "a b@c", Rcpts: []Address{ok}},
		"host list":         {Rcpts: []Address{{Channel: "smtp", Host: "(a)", User: "u"}}},
	} {
		if _, err := s.Enqueue(m); err == nil {
			t.Errorf("%s: Enqueue accepted it", name)
		}
	}
	if _, err := (&Spool{Root: s.Root, Hash: 3}).Enqueue(&Message{Rcpts: []Address{ok}}); err == nil {
		t.Error("hash level 3 accepted")
	}
	assertNoFiles(t, s.QueueDir())
	assertNoFiles(t, s.TransportDir())
}

// TestEnqueueStepsNeverExposeBodylessControl checks, at every step of
// Enqueue (the disk as a crash right there would leave it), that each
// control file Scan can see has its body and parses.
func TestEnqueueStepsNeverExposeBodylessControl(t *testing.T) {
	for levels := 0; levels <= 2; levels++ {
		s := newSpool(t, levels)
		var steps []string
		s.hook = func(step string) {
			steps = append(steps, step)
			checkQueueConsistent(t, s, step)
		}
		for range 3 {
			if _, err := s.Enqueue(testMessage(2)); err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"body-written", "body-renamed", "ctl-written", "ctl-renamed", "done"}
		if !reflect.DeepEqual(steps[:5], want) {
			t.Errorf("steps %v", steps)
		}
	}
}

// checkQueueConsistent fails if a visible control file lacks its body or
// does not parse, and returns how many control files there are.
func checkQueueConsistent(t *testing.T, s *Spool, when string) int {
	t.Helper()
	n := 0
	err := s.Scan(func(rel string) {
		n++
		if _, err := s.Read(rel); err != nil {
			t.Errorf("%s: visible control file %s: %v", when, rel, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEnqueueSurvivesSIGKILL kills a process that enqueues in a loop at
// several points and checks the spool it leaves.
func TestEnqueueSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	for _, killAfter := range []int{1, 7, 25} {
		s := newSpool(t, 2)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperEnqueueLoop$")
		cmd.Env = append(os.Environ(), "CTLFILE_ENQUEUE_ROOT="+s.Root)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		r := bufio.NewReader(out)
		for i := 0; i < killAfter; i++ {
			if _, err := r.ReadString('\n'); err != nil {
				t.Fatalf("child ended early: %v", err)
			}
		}
		// The child is now somewhere inside its next Enqueue.
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		if n := checkQueueConsistent(t, s, fmt.Sprintf("killed after %d", killAfter)); n < killAfter {
			t.Errorf("%d control files, the child reported %d", n, killAfter)
		}
	}
}

// TestHelperEnqueueLoop is the child of TestEnqueueSurvivesSIGKILL.
func TestHelperEnqueueLoop(t *testing.T) {
	root := os.Getenv("CTLFILE_ENQUEUE_ROOT")
	if root == "" {
		t.Skip("helper process for TestEnqueueSurvivesSIGKILL")
	}
	s := &Spool{Root: root, Hash: 2}
	for {
		rel, err := s.Enqueue(testMessage(2))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(rel)
	}
}

// TestQuarantineEnqueuedTakesBody: the body goes into bad/ with its
// control file (issue 16, item 2: it stayed in queue/).
func TestQuarantineEnqueuedTakesBody(t *testing.T) {
	s := newSpool(t, 2)
	rel, err := s.Enqueue(testMessage(1))
	if err != nil {
		t.Fatal(err)
	}
	body := readFile(t, s.bodyPath(rel, path.Base(rel)))
	if err := s.Quarantine(rel, FileID{}, errors.New("operator said so")); err != nil {
		t.Fatal(err)
	}
	name := path.Base(rel)
	if _, err := os.Stat(s.bodyPath(rel, name)); !os.IsNotExist(err) {
		t.Errorf("body still in queue/: %v", err)
	}
	if got := readFile(t, filepath.Join(s.BadDir(), name+".body")); !bytes.Equal(got, body) {
		t.Errorf("bad/%s.body = %q, want the body %q", name, got, body)
	}
	if _, err := os.Stat(filepath.Join(s.BadDir(), name)); err != nil {
		t.Errorf("no bad/%s: %v", name, err)
	}
	if why := string(readFile(t, filepath.Join(s.BadDir(), name+".why"))); !strings.Contains(why, "reason: operator said so") {
		t.Errorf("why = %q", why)
	}
}

package ta

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"zsched/report"
)

// TestHashDirectoryReplaced: a hash directory removed and made again
// while Serve runs (its descriptor kept from an earlier job now names an
// empty, deleted directory) does not hide the files put in the new one:
// the control file is opened and the message file found, for an agent
// that opens the body and for one that stats it.
func TestHashDirectoryReplaced(t *testing.T) {
	for _, noBody := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoBody=%v", noBody), func(t *testing.T) {
			dir := spool(t)
			queue := filepath.Join(dir, "..", "queue")
			mk := func(name string) built {
				t.Helper()
				f := msg{name: name, rcpts: []rcptLine{pending("smtp a.test u@a.test 0")}}.build()
				for _, d := range []string{filepath.Join(dir, "H", "J"), filepath.Join(queue, "H", "J")} {
					if err := os.MkdirAll(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(dir, "H", "J", name), f.data, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(queue, "H", "J", name), []byte(testBody), 0o644); err != nil {
					t.Fatal(err)
				}
				return f
			}
			f7 := mk("7")
			c := serve(t, &Agent{Channel: "smtp", Dir: dir, NoBody: noBody}, func(d *Delivery) []Result {
				return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3, Text: "ok"}}
			})
			c.expect("#hungry")
			if out := c.job("H/J/7\ta.test"); len(out) != 1 || out[0] != fmt.Sprintf("7/%d\t\tok3 ok", f7.offs[0]) {
				t.Fatalf("job 7: %q, want one ok3", out)
			}
			// The scheduler removes the delivered message; the hash
			// directories go too and are made again for message 8.
			for _, d := range []string{filepath.Join(dir, "H"), filepath.Join(queue, "H")} {
				if err := os.RemoveAll(d); err != nil {
					t.Fatal(err)
				}
			}
			f8 := mk("8")
			if out := c.job("H/J/8\ta.test"); len(out) != 1 || out[0] != fmt.Sprintf("8/%d\t\tok3 ok", f8.offs[0]) {
				t.Fatalf("job 8 in the hash directory made again: %q, want one ok3", out)
			}
			c.end()
		})
	}
}

// TestHashDirsBounded: a hashDirs keeps at most max directories open (the
// rest are walked by the whole path), and dirLimit leaves most of the
// process's descriptors to the jobs.
func TestHashDirsBounded(t *testing.T) {
	dir := t.TempDir()
	for _, h := range []string{"A", "B", "C"} {
		if err := os.Mkdir(filepath.Join(dir, h), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := hashDirs{max: 2}
	defer c.close()
	for i, h := range []string{"A", "B", "C"} {
		hd, ok := c.open(unix.AT_FDCWD, dir, filepath.Join(dir, h))
		if want := i < 2; ok != want {
			t.Errorf("open %s: %v, want %v", h, ok, want)
		}
		if ok && hd.fd < 0 {
			t.Errorf("open %s: descriptor %d", h, hd.fd)
		}
	}
	if len(c.fds) != 2 {
		t.Errorf("%d directories open, want 2", len(c.fds))
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if n := dirLimit(); n > maxHashDirs || uint64(2*n) > rl.Cur/4 {
		t.Errorf("dirLimit %d with a limit of %d descriptors: over %d, or two of them over a quarter", n, rl.Cur, maxHashDirs)
	}
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"zsched/internal/tinyfs"
)

// fill writes a file on dir's filesystem until it is full, and returns a
// function that frees the space again.
func fill(t *testing.T, dir string) func() {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	f.Close()
	return func() { os.Remove(path) }
}

// TestEnqueueOnFullDisk: with the spool's filesystem full, enqueue fails
// with a clear error and leaves nothing visible or half-written behind; once
// there is space the same enqueue works and the message is delivered, with
// the message queued before the disk filled.
func TestEnqueueOnFullDisk(t *testing.T) {
	fs := tinyfs.Mount(t, 512<<10)
	p := newPostoffice(t, "")
	// The postoffice lives on the tiny filesystem.
	b, _ := os.ReadFile(p.config)
	po := filepath.Join(fs, "po")
	cfg := strings.Replace(string(b), fmt.Sprintf("%q", filepath.Join(p.dir, "po")), fmt.Sprintf("%q", po), 1)
	cfg += fmt.Sprintf("[[clause]]\nselect = \"smtp/*\"\ncommand = [%q, \"-c\", \"smtp\"]\n", p.agent("sink"))
	if err := os.WriteFile(p.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	mkPostoffice(t, po)
	if out, err := p.scheduler("enqueue", "-from", "s@example.org", "before@good.test").CombinedOutput(); err != nil {
		t.Fatalf("enqueue: %v\n%s", err, out)
	}
	before := listSpool(po)

	free := fill(t, fs)
	body := filepath.Join(p.dir, "body")
	if err := os.WriteFile(body, bytes.Repeat([]byte("a line of a body that will not fit\n"), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := p.scheduler("enqueue", "-from", "s@example.org", "-body", body, "full@good.test").CombinedOutput()
	if err == nil {
		t.Fatalf("enqueue on a full disk succeeded: %s", out)
	}
	if !strings.Contains(string(out), "no space left on device") {
		t.Fatalf("enqueue on a full disk: the error does not say why: %s", out)
	}
	t.Logf("enqueue on a full disk: %s", bytes.TrimSpace(out))
	if after := listSpool(po); !slicesEqual(after, before) {
		t.Fatalf("a failed enqueue changed the spool:\nbefore %v\nafter  %v", before, after)
	}

	free()
	if out, err := p.scheduler("enqueue", "-from", "s@example.org", "-body", body, "full@good.test").CombinedOutput(); err != nil {
		t.Fatalf("enqueue after freeing space: %v\n%s", err, out)
	}
	outs, _ := p.drain()
	p.t.Helper()
	got := map[string]string{}
	for _, o := range outs {
		got[o.to] = o.status
	}
	for _, r := range []string{"before@good.test", "full@good.test"} {
		if !strings.HasPrefix(got[r], "ok") {
			t.Fatalf("%s: outcome %q, want ok", r, got[r])
		}
	}
	if n := countFiles(filepath.Join(po, "transport")) + countFiles(filepath.Join(po, "queue")); n > 0 {
		t.Fatalf("%d files left in the spool after the drain", n)
	}
}

// listSpool names every file under transport/ and queue/, temporary ones
// included.
func listSpool(po string) []string {
	var names []string
	for _, sub := range []string{"transport", "queue"} {
		filepath.WalkDir(filepath.Join(po, sub), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Type()&os.ModeSocket == 0 {
				rel, _ := filepath.Rel(po, path)
				names = append(names, rel)
			}
			return nil
		})
	}
	return names
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

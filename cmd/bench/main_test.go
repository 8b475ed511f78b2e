package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Without the scheduler program it is to time, bench says how to get one
// and writes no queue: it builds nothing itself.
func TestBenchNeedsItsScheduler(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out, errOut bytes.Buffer
	err := bench([]string{"-scheduler", filepath.Join(tmp, "no-scheduler"), "-agent", "/bin/true", "-messages", "2"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("bench without a scheduler: %v", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("bench wrote %v before it found no scheduler", ents)
	}
}

// -generate writes the queue and its configuration, and needs no
// scheduler.
func TestBenchGenerates(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out, errOut bytes.Buffer
	err := bench([]string{"-generate", "-scheduler", filepath.Join(tmp, "no-scheduler"), "-agent", "/bin/true",
		"-messages", "3", "-rcpts", "2", "-domains", "2"}, &out, &errOut)
	if err != nil {
		t.Fatalf("bench -generate: %v\n%s", err, errOut.String())
	}
	m := regexp.MustCompile(`-config (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no config named in:\n%s", out.String())
	}
	cfg, err := os.ReadFile(m[1])
	if err != nil || !strings.Contains(string(cfg), `"/bin/true"`) {
		t.Fatalf("config %s: %v\n%s", m[1], err, cfg)
	}
	n := 0
	filepath.WalkDir(filepath.Join(filepath.Dir(m[1]), "postoffice", "transport"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n != 3 {
		t.Errorf("%d control files queued, want 3", n)
	}
}

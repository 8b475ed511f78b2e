package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/core"
	"zsched/thread"
)

// TestStateSaveOnFullDisk: saving learned destination state on a full
// filesystem fails with the reason, leaves the previous file whole and no
// temporary file behind, and the same state is saved once there is space
// (the failed save is not taken as done).
func TestStateSaveOnFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tiny tmpfs for ENOSPC")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	t0 := time.Unix(1_700_000_000, 0)
	dest := func(n int) []core.Destination {
		var ds []core.Destination
		for i := 0; i < n; i++ {
			ds = append(ds, core.Destination{Channel: "smtp", Host: fmt.Sprintf("h%d.example", i),
				Window: thread.WindowState{Concurrency: 5}, Updated: t0})
		}
		return ds
	}
	state := filepath.Join(dir, "state")
	sf := newStateFile(state)
	if err := sf.save(dest(1)); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(sf.path)
	if err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	big := dest(2000) // far more than the few bytes left
	err = sf.save(big)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("save on a full disk: %v, want ENOSPC", err)
	}
	t.Logf("save on a full disk: %v", err)
	if now, _ := os.ReadFile(sf.path); !bytes.Equal(now, old) {
		t.Fatal("the state file changed after a failed save")
	}
	ents, _ := os.ReadDir(state)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".destinations-") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}

	os.Remove(filler)
	if err := sf.save(big); err != nil {
		t.Fatalf("save after freeing space: %v", err)
	}
	got, err := parseDestinations(mustRead(t, sf.path))
	if err != nil || len(got) != len(big) {
		t.Fatalf("state after the retry: %d destinations (%v), want %d", len(got), err, len(big))
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

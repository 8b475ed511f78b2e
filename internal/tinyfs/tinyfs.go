// Package tinyfs gives tests a real filesystem that runs out of space: a
// tmpfs of a few pages, mounted for one test. Disk faults (ENOSPC on an
// append, a DSN, a state file) are tested on it rather than with injected
// errors alone, because a full filesystem also does what no injected error
// does (a short write that stops at a page boundary).
package tinyfs

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"

	"zsched/internal/need"
)

// Mount mounts a tmpfs of size bytes at a new directory and returns it,
// unmounting it when the test ends. When it may not mount one (not root,
// or no mount permission in this container) it skips the test, or fails
// it under ZSCHED_CI=1 (package need).
func Mount(t testing.TB, size int) string {
	t.Helper()
	need.Root(t) // to mount a tiny tmpfs for ENOSPC
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "tmpfs", dir).CombinedOutput(); err != nil {
		need.Met(t, "a tmpfs mount", fmt.Errorf("%w: %s", err, bytes.TrimSpace(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

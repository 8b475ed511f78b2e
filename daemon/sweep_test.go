package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRunSweepsEnqueueDebris: a scheduler started on a queue where an
// enqueue was killed midway removes the old temporary files, and leaves a
// fresh one (an enqueue that may still be running) and the queue alone.
func TestRunSweepsEnqueueDebris(t *testing.T) {
	d := intakeDaemon(t, "", 10, 10, 0, 1, true)
	root := d.cfg.Scheduler.Postoffice
	old := time.Now().Add(-2 * debrisAge)
	for _, p := range []string{"queue/.new-1", "transport/.2.tmp", "queue/.new-3"} {
		full := filepath.Join(root, p)
		if err := os.WriteFile(full, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
		if p != "queue/.new-3" {
			if err := os.Chtimes(full, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"queue/.new-1": false, "transport/.2.tmp": false, "queue/.new-3": true} {
		_, err := os.Stat(filepath.Join(root, p))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", p, got, want)
		}
	}
}

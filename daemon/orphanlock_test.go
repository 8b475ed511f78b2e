package daemon

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zsched/ctlfile"
)

// TestEarlierAgentsLockWaits: a line locked, before this scheduler
// started, by a live process that started before the lock — an agent of
// an earlier scheduler, left running by a SIGKILL and perhaps still
// delivering — is not reset at once (its recipient would be delivered
// twice): it waits as any live lock, for the clause's jobtimeout.
func TestEarlierAgentsLockWaits(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "600") // the earlier scheduler's agent
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orphan.Process.Kill(); orphan.Wait() })
	h, err := ctlfile.Open(filepath.Join(d.spool.TransportDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Lock(0, orphan.Process.Pid); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h.Close()
	now := time.Now().Add(time.Second)
	d.operator.started = now // this scheduler started after the lock
	d.now = func() time.Time { return now }
	d.startScan(now)
	step(d)
	step(d) // a lock judged stale is read again, breaking it
	if d.core.Messages() != 0 {
		t.Fatal("the lock of a live process that may have written it was reset at once")
	}
	why, err := d.why(now, path.Base(rel))
	if err != nil || len(why) != 1 || !strings.Contains(why[0], "not ours") {
		t.Fatalf("WHY %s: %q, %v", rel, why, err)
	}
}

// TestProcStart: a process's start time, from /proc, is between the test
// binary's start (to the second) and now.
func TestProcStart(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before := time.Now()
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	got := procStart(cmd.Process.Pid)
	if got.Before(before.Add(-2*time.Second)) || got.After(time.Now().Add(time.Second)) {
		t.Fatalf("start of a process started at %v: %v", before, got)
	}
	if !procStart(-1).IsZero() {
		t.Error("a start for no process")
	}
}

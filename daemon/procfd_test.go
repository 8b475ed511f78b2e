package daemon

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/admission"
	"zsched/ctlfile"
)

// sleepHolding starts a process that sleeps, with name open (a
// descriptor of its own) when holding; the test's cleanup kills it by its
// pid.
func sleepHolding(t *testing.T, name string, holding bool) *exec.Cmd {
	t.Helper()
	p := exec.Command("sleep", "600")
	if holding {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close() // the child's copy stays open
		p.ExtraFiles = []*os.File{f}
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Process.Kill(); p.Wait() })
	return p
}

// heldLock locks d's one recipient by a live process (sleep), started
// with the control file open (an agent delivering it) or not; the test's
// cleanup kills it by its pid. It returns the control file's name and the
// process.
func heldLock(t *testing.T, d *Daemon, holding bool) (string, *exec.Cmd) {
	t.Helper()
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(d.spool.TransportDir(), rel)
	p := sleepHolding(t, name, holding)
	h, err := ctlfile.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Lock(0, p.Process.Pid); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h.Close()
	return rel, p
}

// readAfterClockStep has d, started after the lock, read the queue once,
// with every process's start from /proc an hour after the lock: the wall
// clock stepped forward since (/proc's start follows it, the file's ctime
// was stamped before), so every holder looks started after its lock.
func readAfterClockStep(d *Daemon) time.Time {
	now := time.Now().Add(time.Second)
	d.operator.started = now
	d.now = func() time.Time { return now }
	d.procStarted = func(int) time.Time { return now.Add(time.Hour) }
	d.startScan(now)
	step(d)
	step(d) // a lock judged stale is read again, breaking it
	return now
}

// TestHoldingAgentsLockWaitsAfterClockStep: an earlier scheduler's agent,
// still delivering (it has the control file open), whose start from /proc
// looks later than its lock after a clock step forward, may have written
// the lock: it is not reset at once (its recipient would be delivered
// twice) but waits as any live lock.
func TestHoldingAgentsLockWaitsAfterClockStep(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	rel, p := heldLock(t, d, true)
	now := readAfterClockStep(d)
	if d.core.Messages() != 0 {
		t.Fatal("the lock of a live process that has the control file open was reset at once")
	}
	why, err := d.why(now, path.Base(rel))
	if err != nil || len(why) != 1 || !strings.Contains(why[0], "not ours") {
		t.Fatalf("WHY %s: %q, %v", rel, why, err)
	}
	if !strings.Contains(why[0], "pid "+strconv.Itoa(p.Process.Pid)) {
		t.Errorf("WHY %s: %q, want it waiting on pid %d", rel, why, p.Process.Pid)
	}
}

// TestReusedPIDNotHoldingResetAtOnce: a live process that has not the
// control file open and started after the lock cannot have written it (a
// PID reused): the lock is reset at once and the recipient scheduled.
func TestReusedPIDNotHoldingResetAtOnce(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	heldLock(t, d, false)
	readAfterClockStep(d)
	if d.core.Messages() != 1 {
		t.Fatalf("%d messages in core, want the lock of a reused PID reset at once", d.core.Messages())
	}
}

// TestUnreadableHolderWaits: a holder whose descriptors cannot be read
// (another user's process) may have the file open: its lock waits, even
// if it looks started after the lock.
func TestUnreadableHolderWaits(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	heldLock(t, d, false)
	d.procHasOpen = func(int, ctlfile.FileID) admission.FileOpen { return admission.MayHaveOpen }
	readAfterClockStep(d)
	if d.core.Messages() != 0 {
		t.Fatal("the lock of a live process whose descriptors could not be read was reset at once")
	}
}

// TestHasFileOpen: hasFileOpen tells, from /proc, a process that has a file
// open from one that has not; for no process, or no file, it cannot tell.
func TestHasFileOpen(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(name, &st); err != nil {
		t.Fatal(err)
	}
	id := ctlfile.FileID{Dev: uint64(st.Dev), Ino: st.Ino}
	holder, other := sleepHolding(t, name, true).Process.Pid, sleepHolding(t, name, false).Process.Pid
	for _, c := range []struct {
		name string
		pid  int
		id   ctlfile.FileID
		want admission.FileOpen
	}{
		{"holding", holder, id, admission.HasOpen},
		{"not holding", other, id, admission.NotOpen},
		{"no process", -1, id, admission.MayHaveOpen},
		{"no file", holder, ctlfile.FileID{}, admission.MayHaveOpen},
	} {
		if got := hasFileOpen(c.pid, c.id); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

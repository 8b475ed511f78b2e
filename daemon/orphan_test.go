package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"zsched/ctlfile"
)

// orphan is a process of the earlier scheduler's agent, as a test starts
// it: not a child of the test (its starter has exited), in dir, leading
// its own process group or not, with a child it forked (a delivery in
// flight); it waits to be woken through a FIFO, and then would deliver.
type orphan struct {
	leader, child     int
	leaderFD, childFD int // pidfds, opened while the processes were alive
	wake              string
}

// How a test's agent is started.
type orphanKind int

const (
	orphanLeader orphanKind = iota // orphaned, leading its process group
	orphanMember                   // orphaned, in the test's process group
	ourChild                       // the test's child, leading its group
)

// startOrphan starts an orphan; the test's cleanup kills it by its pids.
func startOrphan(t *testing.T, dir string, kind orphanKind) *orphan {
	t.Helper()
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Fatal("no setsid (util-linux), which starts the orphaned agents:", err)
	}
	o := &orphan{wake: filepath.Join(t.TempDir(), "wake")}
	if err := unix.Mkfifo(o.wake, 0o600); err != nil {
		t.Fatal(err)
	}
	// The agent: a forked child, then blocked on the FIFO as on a server
	// that never answers. The FIFO is open (read-write: the open does not
	// wait for a writer) before the agent says its pids, so canWake is
	// true from then on until it exits; opened by the read, it was not
	// yet on a loaded machine.
	agent := `sleep 600 & exec 3<>"$WAKE"; echo $$ $!; exec >/dev/null; read x <&3; echo delivered`
	start := `sh -c "$AGENT" &`
	if kind != orphanMember {
		start = setsid + ` sh -c "$AGENT" &` // setsid: a group leader, as with Setpgid
	}
	cmd := exec.Command("sh", "-c", start)
	if kind == ourChild {
		cmd = exec.Command("sh", "-c", agent)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Dir = dir
	cmd.Env = []string{"AGENT=" + agent, "WAKE=" + o.wake, "PATH=" + os.Getenv("PATH")}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(line, &o.leader, &o.child); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if kind == ourChild {
		t.Cleanup(func() { cmd.Wait() }) // after the kill below
	} else if err := cmd.Wait(); err != nil { // the starter: gone, the agent orphaned
		t.Fatal(err)
	}
	if o.leaderFD, err = unix.PidfdOpen(o.leader, 0); err != nil {
		t.Fatal(err)
	}
	if o.childFD, err = unix.PidfdOpen(o.child, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, fd := range []int{o.childFD, o.leaderFD} {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			waitPidfd(fd, time.Now().Add(time.Hour)) // a failure deadline: SIGKILL ends it
			unix.Close(fd)
		}
	})
	return o
}

// exited reports whether the process of pidfd fd has exited, now.
func exited(fd int) bool {
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	return err == nil && n > 0
}

// canWake reports whether the orphan still waits to be woken (and so to
// deliver): whether its FIFO has a reader.
func (o *orphan) canWake(t *testing.T) bool {
	fd, err := unix.Open(o.wake, unix.O_WRONLY|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENXIO) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	return true
}

// lockBy locks d's one recipient by pid, written after pid started (to the
// clock tick: a status-change time written in pid's first tick is made
// later by changing the file's mode again), and returns when. Later by a
// margin than killOrphan asks: a start from /proc is computed from two
// clocks read one after the other, and differs by a little from one
// computation to the next.
func lockBy(t *testing.T, d *Daemon, pid int) time.Time {
	const startMargin = 5 * time.Millisecond
	t.Helper()
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(d.spool.TransportDir(), rel)
	h, err := ctlfile.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Lock(0, pid); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h.Close()
	s, err := readProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	started, err := tickStart(s)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var st unix.Stat_t
		if err := unix.Stat(name, &st); err != nil {
			t.Fatal(err)
		}
		changed := time.Unix(st.Ctim.Unix())
		if started.Add(startPrecision + startMargin).Before(changed) {
			return changed
		}
		if err := os.Chmod(name, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readPastJobTimeout has a scheduler, started after the lock, read the
// queue once the lock is older than the clause's jobtimeout (10m by
// default): the lock is reset and the recipient scheduled.
func readPastJobTimeout(t *testing.T, d *Daemon, locked time.Time) {
	t.Helper()
	d.operator.started = locked.Add(time.Second)
	now := locked.Add(10*time.Minute + time.Second)
	d.now = func() time.Time { return now }
	d.startScan(now)
	step(d)
	if len(d.orphans.pending) > 0 {
		// A killed agent's group, waited for beside the loop: the loop
		// takes the wait's end as from Run's select.
		<-d.orphanDone()
		d.orphansWaited()
	}
	step(d) // a lock judged stale is read again, breaking it
	if d.core.Messages() != 1 {
		t.Fatalf("%d messages in core after the lock's jobtimeout", d.core.Messages())
	}
}

// TestOrphanedAgentKilled: an agent of a scheduler killed by SIGKILL, hung
// (a server that never answers) with a line locked, is killed with its
// whole process group (the child it forked too) when its lock, past
// jobtimeout, is reset: if it ever woke it would deliver the recipient the
// scheduler now delivers.
func TestOrphanedAgentKilled(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	o := startOrphan(t, d.spool.TransportDir(), orphanLeader)
	locked := lockBy(t, d, o.leader)
	readPastJobTimeout(t, d, locked)
	if !exited(o.leaderFD) {
		t.Error("the orphaned agent outlived the reset of its lock")
	}
	if !exited(o.childFD) {
		t.Error("the orphaned agent's child outlived the reset of its lock")
	}
	if o.canWake(t) {
		t.Error("the orphaned agent can still deliver the recipient")
	}
}

// TestNotAnAgentLeftAlone: a live process holding the lock that is not
// provably an agent of this postoffice's earlier scheduler — working
// elsewhere, or not leading its own process group (killing the group
// would kill another's) — is left alone when the lock is reset, as is
// one started after the lock was written (its PID reused), and a child of
// this scheduler (its agents are judged by ownsPID).
func TestNotAnAgentLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		elsewhere bool
		kind      orphanKind
	}{
		{"other cwd", true, orphanLeader},
		{"not a group leader", false, orphanMember},
		{"a child of this scheduler", false, ourChild},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := intakeDaemon(t, "", 100, 100, 1, 1, false)
			t.Cleanup(d.close)
			dir := d.spool.TransportDir()
			if tc.elsewhere {
				dir = t.TempDir()
			}
			o := startOrphan(t, dir, tc.kind)
			locked := lockBy(t, d, o.leader)
			readPastJobTimeout(t, d, locked)
			if exited(o.leaderFD) || exited(o.childFD) || !o.canWake(t) {
				t.Error("a process that is not provably an agent was killed")
			}
		})
	}
	t.Run("started after the lock", func(t *testing.T) {
		dir := t.TempDir()
		locked := time.Now()
		o := startOrphan(t, dir, orphanLeader)
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := killOrphan(o.leader, locked, fi); err == nil {
			t.Error("a process started after the lock was written was killed")
		}
		if exited(o.leaderFD) || exited(o.childFD) {
			t.Error("a process started after the lock was written was killed")
		}
		// The same process, had it started before the lock: killed.
		fd, err := killOrphan(o.leader, time.Now().Add(time.Second), fi)
		if err != nil {
			t.Fatal(err)
		}
		waitGroupGone(fd, o.leader, time.Now().Add(time.Hour)) // a failure deadline: SIGKILL ends them
		unix.Close(fd)
		if !exited(o.leaderFD) || !exited(o.childFD) {
			t.Error("an orphan not killed with its group")
		}
	})
}

// TestOrphanWaitBesideTheLoop: the wait for a killed orphan's group to be
// gone runs beside the loop, not on it: meanwhile the loop turns (reads,
// answers WHY and mailq, which show the file waiting for it), and the lock
// is reset only once the wait has ended, the group gone.
func TestOrphanWaitBesideTheLoop(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	o := startOrphan(t, d.spool.TransportDir(), orphanLeader)
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	locked := lockBy(t, d, o.leader)
	release := make(chan struct{})
	d.orphans.wait = func(fd, pgid int, _ time.Time) bool {
		buf := make([]byte, 64<<10)
		if stack := string(buf[:runtime.Stack(buf, false)]); strings.Contains(stack, "(*Daemon).intakeStep") {
			t.Errorf("the wait for a killed orphan's group runs on the loop:\n%s", stack)
		} else {
			<-release // until the loop has turned
		}
		return waitGroupGone(fd, pgid, time.Now().Add(time.Hour)) // a failure deadline: SIGKILL ends them
	}
	d.operator.started = locked.Add(time.Second)
	now := locked.Add(10*time.Minute + time.Second)
	d.now = func() time.Time { return now }
	d.startScan(now)
	step(d) // kills the orphan, its group waited for
	if len(d.orphans.pending) != 1 {
		t.Fatalf("%d waits for killed orphans pending", len(d.orphans.pending))
	}
	// The loop turns: a NEW for the file, a step, WHY and mailq.
	d.enqueueRead(rel)
	step(d)
	if d.core.Messages() != 0 || d.in.breaks[rel] != nil {
		t.Fatal("the lock was reset before the killed orphan's group was seen gone")
	}
	want := fmt.Sprintf("killed the earlier scheduler's agent pid %d; resetting its lock once it has exited", o.leader)
	if why := strings.Join(d.whyWaiting(now, rel), "\n"); !strings.Contains(why, want) {
		t.Errorf("WHY while the killed orphan is waited for:\n%s\nwant %q", why, want)
	}
	if q := strings.Join(d.waitingLines(now), "\n"); !strings.Contains(q, want) {
		t.Errorf("mailq's footer while the killed orphan is waited for:\n%s\nwant %q", q, want)
	}
	close(release)
	<-d.orphanDone() // as Run's select
	d.orphansWaited()
	if !exited(o.leaderFD) || !exited(o.childFD) {
		t.Fatal("the lock is reset before the killed orphan's group is gone")
	}
	step(d)
	if d.core.Messages() != 1 {
		t.Fatalf("%d messages in core once the killed orphan's group is gone", d.core.Messages())
	}
	if len(d.orphans.pending) != 0 || d.whyWaiting(now, rel) != nil {
		t.Error("the file still waits once its lock is reset")
	}
}

// TestOrphanWaitRunsOut: a killed orphan's group not seen gone within the
// wait's bound (a process stuck in the kernel) does not keep the file for
// ever: its lock is reset when the wait runs out.
func TestOrphanWaitRunsOut(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	o := startOrphan(t, d.spool.TransportDir(), orphanLeader)
	locked := lockBy(t, d, o.leader)
	d.orphans.wait = func(int, int, time.Time) bool { return false } // the bound passed
	readPastJobTimeout(t, d, locked)
}

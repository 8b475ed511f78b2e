package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"zsched/ctlfile"
)

// A scheduler killed by SIGKILL (or the OOM killer) leaves its agents
// running. A healthy one finishes its job and exits on EOF; a hung one (a
// server that never answers) may run for ever, and if it ever wakes it
// delivers the recipients it locked — which the next scheduler delivers
// again once their locks outlive jobtimeout and are reset. So before such
// a lock is reset, the process holding it is killed with its whole
// process group, as a silent busy agent of ours is (agent.Proc.Kill) —
// but only when it is provably an agent of this postoffice's earlier
// scheduler: a process that merely has the PID (reused) must never be
// killed. Every check must hold, else it is left alone:
//
//   - it started before the lock was written (a process started after
//     cannot have written it: a reused PID), with /proc's start taken to
//     the clock tick, not procStart's second;
//   - it leads its own process group (agents are started with Setpgid):
//     killing the group of one that does not would kill its parent's;
//   - it is not a child of this scheduler (ours are judged by ownsPID);
//   - its working directory is this postoffice's transport/ (agents are
//     started there), the same directory by device and inode.
//
// The scheduler puts nothing in an agent's environment that names the
// postoffice (the clause's env, PATH and TZ), so /proc/PID/environ proves
// nothing and is not read.
//
// A pidfd opened before the checks pins the process they are about: it is
// stopped through it (which fails if that process has exited, whatever now
// has its PID), so its group id cannot be freed for another before the
// group is killed.

// startPrecision is how early a start from /proc may be: its clock tick,
// and a file's status-change time may be a tick coarse too.
const startPrecision = 20 * time.Millisecond

// orphanExitWait bounds the wait for a killed orphan's group to be gone
// before its locks are reset: SIGKILL ends a process at once unless it is
// stuck in the kernel (a dead NFS server), which must not stop the
// scheduler. The wait runs beside the loop (orphanWaits), which never
// blocks on a process.
const orphanExitWait = time.Second

// orphanWaits are the waits, each on a goroutine beside the loop, for the
// process groups of killed orphans to be gone. A file's stale locks are
// reset when its wait ends (Run's select: done), not before — the
// recipient must not go out while the killed agent may still deliver it;
// meanwhile the file waits in later, shown by mailq and WHY. A wait ends
// within orphanExitWait whether or not Run still takes its end, so a stop
// neither waits for it nor leaves it running.
type orphanWaits struct {
	// pending is each file's wait; Run's goroutine only.
	pending map[string]*orphanWait

	mu    sync.Mutex
	ended []*orphanWait // waits over, not yet taken by Run

	done chan struct{} // ended has news (capacity 1); nil before the first wait
	// wait waits for a killed group to be gone, as waitGroupGone (nil);
	// tests put a fake here.
	wait func(fd, pgid int, deadline time.Time) bool
}

// orphanWait is one file's wait for its killed orphans.
type orphanWait struct {
	rel    string
	le     *ctlfile.LockError
	reason string     // why its locks are stale (admission's verdict)
	w      *waitState // the file's wait while this one runs
	// stuck are the killed agents whose group was not seen gone within
	// orphanExitWait; set by the wait's goroutine before it hands p over.
	stuck []int
}

// killedOrphan is a killed orphan to wait for: its pid (its group's id)
// and a pidfd of it.
type killedOrphan struct{ pid, fd int }

// killOrphans kills, before a file's locks judged stale (for reason) are
// reset, each process holding one for longer than its clause's jobtimeout
// that is provably an agent of this postoffice's earlier scheduler. If it
// killed one, it starts the wait for their groups to be gone beside the
// loop, puts the file waiting and returns true: the locks are reset when
// the wait ends (orphansWaited). Otherwise they may be reset now.
func (d *Daemon) killOrphans(now time.Time, rel string, le *ctlfile.LockError, reason string) bool {
	ow := &d.orphans
	if p := ow.pending[rel]; p != nil {
		// Read again while its wait still runs: the file waited
		// orphanExitWait since the kill (by the loop's clock), the bound
		// of the wait; its locks are reset now, as when the wait runs out.
		delete(ow.pending, rel)
		return false
	}
	var dir os.FileInfo
	var killed []killedOrphan
	done := map[int]bool{}
	for _, l := range le.Locks {
		jobTimeout, _ := d.lockLimits(l.Channel, l.Host)
		if done[l.PID] || now.Sub(le.Changed) < jobTimeout {
			continue
		}
		done[l.PID] = true
		if dir == nil {
			var err error
			if dir, err = os.Stat(d.spool.TransportDir()); err != nil {
				d.log.Warn("cannot tell the earlier scheduler's agents; lock holders left alone", "msg", rel, "error", err)
				break
			}
		}
		fd, err := killOrphan(l.PID, le.Changed, dir)
		if err != nil {
			d.log.Debug("lock holder left alone: not provably an earlier scheduler's agent", "msg", rel, "pid", l.PID, "why", err)
			continue
		}
		d.log.Warn("killed an earlier scheduler's agent, still holding a lock past jobtimeout, with its process group",
			"pid", l.PID, "pgid", l.PID, "file", rel, "age", now.Sub(le.Changed).Round(time.Second).String())
		killed = append(killed, killedOrphan{pid: l.PID, fd: fd})
	}
	if len(killed) == 0 {
		return false
	}
	pids := make([]string, len(killed))
	for i, k := range killed {
		pids[i] = strconv.Itoa(k.pid)
	}
	who := "agent pid " + pids[0]
	if len(pids) > 1 {
		who = "agents, pids " + strings.Join(pids, ", ") + ","
	}
	// Read again at the wait's bound, should its end not come first.
	w := d.wait(now, rel, now.Add(orphanExitWait),
		fmt.Sprintf("killed the earlier scheduler's %s; resetting its lock once it has exited", who))
	p := &orphanWait{rel: rel, le: le, reason: reason, w: w}
	if ow.done == nil {
		ow.done = make(chan struct{}, 1)
		ow.pending = make(map[string]*orphanWait)
	}
	ow.pending[rel] = p
	wait := ow.wait
	if wait == nil {
		wait = waitGroupGone
	}
	deadline, news := time.Now().Add(orphanExitWait), ow.done
	go func() {
		asHelper()
		var stuck []int
		for _, k := range killed {
			if !wait(k.fd, k.pid, deadline) {
				stuck = append(stuck, k.pid)
			}
			unix.Close(k.fd)
		}
		p.stuck = stuck
		ow.mu.Lock()
		ow.ended = append(ow.ended, p)
		ow.mu.Unlock()
		poke(news)
	}()
	return true
}

// orphanDone is ready when a wait for killed orphans has ended; nil
// (never ready in Run's select) before the first.
func (d *Daemon) orphanDone() <-chan struct{} { return d.orphans.done }

// orphansWaited resets the stale locks of the files whose wait for their
// killed orphans has ended, unless the file was read again meanwhile.
func (d *Daemon) orphansWaited() {
	ow := &d.orphans
	ow.mu.Lock()
	ended := ow.ended
	ow.ended = nil
	ow.mu.Unlock()
	for _, p := range ended {
		if len(p.stuck) > 0 {
			d.log.Warn("a killed earlier scheduler's agent's process group did not exit within the wait; its lock is reset all the same",
				"msg", p.rel, "pids", p.stuck, "waited", orphanExitWait.String())
		}
		if ow.pending[p.rel] != p {
			continue // reset already, when read again at the bound
		}
		delete(ow.pending, p.rel)
		if d.in.waiting[p.rel] != p.w {
			continue // read since: its locks went with their holder
		}
		keep := d.in.later[:0]
		for _, l := range d.in.later {
			if l.rel != p.rel {
				keep = append(keep, l)
			}
		}
		clear(d.in.later[len(keep):])
		d.in.later = keep
		d.breakLocks(p.rel, p.le, p.reason)
	}
}

// killOrphan kills pid's process group if pid is provably an agent of an
// earlier scheduler of the postoffice whose transport/ is dir, holding a
// lock written at locked; it returns a pidfd of pid, for the caller to
// wait on (waitGroupGone) and close, or why pid was left alone.
func killOrphan(pid int, locked time.Time, dir os.FileInfo) (pidfd int, err error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("daemon: pidfd of %d: %w", pid, err)
	}
	if err := killPinned(fd, pid, locked, dir); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// killPinned is killOrphan's checks and kill, of the process of pidfd fd.
func killPinned(fd, pid int, locked time.Time, dir os.FileInfo) error {
	s, err := readProcStat(pid)
	if err != nil {
		return err
	}
	started, err := tickStart(s)
	if err != nil {
		return err
	}
	switch {
	case !started.Add(startPrecision).Before(locked):
		return fmt.Errorf("daemon: process %d started at %s, not before its lock (%s)", pid, started.UTC().Format(time.RFC3339Nano), locked.UTC().Format(time.RFC3339Nano))
	case s.pgrp != pid:
		return fmt.Errorf("daemon: process %d is in group %d, not its own", pid, s.pgrp)
	case s.ppid == os.Getpid():
		return fmt.Errorf("daemon: process %d is a child of this scheduler", pid)
	}
	cwd, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return fmt.Errorf("daemon: working directory of %d: %w", pid, err)
	}
	if !os.SameFile(cwd, dir) {
		return fmt.Errorf("daemon: process %d works in another directory than transport/", pid)
	}
	// What was read is about the pidfd's process only if it is still
	// alive: stopping it through the pidfd says so, and keeps it (and so
	// its group id) until the group's SIGKILL.
	if err := unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0); err != nil {
		return fmt.Errorf("daemon: process %d: %w", pid, err)
	}
	if err := unix.Kill(-pid, unix.SIGKILL); err != nil {
		unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0) // as it was
		return fmt.Errorf("daemon: kill process group %d: %w", pid, err)
	}
	return nil
}

// tickStart is when a process started, to the clock tick (early by up to
// startPrecision): the boot time is read from the clock /proc counts a
// start in (CLOCK_BOOTTIME), not /proc/stat's btime, which is to the
// second.
func tickStart(s procStat) (time.Time, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}, fmt.Errorf("daemon: boot time: %w", err)
	}
	return time.Now().Add(-time.Duration(ts.Nano())).Add(sinceBoot(s.ticks)), nil
}

// waitGroupGone waits until the process of pidfd fd, leader of group pgid,
// and every other live member of the group have exited, or until the
// deadline; it reports whether they had.
func waitGroupGone(fd, pgid int, deadline time.Time) bool {
	if !waitPidfd(fd, deadline) {
		return false
	}
	for {
		pid := groupMember(pgid)
		if pid == 0 {
			return true
		}
		mfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if !errors.Is(err, unix.ESRCH) || time.Now().After(deadline) {
				return false
			}
			continue // gone already
		}
		ok := waitPidfd(mfd, deadline)
		unix.Close(mfd)
		if !ok {
			return false
		}
	}
}

// waitPidfd waits until the process of pidfd fd has exited (a zombie
// counts: it does nothing more), or until the deadline.
func waitPidfd(fd int, deadline time.Time) bool {
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(left.Milliseconds()))
		switch {
		case n > 0:
			return true
		case errors.Is(err, unix.EINTR):
			continue
		default:
			return false
		}
	}
}

// groupMember returns a live process of group pgid other than its leader,
// or 0 if there is none.
func groupMember(pgid int) int {
	f, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == pgid {
			continue
		}
		if g, err := unix.Getpgid(pid); err != nil || g != pgid || zombie(pid) {
			continue
		}
		return pid
	}
	return 0
}

// zombie reports whether pid has exited (or is gone).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

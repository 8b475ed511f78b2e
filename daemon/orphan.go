package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
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

// orphanExitWait bounds the wait, on the loop, for a killed orphan's
// group to be gone before its locks are reset: SIGKILL ends a process at
// once unless it is stuck in the kernel (a dead NFS server), which must
// not stop the scheduler.
const orphanExitWait = time.Second

// killOrphans kills, before a file's locks judged stale are reset, each
// process holding one for longer than its clause's jobtimeout that is
// provably an agent of this postoffice's earlier scheduler.
func (d *Daemon) killOrphans(now time.Time, rel string, le *ctlfile.LockError) {
	var dir os.FileInfo
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
				return
			}
		}
		gone, err := killOrphan(l.PID, le.Changed, dir)
		if err != nil {
			d.log.Debug("lock holder left alone: not provably an earlier scheduler's agent", "msg", rel, "pid", l.PID, "why", err)
			continue
		}
		d.log.Warn("killed an earlier scheduler's agent, still holding a lock past jobtimeout, with its process group",
			"pid", l.PID, "pgid", l.PID, "file", rel, "age", now.Sub(le.Changed).Round(time.Second).String(), "exited", gone)
	}
}

// killOrphan kills pid's process group if pid is provably an agent of an
// earlier scheduler of the postoffice whose transport/ is dir, holding a
// lock written at locked; it returns whether the group was seen to end,
// or why pid was left alone.
func killOrphan(pid int, locked time.Time, dir os.FileInfo) (gone bool, err error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false, fmt.Errorf("daemon: pidfd of %d: %w", pid, err)
	}
	defer unix.Close(fd)
	s, err := readProcStat(pid)
	if err != nil {
		return false, err
	}
	started, err := tickStart(s)
	if err != nil {
		return false, err
	}
	switch {
	case !started.Add(startPrecision).Before(locked):
		return false, fmt.Errorf("daemon: process %d started at %s, not before its lock (%s)", pid, started.UTC().Format(time.RFC3339Nano), locked.UTC().Format(time.RFC3339Nano))
	case s.pgrp != pid:
		return false, fmt.Errorf("daemon: process %d is in group %d, not its own", pid, s.pgrp)
	case s.ppid == os.Getpid():
		return false, fmt.Errorf("daemon: process %d is a child of this scheduler", pid)
	}
	cwd, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return false, fmt.Errorf("daemon: working directory of %d: %w", pid, err)
	}
	if !os.SameFile(cwd, dir) {
		return false, fmt.Errorf("daemon: process %d works in another directory than transport/", pid)
	}
	// What was read is about the pidfd's process only if it is still
	// alive: stopping it through the pidfd says so, and keeps it (and so
	// its group id) until the group's SIGKILL.
	if err := unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0); err != nil {
		return false, fmt.Errorf("daemon: process %d: %w", pid, err)
	}
	if err := unix.Kill(-pid, unix.SIGKILL); err != nil {
		unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0) // as it was
		return false, fmt.Errorf("daemon: kill process group %d: %w", pid, err)
	}
	return waitGroupGone(fd, pid, time.Now().Add(orphanExitWait)), nil
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

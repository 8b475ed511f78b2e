package agent

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// An agent's process group is what the scheduler owns of it: an agent that
// forks a child to deliver (ZMailer's sm style) has work in flight as long
// as that child runs, whether or not the agent itself is still there. So
// Kill signals the whole group, and Exited waits until no process of the
// group is left: the caller resets the agent's locks and reschedules its
// jobs only then, when no process of it can still deliver them.
//
// Group ids are pids and pids are recycled. The agent is kept unreaped (a
// zombie) until its group is empty: the zombie holds the number, so no
// other process can get it as a pid or a group id while Kill may signal
// it. A process that leaves the group (setsid, setpgid) is not followed.

// groupPoll is how often a group member is looked for again when the
// kernel cannot give a descriptor to wait on (pidfd_open needs Linux 5.3).
const groupPoll = 100 * time.Millisecond

// waitLeader waits, without reaping it, until the agent's own process has
// exited. Its status is read later, when cmd.Wait reaps it.
func (p *Proc) waitLeader() {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			// Any other error (not our child: cannot happen) is cmd.Wait's
			// to report.
			return
		}
	}
}

// members returns the live processes of process group pgid other than its
// leader: one getpgid per process in /proc, a stat read only for those in
// the group (a zombie delivers nothing and is not waited for).
func members(pgid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var out []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == pgid {
			continue
		}
		if g, err := unix.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		if !zombie(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// zombie reports whether pid has exited (or is gone).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// waitGroup returns once no live process is left in the agent's group. It
// waits on one member at a time through a pidfd in the runtime's poller,
// so a lingering group costs no thread, and looks again when it exits (the
// member may have forked others).
func (p *Proc) waitGroup(ms []int) {
	for len(ms) > 0 {
		waitExit(ms[0], p.pid)
		ms = members(p.pid)
	}
}

// waitExit returns when process pid, a member of group pgid, has exited.
func waitExit(pid, pgid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if !errors.Is(err, unix.ESRCH) {
			time.Sleep(groupPoll)
		}
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	// The pid may have been recycled between the scan and the open: only a
	// process still in the group is ours to wait for.
	if g, err := unix.Getpgid(pid); err != nil || g != pgid {
		return
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		time.Sleep(groupPoll)
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		time.Sleep(groupPoll)
		return
	}
	// A pidfd polls readable once its process has exited; the raw read
	// only asks, it reads nothing.
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err != nil || n > 0
	})
	if err != nil {
		// Not pollable after all (NewFile found it blocking): look again
		// later.
		time.Sleep(groupPoll)
	}
}

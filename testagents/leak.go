package testagents

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// LeakWait bounds how long LeakCheck waits for agents to go: a scheduler
// stopped by SIGKILL leaves agents that exit by themselves at EOF, soon.
// It is a failure deadline, not a synchronisation sleep.
const LeakWait = 10 * time.Second

// LeakCheck makes a process of the test's agents that outlives the test a
// failure. Agents run with their working directory in a postoffice's
// transport directory, and so do the children they fork unless they move:
// at cleanup, every live process whose working directory is dir or below it
// is a leak. LeakCheck waits up to LeakWait for them to exit, then fails the
// test naming each one, and kills them (and their process groups) so they go
// no further.
//
// Call it before starting the scheduler (or the agents): cleanups run last
// registered first, so the check runs after the scheduler's own stop.
func LeakCheck(t testing.TB, dir string) {
	t.Helper()
	leakCheck(t, dir, LeakWait)
}

func leakCheck(t testing.TB, dir string, wait time.Duration) {
	t.Helper()
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(wait)
		left := ProcessesIn(dir)
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling /proc: nothing to wait on
			left = ProcessesIn(dir)
		}
		for _, pid := range left {
			t.Errorf("leaked agent process %d (%s) in %s", pid, cmdline(pid), dir)
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
				syscall.Kill(-pgid, syscall.SIGKILL)
			}
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// ProcessesIn returns the live processes (not zombies) whose working
// directory is dir or below it.
func ProcessesIn(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil || (cwd != dir && !strings.HasPrefix(cwd, dir+"/")) {
			continue
		}
		if !exited(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// exited reports whether pid is a zombie or gone.
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

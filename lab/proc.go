package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture Go runs on (sysconf(_SC_CLK_TCK) needs cgo).
const userHZ = 100

// procStat is what a comparison needs of /proc/PID/stat.
type procStat struct {
	pid, pgrp      int
	state          byte
	utime, stime   int64 // the process's own, in ticks
	cutime, cstime int64 // of the children it has waited for, in ticks
	threads        int
}

var errStat = errors.New("lab: malformed /proc stat line")

// parseStat reads a /proc/PID/stat line: "pid (comm) state ppid pgrp ...";
// comm may hold blanks and parentheses, so the fields are counted from the
// last ')'.
func parseStat(b []byte) (procStat, error) {
	var s procStat
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return s, fmt.Errorf("%w: %q", errStat, b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return s, fmt.Errorf("%w: pid: %q", errStat, b)
	}
	// After ')': state(3) ppid(4) pgrp(5) ... utime(14) stime(15)
	// cutime(16) cstime(17) ... num_threads(20), numbered as in proc(5).
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 18 || len(f[0]) != 1 {
		return s, fmt.Errorf("%w: %q", errStat, b)
	}
	s.pid, s.state = pid, f[0][0]
	nums := make([]int64, 0, 6)
	for _, i := range []int{2, 11, 12, 13, 14, 17} { // pgrp utime stime cutime cstime num_threads
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return s, fmt.Errorf("%w: field %d: %q", errStat, i+3, b)
		}
		nums = append(nums, n)
	}
	s.pgrp = int(nums[0])
	s.utime, s.stime, s.cutime, s.cstime = nums[1], nums[2], nums[3], nums[4]
	s.threads = int(nums[5])
	return s, nil
}

// parseSchedstat reads /proc/PID/schedstat's first field: the time the
// process's main thread has run on a CPU, in nanoseconds (exact, where
// stat's ticks are 10 ms; but stat covers all threads).
func parseSchedstat(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%w: schedstat %q", errStat, b)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: schedstat %q", errStat, b)
	}
	return time.Duration(ns), nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / userHZ }

// groupCPU is the CPU time used so far by process group pgid: each of its
// processes still in the table (zombies too), its own time and that of
// the children it has reaped. A process that left the group, or was
// reaped by a process outside it, is not counted; Postfix's daemons and
// zsched's agents are all reaped by their group's leader. The own time of
// a single-threaded process (every Postfix daemon) comes from schedstat
// (nanoseconds) when the kernel has it: the ticks of stat would lose up to
// 10 ms for each of up to a hundred processes alive at a snapshot.
func groupCPU(pgid int) (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("lab: %w", err)
	}
	var total time.Duration
	found := false
	for _, e := range ents {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		s, err := parseStat(b)
		if err != nil {
			return 0, err
		}
		if s.pgrp != pgid {
			continue
		}
		found = true
		own := ticks(s.utime + s.stime)
		if s.threads == 1 {
			if b, err := os.ReadFile("/proc/" + name + "/schedstat"); err == nil {
				if ns, err := parseSchedstat(b); err == nil {
					own = ns
				}
			}
		}
		total += own + ticks(s.cutime+s.cstime)
	}
	if !found {
		return 0, fmt.Errorf("lab: no process in group %d", pgid)
	}
	return total, nil
}

// procCPU is the CPU time process pid (all its threads) has used itself
// so far, to 10 ms.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("lab: %w", err)
	}
	s, err := parseStat(b)
	if err != nil {
		return 0, err
	}
	return ticks(s.utime + s.stime), nil
}

// loadavg is /proc/loadavg's first three fields ("0.52 0.58 0.59").
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

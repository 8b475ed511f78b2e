package daemon

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// procStat is what /proc/PID/stat says of a process: its parent, its
// process group, and its start in clock ticks after boot.
type procStat struct {
	ppid, pgrp int
	ticks      int64
}

// readProcStat reads /proc/PID/stat.
func readProcStat(pid int) (procStat, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, fmt.Errorf("daemon: process %d: %w", pid, err)
	}
	// "pid (comm) state ppid pgrp …": the fields after comm, which may
	// hold blanks and parentheses; starttime is the 22nd field, the 20th
	// after comm.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("daemon: process %d: no command in its stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("daemon: process %d: %d fields in its stat", pid, len(f))
	}
	var s procStat
	if s.ppid, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("daemon: process %d: parent: %w", pid, err)
	}
	if s.pgrp, err = strconv.Atoi(f[2]); err != nil {
		return procStat{}, fmt.Errorf("daemon: process %d: group: %w", pid, err)
	}
	if s.ticks, err = strconv.ParseInt(f[19], 10, 64); err != nil {
		return procStat{}, fmt.Errorf("daemon: process %d: start: %w", pid, err)
	}
	return s, nil
}

// sinceBoot is a start in clock ticks as a duration: USER_HZ is 100 on
// every Linux architecture Go supports.
func sinceBoot(ticks int64) time.Duration { return time.Duration(ticks) * 10 * time.Millisecond }

// procStart returns when process pid started, from /proc (its start in
// clock ticks after boot, and the boot time, which /proc gives to the
// second: so the result may be up to a second early); zero when it cannot
// be told.
func procStart(pid int) time.Time {
	s, err := readProcStat(pid)
	if err != nil {
		return time.Time{}
	}
	boot, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for line := range strings.Lines(string(boot)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.Unix(sec, 0).Add(sinceBoot(s.ticks))
		}
	}
	return time.Time{}
}

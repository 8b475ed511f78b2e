package main

import (
	"os"
	"strconv"
	"strings"
)

// procUsage returns the CPU seconds (user + system) a live process has
// used itself, without its children, and its peak RSS in KiB; -1 each when
// /proc cannot tell.
func procUsage(pid int) (cpu float64, rssKiB int64) {
	cpu, rssKiB = -1, -1
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// Fields after the parenthesised command: state is field 3,
		// utime and stime fields 14 and 15, in clock ticks (100 Hz on
		// Linux, which Go cannot query without cgo).
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 12 {
				ut, err1 := strconv.ParseInt(f[11], 10, 64)
				st, err2 := strconv.ParseInt(f[12], 10, 64)
				if err1 == nil && err2 == nil {
					cpu = float64(ut+st) / 100
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				if n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
					rssKiB = n
				}
			}
		}
	}
	return cpu, rssKiB
}

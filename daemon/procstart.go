package daemon

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"time"
)

// procStart returns when process pid started, from /proc (its start in
// clock ticks after boot, and the boot time, which /proc gives to the
// second: so the result may be up to a second early); zero when it cannot
// be told.
func procStart(pid int) time.Time {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return time.Time{}
	}
	// "pid (comm) state ppid …": the fields after comm, which may hold
	// blanks and parentheses; starttime is the 22nd field, the 20th
	// after comm.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
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
			// USER_HZ is 100 on every Linux architecture Go supports.
			return time.Unix(sec, 0).Add(time.Duration(ticks) * 10 * time.Millisecond)
		}
	}
	return time.Time{}
}

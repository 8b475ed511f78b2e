package lab

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// comm may hold blanks and parentheses: fields count from the last ')'.
	line := "4242 (a (b) c) S 1 4240 4240 0 -1 4194560 100 0 0 0 150 25 7 3 20 0 3 0 100 1000 10 18446744073709551615\n"
	s, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{pid: 4242, pgrp: 4240, state: 'S', utime: 150, stime: 25, cutime: 7, cstime: 3, threads: 3}
	if s != want {
		t.Errorf("parsed %+v, want %+v", s, want)
	}
	for _, bad := range []string{"", "4242 (x) S 1", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18", "1 (y) S 1 z 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if ns, err := parseSchedstat([]byte("5679934 24256 2\n")); err != nil || ns != 5679934 {
		t.Errorf("schedstat: %v, %v", ns, err)
	}
	if _, err := parseSchedstat([]byte("")); err == nil {
		t.Error("empty schedstat parsed")
	}
}

// groupCPU counts a group's live processes and the children they reaped:
// a shell that ran a busy child and waits shows that child's time.
func TestGroupCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'; echo done; exec sleep 60`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "done\n" {
		t.Fatalf("shell said %q, %v", buf, err)
	}
	// The busy child is gone, reaped by the shell: its time is the
	// shell's cutime.
	c, err := groupCPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if c < 10*time.Millisecond {
		t.Errorf("group CPU %v: the busy child's time is missing", c)
	}
	if _, err := groupCPU(1 << 30); err == nil {
		t.Error("a group without processes gave no error")
	}
	own, err := procCPU(cmd.Process.Pid)
	if err != nil || own > c {
		t.Errorf("the shell's own CPU %v (%v) above its group's %v", own, err, c)
	}
}

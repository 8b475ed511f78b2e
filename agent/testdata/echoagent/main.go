// Command echoagent is a scriptable stand-in transport agent for the agent
// package's tests. Each argument is one step, run in order:
//
//	print:TEXT    write TEXT and "\n" to stdout
//	raw:TEXT      write TEXT to stdout, no newline
//	stderr:TEXT   write TEXT and "\n" to stderr
//	long:N        write a line of N bytes
//	spam:N        write lines "line 0" .. "line N-1"
//	env           write "env:" + each environment entry
//	pwd           write "pwd:" + the working directory
//	ids           write "ids:UID:GID:GROUPS"
//	tty           write "tty:yes" if stdout is a terminal, else "tty:no"
//	echo          for each stdin line write "got:" + line; at EOF write "eof"
//	ignoreterm    ignore SIGTERM
//	closeout      point fds 0, 1 and 2 at /dev/null (closing them would let the runtime reuse them)
//	fork          start a copy of itself running "hang" on the same stdio; write "grandchild:PID"
//	setsid-fork   fork, but the copy leaves the process group for a session of its own
//	touch:PATH    create the file PATH (the test learns what was written before)
//	hang          never return
//	exit:N        exit with status N
//
// Output is unbuffered so the order of stdout and stderr is the order of steps.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	for _, step := range os.Args[1:] {
		name, arg, _ := strings.Cut(step, ":")
		switch name {
		case "print":
			fmt.Println(arg)
		case "raw":
			os.Stdout.WriteString(arg)
		case "stderr":
			fmt.Fprintln(os.Stderr, arg)
		case "long":
			os.Stdout.WriteString(strings.Repeat("x", atoi(arg)) + "\n")
		case "spam":
			var b strings.Builder
			for i := range atoi(arg) {
				fmt.Fprintf(&b, "line %d\n", i)
			}
			os.Stdout.WriteString(b.String())
		case "env":
			for _, e := range os.Environ() {
				fmt.Println("env:" + e)
			}
		case "pwd":
			wd, err := os.Getwd()
			if err != nil {
				fail(err)
			}
			fmt.Println("pwd:" + wd)
		case "ids":
			groups, _ := os.Getgroups()
			fmt.Printf("ids:%d:%d:%v\n", os.Getuid(), os.Getgid(), groups)
		case "tty":
			if _, err := unix.IoctlGetTermios(1, unix.TCGETS); err == nil {
				fmt.Println("tty:yes")
			} else {
				fmt.Println("tty:no")
			}
		case "echo":
			sc := bufio.NewScanner(os.Stdin)
			for sc.Scan() {
				fmt.Println("got:" + sc.Text())
			}
			fmt.Println("eof")
		case "ignoreterm":
			signal.Ignore(syscall.SIGTERM)
		case "closeout":
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				fail(err)
			}
			for fd := range 3 {
				if err := syscall.Dup2(int(null.Fd()), fd); err != nil {
					fail(err)
				}
			}
			null.Close()
		case "fork", "setsid-fork":
			cmd := exec.Command(os.Args[0], "hang")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
			if name == "setsid-fork" {
				cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			}
			if err := cmd.Start(); err != nil {
				fail(err)
			}
			fmt.Printf("grandchild:%d\n", cmd.Process.Pid)
		case "touch":
			if err := os.WriteFile(arg, nil, 0o644); err != nil {
				fail(err)
			}
		case "hang":
			for {
				time.Sleep(time.Hour)
			}
		case "exit":
			os.Exit(atoi(arg))
		default:
			fail(fmt.Errorf("unknown step %q", step))
		}
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail(err)
	}
	return n
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "echoagent:", err)
	os.Exit(111)
}

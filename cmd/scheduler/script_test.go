package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"zsched/control"
)

// TestScripts runs the CLI scripts in testdata/script: each is the built
// scheduler and test agents driven as an administrator would, against a
// running daemon where the script starts one. Besides testscript's own
// commands, a script has:
//
//	daemon NAME ARGS...         start `scheduler ARGS...` in the background; its
//	                            stdout and stderr go to $WORK/NAME.log
//	signal NAME SIG             send SIGTERM, SIGINT, SIGHUP or SIGKILL to it
//	waitexit NAME [STATUS]      wait for it to exit, with STATUS (default 0)
//	waitlog NAME REGEXP [N]     wait until $WORK/NAME.log matches REGEXP (N times)
//	countlog NAME REGEXP N      $WORK/NAME.log matches REGEXP exactly N times now
//	waitout REGEXP PROG ARGS... run PROG until its stdout matches REGEXP
//	sdnotify NAME               listen on $WORK/NAME.sock as systemd's notify
//	                            socket, each datagram a line of $WORK/NAME.log
//	fillsock PATH               a datagram socket at PATH nobody reads, its
//	                            buffer full
//	mq2 ADDR USER PASS LINE     log in to a MAILQ v2 TCP listener, send LINE,
//	                            print the reply on stdout (a refusal on stderr)
//
// Every wait gives up after 60s: a guard against a hung test, not a timing.
// $SINK, $HANG, $DEFERALL, $SLOW, $CRASH and $GARBAGE are the test agents.
func TestScripts(t *testing.T) {
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(e *testscript.Env) error {
			e.Vars = append(e.Vars, "PATH="+binaries.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			for name, path := range binaries.agents {
				if regexp.MustCompile(`^[a-z]+$`).MatchString(name) {
					e.Vars = append(e.Vars, strings.ToUpper(name)+"="+path)
				}
			}
			e.Values[procsKey{}] = &procs{m: map[string]*proc{}}
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "etcconfig": // the host has a system configuration
				_, err := os.Stat(systemConfig)
				return err == nil, nil
			case "root":
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"daemon":   cmdDaemon,
			"signal":   cmdSignal,
			"waitexit": cmdWaitExit,
			"waitlog":  cmdWaitLog,
			"countlog": cmdCountLog,
			"waitout":  cmdWaitOut,
			"sdnotify": cmdSDNotify,
			"fillsock": cmdFillSock,
			"mq2":      cmdMQ2,
		},
	})
}

const scriptWait = 60 * time.Second

type procsKey struct{}

type procs struct {
	mu sync.Mutex
	m  map[string]*proc
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func scriptProcs(ts *testscript.TestScript) *procs { return ts.Value(procsKey{}).(*procs) }

func (ps *procs) get(ts *testscript.TestScript, name string) *proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[name]
	if p == nil {
		ts.Fatalf("no daemon %s", name)
	}
	return p
}

func cmdDaemon(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: daemon NAME ARGS...")
	}
	name := args[0]
	log, err := os.Create(ts.MkAbs(name + ".log"))
	ts.Check(err)
	cmd := exec.Command(filepath.Join(binaries.dir, "scheduler"), args[1:]...)
	cmd.Dir = ts.MkAbs(".")
	for _, kv := range []string{"PATH", "ZSCHED_CONFIG", "NOTIFY_SOCKET", "HOME", "TMPDIR"} {
		if v := ts.Getenv(kv); v != "" {
			cmd.Env = append(cmd.Env, kv+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = log, log
	ts.Check(cmd.Start())
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); log.Close(); close(p.done) }()
	ps := scriptProcs(ts)
	ps.mu.Lock()
	ps.m[name] = p
	ps.mu.Unlock()
	ts.Defer(func() {
		cmd.Process.Kill()
		<-p.done
	})
}

var signals = map[string]syscall.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": syscall.SIGINT,
	"SIGHUP": syscall.SIGHUP, "SIGKILL": syscall.SIGKILL}

func cmdSignal(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || signals[args[1]] == 0 {
		ts.Fatalf("usage: signal NAME SIGTERM|SIGINT|SIGHUP|SIGKILL")
	}
	ts.Check(scriptProcs(ts).get(ts, args[0]).cmd.Process.Signal(signals[args[1]]))
}

func cmdWaitExit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitexit NAME [STATUS]")
	}
	want := 0
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		ts.Check(err)
		want = n
	}
	p := scriptProcs(ts).get(ts, args[0])
	select {
	case <-p.done:
	case <-time.After(scriptWait):
		ts.Fatalf("%s still running after %v", args[0], scriptWait)
	}
	got := 0
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		got = ee.ExitCode()
	} else if p.err != nil {
		ts.Fatalf("%s: %v", args[0], p.err)
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[0], got, want)
	}
}

// logMatches counts the lines of $WORK/NAME.log that match re.
func logMatches(ts *testscript.TestScript, name string, re *regexp.Regexp) int {
	data, err := os.ReadFile(ts.MkAbs(name + ".log"))
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}

func cmdWaitLog(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: waitlog NAME REGEXP [N]")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	want := 1
	if len(args) == 3 {
		want, err = strconv.Atoi(args[2])
		ts.Check(err)
	}
	deadline := time.Now().Add(scriptWait)
	for logMatches(ts, args[0], re) < want {
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(ts.MkAbs(args[0] + ".log"))
			ts.Fatalf("%s.log never matched %q %d times:\n%s", args[0], args[1], want, data)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

func cmdCountLog(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: countlog NAME REGEXP N")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	want, err := strconv.Atoi(args[2])
	ts.Check(err)
	if got := logMatches(ts, args[0], re); got != want {
		data, _ := os.ReadFile(ts.MkAbs(args[0] + ".log"))
		ts.Fatalf("%s.log matches %q %d times, want %d:\n%s", args[0], args[1], got, want, data)
	}
}

func cmdWaitOut(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: waitout REGEXP PROG ARGS...")
	}
	re, err := regexp.Compile(args[0])
	ts.Check(err)
	deadline := time.Now().Add(scriptWait)
	var out []byte
	for {
		prog := args[1]
		if prog == "scheduler" {
			prog = filepath.Join(binaries.dir, "scheduler")
		}
		cmd := exec.Command(prog, args[2:]...)
		cmd.Dir = ts.MkAbs(".")
		for _, kv := range []string{"PATH", "ZSCHED_CONFIG", "HOME", "TMPDIR"} {
			if v := ts.Getenv(kv); v != "" {
				cmd.Env = append(cmd.Env, kv+"="+v)
			}
		}
		out, _ = cmd.Output()
		if re.Match(out) {
			fmt.Fprintf(ts.Stdout(), "%s", out)
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s never printed a match for %q; last:\n%s", strings.Join(args[1:], " "), args[0], out)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, bounded by the deadline
	}
}

func cmdSDNotify(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sdnotify NAME")
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ts.MkAbs(args[0] + ".sock"), Net: "unixgram"})
	ts.Check(err)
	log, err := os.Create(ts.MkAbs(args[0] + ".log"))
	ts.Check(err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			// One datagram may hold several assignments: one line each.
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				fmt.Fprintln(log, l)
			}
		}
	}()
	ts.Defer(func() { conn.Close(); <-done; log.Close() })
}

func cmdFillSock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: fillsock PATH")
	}
	path := ts.MkAbs(args[0])
	os.Remove(path)
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	ts.Check(err)
	ts.Defer(func() { l.Close() })
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	ts.Check(err)
	defer c.Close()
	for n := 0; ; n++ {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Write([]byte("NEW 1")); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && n > 0 {
				return // full
			}
			ts.Fatalf("filling %s: %v", path, err)
		}
	}
}

func cmdMQ2(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 4 {
		ts.Fatalf("usage: mq2 ADDR USER PASS LINE")
	}
	c, err := control.DialTCP(args[0], args[1], args[2], 10*time.Second)
	if err != nil {
		if !neg {
			ts.Fatalf("mq2: %v", err)
		}
		fmt.Fprintln(ts.Stderr(), err)
		return
	}
	defer c.Close()
	rep, err := c.Do(args[3])
	ts.Check(err)
	w := bufio.NewWriter(ts.Stdout())
	if rep.Multi {
		for _, l := range rep.Lines {
			fmt.Fprintln(w, l)
		}
	} else {
		fmt.Fprintln(w, rep.Text)
	}
	w.Flush()
	if neg == rep.OK {
		ts.Fatalf("mq2 %s: reply OK=%v", args[3], rep.OK)
	}
}

// Command forker delivers as ZMailer's sm does: for each job it forks a
// child that does the delivery, waits for it, and reports on what the child
// did. The child, in the agent's process group and with no tie to the
// protocol stream, waits until the file named by -go exists, then appends
// "inum/offset user" per recipient to the -log file (one write each, with
// O_APPEND) and exits; forker then reports ok3 for each. A forker killed
// while its child waits leaves the child behind unless the scheduler kills
// the whole group: that child then delivers a recipient the scheduler has
// meanwhile given to another agent (issue 16).
//
//	forker -c channel -log FILE -go FILE [host]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"zsched/report"
	"zsched/ta"
)

func main() {
	if len(os.Args) == 5 && os.Args[1] == "-child" {
		child(os.Args[2], os.Args[3], os.Args[4])
		return
	}
	fs := flag.NewFlagSet("forker", flag.ContinueOnError)
	logPath := fs.String("log", "", "the deliveries' log")
	goPath := fs.String("go", "", "the children deliver once this file exists")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	if *logPath == "" || *goPath == "" {
		fail(fmt.Errorf("-log and -go are required"))
	}
	err = a.Serve(func(d *ta.Delivery) []ta.Result {
		var b strings.Builder
		for _, i := range d.Rcpts {
			rc := d.Rcpt(i)
			fmt.Fprintf(&b, "%d/%d %s\n", d.File.Inum, rc.Offset, rc.User)
		}
		// The child's lines go in its argument list: it needs nothing else
		// of the agent's.
		cmd := exec.Command(os.Args[0], "-child", *goPath, *logPath, b.String())
		st, text := report.OK3, "delivered by the child"
		if err := cmd.Run(); err != nil {
			st, text = report.Deferred, "child: "+err.Error()
		}
		res := make([]ta.Result, 0, len(d.Rcpts))
		for _, i := range d.Rcpts {
			res = append(res, ta.Result{Rcpt: i, Status: st, Text: text})
		}
		return res
	})
	if err != nil {
		fail(err)
	}
}

// child waits for the go file, then delivers: each line of what is one
// write to the log.
func child(goPath, logPath, what string) {
	for {
		if _, err := os.Stat(goPath); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // a stand-in for a slow delivery
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		os.Exit(2)
	}
	for _, l := range strings.SplitAfter(what, "\n") {
		if l != "" {
			f.WriteString(l)
		}
	}
	f.Close()
	os.Exit(0)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# forker: %v\n", err)
	os.Exit(1)
}

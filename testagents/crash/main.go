// Command crash delivers like sink, reporting each recipient at once, and
// exits with status 1 when it is about to report recipient N+1: mid-job,
// with that recipient and the rest of the job still locked (~ and its
// PID) in the control file, as a crashed agent leaves them.
//
//	crash -c channel [-after N] [host]
package main

import (
	"flag"
	"fmt"
	"os"

	"zsched/ta"
	"zsched/testagents"
)

func main() {
	fs := flag.NewFlagSet("crash", flag.ContinueOnError)
	after := fs.Int("after", 0, "recipients to report before dying")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	var s testagents.Sink
	reported := 0
	err = a.Serve(func(d *ta.Delivery) []ta.Result {
		for _, i := range d.Rcpts {
			if reported >= *after {
				os.Exit(1)
			}
			if err := d.Report(s.DeliverOne(d, i)); err != nil {
				fail(err)
			}
			reported++
		}
		return nil
	})
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# crash: %v\n", err)
	os.Exit(1)
}

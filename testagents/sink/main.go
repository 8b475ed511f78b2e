// Command sink is a transport agent that delivers every recipient by
// acknowledging it: ok3, or ok2 and a d line under NOTIFY=SUCCESS.
//
//	sink -c channel [-log FILE] [host]
//
// -log appends "inum/offset user" per delivered recipient with O_APPEND,
// before the mark, so crash tests can count deliveries and duplicates.
package main

import (
	"flag"
	"fmt"
	"os"

	"zsched/ta"
	"zsched/testagents"
)

func main() {
	fs := flag.NewFlagSet("sink", flag.ContinueOnError)
	logPath := fs.String("log", "", "append one line per delivered recipient to this file")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	var s testagents.Sink
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		s.Log = f
	}
	if err := a.Serve(s.Deliver); err != nil {
		fail(err)
	}
}

// fail reports on stderr as a '#' line, which the scheduler logs instead of
// counting it as a misformed report (stderr shares the protocol stream).
func fail(err error) {
	fmt.Fprintf(os.Stderr, "# sink: %v\n", err)
	os.Exit(1)
}

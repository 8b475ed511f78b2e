// Command sink is a transport agent that delivers every recipient by
// acknowledging it: ok3, or ok2 and a d line under NOTIFY=SUCCESS.
//
//	sink -c channel [-log FILE] [-warn TEXT] [-instant] [host]
//
// -instant writes no lock, only each recipient's mark (ta.Agent.Instant):
// a null agent's lock is overwritten within the job, unseen, and costs a
// write a job; but docs/ta-protocol.md §7.2 wants every agent's locks
// held while it works, and the conformance kit's lock case fails such an
// agent, so it is off by default (for measuring what the lock costs).
// -log appends "inum/offset user" per delivered recipient with O_APPEND,
// before the mark, so crash tests can count deliveries and duplicates.
// -warn writes TEXT to stderr with every job, as a real agent may warn
// about its configuration: in socketpair mode it lands in the protocol
// stream, a line that is not protocol.
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
	warn := fs.String("warn", "", "write this line to stderr with every job")
	instant := fs.Bool("instant", false, "write no locks, only the marks (ta.Agent.Instant; departs from the protocol's §7.2)")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	a.Instant = *instant
	// The sink never reads the message: a stat tells it is there.
	a.NoBody = true
	if a.Instant && *logPath != "" {
		// A delivery that writes a line elsewhere first is not instant:
		// crash tests count those lines, and the locks keep them honest.
		fail(fmt.Errorf("-instant and -log exclude each other"))
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
	deliver := s.Deliver
	if *warn != "" {
		deliver = func(d *ta.Delivery) []ta.Result {
			fmt.Fprintln(os.Stderr, *warn)
			return s.Deliver(d)
		}
	}
	if err := a.Serve(deliver); err != nil {
		fail(err)
	}
}

// fail reports on stderr as a '#' line, which the scheduler logs instead of
// counting it as a misformed report (stderr shares the protocol stream).
func fail(err error) {
	fmt.Fprintf(os.Stderr, "# sink: %v\n", err)
	os.Exit(1)
}

// Command sink is a transport agent that delivers every recipient by
// acknowledging it: ok3, or ok2 and a d line under NOTIFY=SUCCESS.
//
//	sink -c channel [-log FILE] [-warn TEXT] [host]
//
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
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	// Delivering is acknowledging: nothing happens between a lock and
	// the mark, so the sink writes the mark alone (ta.Agent.Instant).
	// With -log a delivery writes a line elsewhere first; crash tests
	// count those, and the sink then locks as libta does.
	a.Instant = *logPath == ""
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

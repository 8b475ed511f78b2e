// Command slow is sink with a delay before each recipient, a stand-in for a
// slow destination.
//
//	slow -c channel [-d 20ms] [host]
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"zsched/ta"
	"zsched/testagents"
)

func main() {
	fs := flag.NewFlagSet("slow", flag.ContinueOnError)
	delay := fs.Duration("d", 20*time.Millisecond, "delay per recipient")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	s := testagents.Sink{Delay: *delay}
	if err := a.Serve(s.Deliver); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# slow: %v\n", err)
	os.Exit(1)
}

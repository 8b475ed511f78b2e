// Command hang takes its first job, locks the recipients and never
// answers: it blocks forever, the agent a scheduler's jobtimeout must kill.
// With -ignore-term it also ignores SIGTERM, so only SIGKILL ends it.
//
//	hang -c channel [-ignore-term] [host]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"zsched/ta"
)

func main() {
	fs := flag.NewFlagSet("hang", flag.ContinueOnError)
	ignoreTerm := fs.Bool("ignore-term", false, "ignore SIGTERM")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	err = a.Serve(func(*ta.Delivery) []ta.Result {
		// Waiting for a signal that never comes keeps the runtime from
		// calling this a deadlock, which a bare select{} would be.
		never := make(chan os.Signal, 1)
		signal.Notify(never, syscall.SIGUSR2)
		for {
			<-never
		}
	})
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# hang: %v\n", err)
	os.Exit(1)
}

// Command deaf says #hungry and then never reads its input again. Alone it
// stays silent with a job outstanding (a scheduler's jobtimeout must kill
// it); with -flood it keeps saying #hungry without reading, so a scheduler
// that answers each one writes into a pipe nobody drains: its write backlog
// grows, and it must neither block nor grow it without bound.
//
//	deaf -c channel [-flood] [host]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"zsched/ta"
)

func main() {
	fs := flag.NewFlagSet("deaf", flag.ContinueOnError)
	flood := fs.Bool("flood", false, "keep writing #hungry without reading")
	if _, err := ta.ParseFlags(fs, os.Args[1:], ""); err != nil {
		fmt.Fprintf(os.Stderr, "# deaf: %v\n", err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	out.WriteString("#hungry\n")
	if err := out.Flush(); err != nil {
		os.Exit(1)
	}
	if *flood {
		for {
			out.WriteString("#hungry\n")
			if err := out.Flush(); err != nil {
				os.Exit(1)
			}
		}
	}
	// Wait for a signal that never comes (a bare select{} is a deadlock
	// to the runtime).
	never := make(chan os.Signal, 1)
	signal.Notify(never, syscall.SIGUSR2)
	for {
		<-never
	}
}

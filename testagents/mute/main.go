// Command mute takes one job, closes its standard output and error and
// keeps running: still reading its input, never saying anything again. Its
// output stream stays open through the other descriptors it shares (with
// stdio = "socketpair" stdin is the same socket), so a scheduler sees no
// EOF, only silence — its jobtimeout must kill it.
//
//	mute -c channel [host]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"

	"zsched/ta"
)

func main() {
	fs := flag.NewFlagSet("mute", flag.ContinueOnError)
	if _, err := ta.ParseFlags(fs, os.Args[1:], ""); err != nil {
		fmt.Fprintf(os.Stderr, "# mute: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprint(os.Stdout, "#hungry\n")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return
	}
	os.Stdout.Close()
	os.Stderr.Close()
	// Keep reading until the input ends (an End from the scheduler), then
	// linger like a wedged process: only a kill ends it.
	io.Copy(io.Discard, in)
	select {}
}

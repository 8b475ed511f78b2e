// Command longline answers its first job with one line of 100 KiB, over the
// protocol's 64 KiB limit, then carries on as a well-behaved agent that
// reports nothing. A scheduler must neither buffer without bound nor take
// the line's tail for protocol: it kills the agent and reschedules the job.
//
//	longline -c channel [host]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"zsched/ta"
)

func main() {
	fs := flag.NewFlagSet("longline", flag.ContinueOnError)
	if _, err := ta.ParseFlags(fs, os.Args[1:], ""); err != nil {
		fmt.Fprintf(os.Stderr, "# longline: %v\n", err)
		os.Exit(1)
	}
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for {
		out.WriteString("#hungry\n")
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
		line, err := in.ReadString('\n')
		if err != nil || line == "\n" {
			return
		}
		if strings.TrimSuffix(line, "\n") == "#idle" {
			continue
		}
		// The tail of the long line looks like a report, so that a scheduler
		// that split the line instead of rejecting it would be caught.
		p, _, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		out.Write(bytes.Repeat([]byte{'#'}, 100<<10))
		fmt.Fprintf(out, "%s/1\t\tok3 tail of a long line\n", p)
	}
}

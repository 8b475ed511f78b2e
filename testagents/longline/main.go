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
	"fmt"
	"os"

	"zsched/testagents"
)

func main() {
	err := testagents.Raw("longline", os.Args[1:], os.Stdin, os.Stdout, func(p string, out *bufio.Writer) {
		// The tail of the long line looks like a report, so that a scheduler
		// that split the line instead of rejecting it would be caught.
		out.Write(bytes.Repeat([]byte{'#'}, 100<<10))
		fmt.Fprintf(out, "%s/1\t\tok3 tail of a long line\n", p)
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "# %v\n", err)
		os.Exit(1)
	}
}

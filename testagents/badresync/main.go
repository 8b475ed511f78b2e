// Command badresync answers every job with #resync lines naming files
// outside the postoffice — an absolute path and relative ones climbing out
// with ".." — then with #resync of its own job path prefixed by "../", and
// reports nothing. A scheduler must never open, read or touch those paths.
//
//	badresync -c channel [host]
package main

import (
	"bufio"
	"fmt"
	"os"

	"zsched/testagents"
)

func main() {
	err := testagents.Raw("badresync", os.Args[1:], os.Stdin, os.Stdout, func(p string, out *bufio.Writer) {
		fmt.Fprintf(out, "#resync /etc/passwd\n#resync ../x\n#resync ../../../../etc/shadow\n#resync ../transport/%s\n#resync /%s\n", p, p)
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "# %v\n", err)
		os.Exit(1)
	}
}

// Command badresync answers every job with #resync lines naming files
// outside the postoffice — an absolute path and relative ones climbing out
// with ".." — then with #resync of its own job path prefixed by "../", and
// reports nothing. A scheduler must never open, read or touch those paths.
//
//	badresync -c channel [host]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"

	"zsched/ta"
)

func main() {
	fs := flag.NewFlagSet("badresync", flag.ContinueOnError)
	if _, err := ta.ParseFlags(fs, os.Args[1:], ""); err != nil {
		fmt.Fprintf(os.Stderr, "# badresync: %v\n", err)
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
		line = strings.TrimSuffix(line, "\n")
		if line == "#idle" {
			continue
		}
		p, _, _ := strings.Cut(line, "\t")
		fmt.Fprintf(out, "#resync /etc/passwd\n#resync ../x\n#resync ../../../../etc/shadow\n#resync ../transport/%s\n#resync /%s\n", p, p)
	}
}

// Command garbage breaks the protocol on purpose, to test how a scheduler
// copes: each job line is answered with misformed lines (one without a
// TAB, one with an unknown status word, one with a bad inum) and, on every
// second job, with two #hungry instead of one. It never touches the
// control file.
//
//	garbage -c channel [host]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path"
	"strings"

	"zsched/ta"
)

func main() {
	fs := flag.NewFlagSet("garbage", flag.ContinueOnError)
	if _, err := ta.ParseFlags(fs, os.Args[1:], ""); err != nil {
		fmt.Fprintf(os.Stderr, "# garbage: %v\n", err)
		os.Exit(1)
	}
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for job := 0; ; {
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
		base := path.Base(p)
		inum := base[:len(base)-len(strings.TrimLeft(base, "0123456789"))]
		if inum == "" {
			inum = "0"
		}
		fmt.Fprintf(out, "garbage without any tab for %s\n", p)
		fmt.Fprintf(out, "%s/121\t\tfrobnicate is not a status word\n", inum)
		fmt.Fprintf(out, "x%s/121\t\tok3 the inum is not a number\n", inum)
		if job%2 == 1 {
			out.WriteString("#hungry\n")
		}
		job++
	}
}

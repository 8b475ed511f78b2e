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
	"fmt"
	"os"
	"path"
	"strings"

	"zsched/testagents"
)

func main() {
	job := 0
	err := testagents.Raw("garbage", os.Args[1:], os.Stdin, os.Stdout, func(p string, out *bufio.Writer) {
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
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "# %v\n", err)
		os.Exit(1)
	}
}

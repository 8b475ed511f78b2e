// Command wrongreport answers every job with reports that are not its own:
// the first recipient of another control file in the spool (as delivered),
// a message that does not exist, and an offset of its own message that is
// no r line. It locks and marks nothing, so a scheduler that believed any
// of them would lose or misattribute a recipient.
//
//	wrongreport -c channel [host]
package main

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"strings"

	"zsched/ctlfile"
	"zsched/testagents"
)

func main() {
	err := testagents.Raw("wrongreport", os.Args[1:], os.Stdin, os.Stdout, func(p string, out *bufio.Writer) {
		inum := digits(path.Base(p))
		if other, off, ok := another(p); ok {
			fmt.Fprintf(out, "%s/%d\t\tok3 not my job: another message's recipient\n", other, off)
		}
		fmt.Fprintf(out, "987654321/%d\t\tok3 a message that does not exist\n", 42)
		fmt.Fprintf(out, "%s/%d\t\tok3 an offset that is no r line\n", inum, 1<<30)
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "# %v\n", err)
		os.Exit(1)
	}
}

// another returns the inum and first recipient offset of a control file
// other than job in the working directory (the spool's transport/).
func another(job string) (string, int64, bool) {
	ents, _ := os.ReadDir(".")
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || name == path.Base(job) || digits(name) == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		f, err := ctlfile.Parse(name, b)
		if err != nil || len(f.Rcpts) == 0 {
			continue
		}
		return digits(name), f.Rcpts[0].Offset, true
	}
	return "", 0, false
}

func digits(s string) string {
	return s[:len(s)-len(strings.TrimLeft(s, "0123456789"))]
}

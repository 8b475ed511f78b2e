package testagents

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strings"

	"zsched/ta"
)

// Raw runs the bare #hungry loop for the agents that exist to break the
// protocol (garbage, badresync, wrongreport, longline), which cannot use
// ta.Agent.Serve: it parses the usual -c channel [host] arguments, prints
// #hungry before every read, skips #idle, returns at an empty line or EOF,
// and hands each job line's path to answer, which writes whatever the agent
// is meant to get wrong.
func Raw(name string, args []string, in io.Reader, out io.Writer, answer func(path string, w *bufio.Writer)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if _, err := ta.ParseFlags(fs, args, ""); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	for {
		w.WriteString("#hungry\n")
		if err := w.Flush(); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil || line == "\n" {
			return nil
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "#idle" {
			continue
		}
		p, _, _ := strings.Cut(line, "\t")
		answer(p, w)
	}
}

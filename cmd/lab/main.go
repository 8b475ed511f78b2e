// Command lab runs zsched's experiments and prints their tables.
//
//	lab feedback [-real] [flags]   Postfix's active-limiter experiment (SCHEDULER_README)
//	lab ceiling [-sim]             the learned concurrency ceiling beside Postfix's 1/N
//	lab cluster [-real]            nodes with their own windows beside one shared window
//	lab soak [-minutes N]          issue 16's hostile battery against a live scheduler
//	lab smtp-vs-postfix [flags]    one queue delivered over SMTP by zsched and by Postfix
//	lab null-vs-postfix [flags]    one queue drained by zsched's and Postfix's null agents
//
// Each subcommand is one function in its own file; add one by adding a case.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"zsched/lab"
)

const usage = `usage: lab COMMAND [flags]

commands:
  feedback   concurrency feedback against an active server limiter (Postfix
             SCHEDULER_README): in simulation, or with -real end to end
  postfix    the same experiment against a real Postfix smtpd through smtp-ta
  ceiling    the learned concurrency ceiling beside Postfix's 1/N feedback: limiter,
             unlimited server, noisy server, changing limit; sim and (unless -sim) real
  cluster    nodes sharing one destination's window (issue 20): N real cores in
             simulation on one clock, or with -real scheduler processes over a private
             redis-server; local windows beside the shared window
  simulate-validate
             scheduler simulate's predictions beside real runs: a recorded run, a knob
             changed, and a Postfix maillog (about 10 minutes)
  soak       the hostile battery against a live scheduler for -minutes N, then a final
             drain: prints lost, duplicated and stranded recipients
  smtp-vs-postfix  one queue delivered over SMTP to smtp-sink by zsched + smtp-ta and by
             Postfix's qmgr + smtp(8), interleaved: rates, CPU per recipient, ratio
  null-vs-postfix  the same queue drained by zsched + testagents/sink and by Postfix's
             qmgr + discard(8)
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			msg := err.Error()
			if !strings.HasPrefix(msg, "lab: ") {
				msg = "lab: " + msg
			}
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "feedback":
		return feedback(args[1:], stdout, stderr)
	case "postfix":
		return postfixLab(args[1:], stdout, stderr)
	case "ceiling":
		return ceiling(args[1:], stdout, stderr)
	case "cluster":
		return clusterLab(args[1:], stdout, stderr)
	case "simulate-validate":
		return simulateValidate(args[1:], stdout, stderr)
	case "soak":
		return soak(args[1:], stdout, stderr)
	case "smtp-vs-postfix":
		return versus(lab.SMTP, args[1:], stdout, stderr)
	case "null-vs-postfix":
		return versus(lab.Null, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

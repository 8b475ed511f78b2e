package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"zsched/internal/agentbin"
	"zsched/lab"
	"zsched/postfix"
)

// versus runs "smtp-vs-postfix" (t = lab.SMTP) or "null-vs-postfix"
// (lab.Null): one queue drained by zsched and by Postfix, interleaved, and
// the table of rates, CPU per recipient and their ratio.
func versus(t lab.Transport, args []string, stdout, stderr io.Writer) error {
	name := t.String() + "-vs-postfix"
	fs := flag.NewFlagSet("lab "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	v := lab.Versus{Transport: t}
	v.BenchQueue.Flags(fs)
	fs.IntVar(&v.Runs, "runs", 3, "drains per side, interleaved; the table gives their medians")
	fs.IntVar(&v.Maxring, "maxring", 4, "zsched: agents in the ring (maxring)")
	fs.IntVar(&v.Overfeed, "overfeed", 32, "zsched: job lines outstanding per agent beyond one (overfeed)")
	fs.StringVar(&v.Feed, "feed", "thread", "zsched: what an agent is fed after a job (the clause's feed): thread, or message for the same message's other recipients first")
	fs.IntVar(&v.Procs, "procs", 1, "zsched: GOMAXPROCS of the agents (0: Go's default, one per CPU)")
	fs.DurationVar(&v.Timeout, "timeout", time.Hour, "give up on a drain after this long")
	sched := fs.String("scheduler", "", "scheduler `program` (default: built from this module)")
	agent := fs.String("agent", "", "agent `program` (default: built from this module: smtp-ta or testagents/sink)")
	route := "domains"
	if t == lab.SMTP {
		fs.StringVar(&route, "route", "domains", "`domains`: every domain its own destination (Postfix looks its name up in an etc/hosts); relay: all mail through one relay, Postfix's relayhost")
	}
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	fs.StringVar(&v.CPUProfile, "cpuprofile", "", "have zsched's scheduler write the CPU profile of round N's drain to `file`.N")
	fs.BoolVar(&v.Keep, "keep", false, "keep each run's directory: the scheduler's log, Postfix's maillog")
	fs.StringVar(&v.Only, "only", "", "run one side alone, `zsched` or `postfix` (to profile it)")
	fs.Func("agent-arg", "add `arg` to the agent's command line (repeat the flag for more)", func(s string) error {
		v.AgentArgs = append(v.AgentArgs, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	switch route {
	case "domains":
	case "relay":
		v.Relay = true
	default:
		return fmt.Errorf("%s: -route %q: want domains or relay", name, route)
	}
	if err := postfix.Available(); err != nil {
		return err
	}
	var bins agentbin.Set
	defer bins.Remove()
	agentPkg := "zsched/testagents/sink"
	if t == lab.SMTP {
		agentPkg = "zsched/cmd/smtp-ta"
	}
	for _, p := range []struct {
		flag *string
		pkg  string
	}{{sched, "zsched/cmd/scheduler"}, {agent, agentPkg}} {
		var err error
		if *p.flag != "" {
			if *p.flag, err = filepath.Abs(*p.flag); err != nil {
				return err
			}
			continue
		}
		if *p.flag, err = bins.Program(p.pkg); err != nil {
			return err
		}
	}
	v.Scheduler, v.Agent = *sched, *agent
	if !*quiet {
		v.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := v.Run(ctx)
	if err != nil {
		return err
	}
	return lab.WriteVersus(stdout, rep)
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"zsched/internal/agentbin"
	"zsched/lab"
)

// ceiling runs the learned-ceiling experiments (issue 10) beside plain
// Postfix 1/N feedback, in simulation and end to end, and prints one table.
func ceiling(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab ceiling", flag.ContinueOnError)
	fs.SetOutput(stderr)
	simOnly := fs.Bool("sim", false, "simulation only: skip the runs with real processes")
	verbose := fs.Bool("v", false, "print the scheduler's log of the real runs (info and above) to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("ceiling: unexpected argument %q", fs.Arg(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rows, err := lab.RunCeiling(ctx, "sim", lab.Experiments("sim"), "", nil)
	if err != nil {
		return err
	}
	if !*simOnly {
		var bins agentbin.Set
		defer bins.Remove()
		agents, err := bins.Agents()
		if err != nil {
			return err
		}
		if agents["limited"] == "" {
			return fmt.Errorf("ceiling: testagents/limited was not built")
		}
		var log io.Writer
		if *verbose {
			log = stderr
		}
		real, err := lab.RunCeiling(ctx, "real", lab.Experiments("real"), agents["limited"], log)
		if err != nil {
			return err
		}
		rows = append(rows, real...)
	}
	fmt.Fprintln(stdout, "Learned concurrency ceiling (learned_ceiling, ceiling_probe_factor 10) beside Postfix 1/N feedback")
	fmt.Fprintln(stdout, "on the same run: 1000 messages × 2 recipients to one host (3000 for the limit change), client")
	fmt.Fprintln(stdout, "limit 20, initial 5; sim: 1 s per recipient, fake clock; real: the daemon and testagents/limited,")
	fmt.Fprintln(stdout, "20 ms per recipient. First pass only; window = the window after each delivery's feedback.")
	fmt.Fprintln(stdout)
	return lab.WriteCeilingTable(stdout, rows)
}

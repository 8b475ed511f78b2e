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
)

// soak runs issue 16's hostile battery against a live scheduler for N
// minutes and prints what became of every recipient (lab.RunSoak).
func soak(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	minutes := fs.Float64("minutes", 2, "how long the battery runs")
	drain := fs.Duration("drain", 3*time.Minute, "at most this long for the final drain")
	rate := fs.Int("rate", 40, "messages per second, all router writers together")
	writers := fs.Int("writers", 2, "router-style writers")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the battery's choices")
	dir := fs.String("dir", "", "work directory (default: a new one under $TMPDIR); kept, with the scheduler's log")
	sched := fs.String("scheduler", "", "scheduler `program` (default: build ./cmd/scheduler)")
	feed := fs.String("feed", "", "the clauses' `feed`: thread or message (default: the scheduler's, thread)")
	sigkill := fs.Bool("sigkill", false, "SIGKILL the scheduler every 40–70 s of the battery (it is started again)")
	quiet := fs.Bool("q", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("soak: unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "zsched-soak-")
		if err != nil {
			return err
		}
		*dir = d
	}
	bins := agentbin.Set{In: filepath.Join(*dir, "bin")} // kept with the run's results
	agent, err := bins.Program("zsched/lab/soakagent")
	if err != nil {
		return err
	}
	if *sched == "" {
		if *sched, err = bins.Program("zsched/cmd/scheduler"); err != nil {
			return err
		}
	}
	s := lab.Soak{
		Duration:  time.Duration(*minutes * float64(time.Minute)),
		Drain:     *drain,
		Rate:      *rate,
		Writers:   max(*writers, 1),
		Seed:      *seed,
		Feed:      *feed,
		SIGKILL:   *sigkill,
		Scheduler: *sched,
		Agent:     agent,
		Dir:       *dir,
	}
	if !*quiet {
		s.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := lab.RunSoak(ctx, s)
	res.Report(stdout, s)
	return err
}

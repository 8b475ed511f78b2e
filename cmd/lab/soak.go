package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

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
	bin := filepath.Join(*dir, "bin")
	pkgs := []string{"./lab/soakagent"}
	if *sched == "" {
		pkgs = append(pkgs, "./cmd/scheduler")
		*sched = filepath.Join(bin, "scheduler")
	}
	if err := build(bin, pkgs...); err != nil {
		return err
	}
	s := lab.Soak{
		Duration:  time.Duration(*minutes * float64(time.Minute)),
		Drain:     *drain,
		Rate:      *rate,
		Writers:   max(*writers, 1),
		Seed:      *seed,
		Scheduler: *sched,
		Agent:     filepath.Join(bin, "soakagent"),
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

// build compiles pkgs into dir at the module's root.
func build(dir string, pkgs ...string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return fmt.Errorf("run lab soak inside the zsched module")
	}
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = filepath.Dir(gomod)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"zsched/internal/agentbin"
	"zsched/lab"
)

// feedback runs the active-limiter experiment for each feedback style and
// prints the table.
func feedback(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab feedback", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endToEnd := fs.Bool("real", false, "run end to end: the daemon with real agent processes (time scaled by -service)")
	messages := fs.Int("messages", 1000, "messages, all to one destination")
	rcpts := fs.Int("rcpts", 2, "recipients per message (one delivery each)")
	client := fs.Int("client", 20, "client concurrency limit (maxthr)")
	server := fs.Int("server", 5, "server concurrency limit")
	initial := fs.Int("initial", 5, "initial concurrency")
	service := fs.Duration("service", 0, "service time per recipient (default 1s in simulation, 20ms with -real)")
	styles := fs.String("styles", strings.Join(lab.Styles, ","), "feedback styles, comma-separated")
	seed := fs.Int64("seed", 1, "random seed")
	verbose := fs.Bool("v", false, "with -real, print the scheduler's log (info and above) to stderr")
	timeout := fs.Duration("timeout", 5*time.Minute, "with -real, give up on a style after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("feedback: unexpected argument %q", fs.Arg(0))
	}
	if *service == 0 {
		*service = time.Second
		if *endToEnd {
			*service = 20 * time.Millisecond
		}
	}
	var limited string
	if *endToEnd {
		var bins agentbin.Set
		defer bins.Remove()
		agents, err := bins.Agents()
		if err != nil {
			return err
		}
		limited = agents["limited"]
		if limited == "" {
			return fmt.Errorf("feedback: testagents/limited was not built")
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var log io.Writer
	if *verbose {
		log = stderr
	}
	var rs []lab.Result
	for _, st := range strings.Split(*styles, ",") {
		l := lab.README(strings.TrimSpace(st))
		l.Messages, l.Rcpts, l.ClientLimit, l.ServerLimit, l.Initial = *messages, *rcpts, *client, *server, *initial
		l.Jitter = l.Jitter * time.Duration(*service) / time.Duration(l.Service)
		l.Service, l.Seed = *service, *seed
		if _, err := l.Theoretical(); err != nil {
			return err
		}
		var r lab.Result
		var err error
		if *endToEnd {
			c, cancel := context.WithTimeout(ctx, *timeout)
			r, err = lab.Real(c, l, limited, log)
			cancel()
		} else {
			r, err = lab.Sim(l)
		}
		if err != nil {
			return err
		}
		if r.Pending > 0 {
			return fmt.Errorf("feedback %s: %d recipients left undelivered after draining", l.Feedback, r.Pending)
		}
		rs = append(rs, r)
	}
	fmt.Fprintf(stdout, "Active server concurrency limiter: %d messages × %d recipients to one host, %v per recipient",
		*messages, *rcpts, *service)
	if *endToEnd {
		fmt.Fprintln(stdout, ", real agent processes (testagents/limited).")
	} else {
		fmt.Fprintln(stdout, ", simulated (fake clock).")
	}
	fmt.Fprintln(stdout, "First pass only, as the README measures: deferred = recipients deferred at their first")
	fmt.Fprintln(stdout, "attempt; concurrency = the window after each feedback event.")
	fmt.Fprintln(stdout)
	return lab.WriteTable(stdout, rs)
}

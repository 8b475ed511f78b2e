package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"zsched/internal/agentbin"
	"zsched/lab"
)

// clusterLab runs the cluster experiment (issue 20): nodes with their own
// windows beside nodes sharing one, against a destination with a session
// limit: in simulation (N real cores on one fake clock), or with -real as
// real scheduler processes over a private redis-server.
func clusterLab(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endToEnd := fs.Bool("real", false, "run real nodes: the built scheduler, testagents/limited, a private redis-server on 127.0.0.1")
	messages := fs.Int("messages", 0, "one-recipient messages per node (default 400 in simulation, 150 with -real)")
	service := fs.Duration("service", 20*time.Millisecond, "service time per message")
	retry := fs.Duration("retry", time.Second, "retry time of a refused message (the clause interval)")
	seed := fs.Int64("seed", 1, "random seed (simulation)")
	runs := fs.Int("runs", 3, "with -real, runs of each setting, interleaved; the table shows medians")
	verbose := fs.Bool("v", false, "with -real, print the nodes' logs to stderr")
	timeout := fs.Duration("timeout", 5*time.Minute, "with -real, give up on a run after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("cluster: unexpected argument %q", fs.Arg(0))
	}
	if *endToEnd {
		if *messages == 0 {
			*messages = 150
		}
		return clusterReal(*messages, *service, *retry, max(*runs, 1), *verbose, *timeout, stdout, stderr)
	}
	if *messages == 0 {
		*messages = 400
	}
	var rs []lab.ClusterResult
	for _, c := range lab.ClusterRuns(*messages, *seed) {
		c.Service, c.Jitter, c.Refusal, c.Retry = *service, *service/10, *service/10, *retry
		r, err := lab.RunCluster(c)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	fmt.Fprintf(stdout, "Cluster windows: N nodes × %d one-recipient messages each to one destination that accepts K\n", *messages)
	fmt.Fprintf(stdout, "sessions and refuses more (421, %v); %v per message (+ up to %v), refused messages retried\n", *service/10, *service, *service/10)
	fmt.Fprintf(stdout, "after %v; clause defaults (maxthr 20, initial 5, 1/N, failed_cohort_limit 1, learned_ceiling, slow_start).\n", *retry)
	fmt.Fprintln(stdout, "local: each node its own windows; shared: one window over window.Board (the Redis book's")
	fmt.Fprintln(stdout, "in-memory twin). Each node a real core with simulated agents, all on one fake clock (sim.Cluster).")
	fmt.Fprintln(stdout)
	return lab.WriteClusterTable(stdout, rs)
}

// clusterReal runs the real-process settings runs times, interleaved,
// and prints their medians.
func clusterReal(messages int, service, retry time.Duration, runs int, verbose bool, timeout time.Duration,
	stdout, stderr io.Writer) error {
	var bins agentbin.Set
	defer bins.Remove()
	agents, err := bins.Agents()
	if err != nil {
		return err
	}
	scheduler, err := bins.Program("zsched/cmd/scheduler")
	if err != nil {
		return err
	}
	p := lab.Programs{Scheduler: scheduler, Limited: agents["limited"]}
	if p.Limited == "" {
		return fmt.Errorf("cluster: testagents/limited was not built")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var log io.Writer
	if verbose {
		log = stderr
	}
	settings := lab.ClusterRealRuns(messages)
	all := make([][]lab.ClusterResult, len(settings))
	load := []string{lab.LoadAvg()}
	for run := 0; run < runs; run++ {
		for i, c := range settings {
			c.Service, c.Retry = service, retry
			rctx, cancel := context.WithTimeout(ctx, timeout)
			r, err := lab.RunClusterReal(rctx, c, p, log)
			cancel()
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, "run %d: %d nodes, limit %d, shared %v: %.1f %% first-pass refused, %d refusals, %v\n",
				run+1, c.Nodes, c.Limit, c.Shared, 100*r.FirstRefusedRate(), r.Refusals, r.Drain.Round(10*time.Millisecond))
			all[i] = append(all[i], r)
		}
		load = append(load, lab.LoadAvg())
	}
	rs := make([]lab.ClusterResult, len(all))
	for i := range all {
		rs[i] = lab.MedianCluster(all[i])
	}
	fmt.Fprintf(stdout, "Cluster windows with real processes: 3 scheduler nodes × %d one-recipient messages each to\n", messages)
	fmt.Fprintf(stdout, "testagents/limited (K sessions across the nodes, %v per message), refused messages retried after\n", service)
	fmt.Fprintf(stdout, "%v; clause defaults. local: each node its own windows; shared: [cluster] over a private\n", retry)
	fmt.Fprintf(stdout, "redis-server. Medians of %d interleaved runs; drain is the wall time from starting the nodes.\n", runs)
	fmt.Fprintf(stdout, "Load average (1 min) before and after each round: %v.\n", load)
	fmt.Fprintln(stdout)
	return lab.WriteClusterTable(stdout, rs)
}

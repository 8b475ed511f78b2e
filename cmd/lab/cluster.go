package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"zsched/lab"
)

// clusterLab runs the cluster experiment (issue 20): nodes with their own
// windows beside nodes sharing one, against a destination with a session
// limit, in simulation.
func clusterLab(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	messages := fs.Int("messages", 400, "one-recipient messages per node")
	service := fs.Duration("service", 20*time.Millisecond, "service time per message")
	retry := fs.Duration("retry", time.Second, "retry time of a refused message (the clause interval)")
	seed := fs.Int64("seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("cluster: unexpected argument %q", fs.Arg(0))
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
	fmt.Fprintf(stdout, "after %v; clause defaults (maxthr 20, initial 5, 1/N, failed_cohort_limit 1, learned_ceiling).\n", *retry)
	fmt.Fprintln(stdout, "local: each node its own windows; shared: one window over window.Board (the Redis book's")
	fmt.Fprintln(stdout, "in-memory twin). Each node a real core with simulated agents, all on one fake clock (sim.Cluster).")
	fmt.Fprintln(stdout)
	return lab.WriteClusterTable(stdout, rs)
}

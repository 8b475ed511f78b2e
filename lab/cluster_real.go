package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"zsched/ctlfile"
	"zsched/internal/redistest"
)

// The cluster experiment with real processes: N scheduler processes (the
// built cmd/scheduler), each with its own postoffice, all sending to
// testagents/limited with one slot directory (its limit holds across
// every node's agents), sharing the window through a private
// redis-server on 127.0.0.1 (started and stopped by its pid) or keeping
// their own. Refusals and first attempts refused are counted at the
// destination (limited -refused), deliveries from its -log; drain is the
// wall time from starting the nodes until every recipient was delivered,
// their start included. Peak sessions and denials are not measured (the
// limiter only counts the sessions it accepts): -1.

// Programs are the built programs a real cluster runs.
type Programs struct {
	Scheduler string // cmd/scheduler
	Limited   string // testagents/limited
}

// RunClusterReal runs one setting with real processes until every
// message is delivered (or ctx ends), and measures it. With log set, the
// nodes' logs go there.
func RunClusterReal(ctx context.Context, c ClusterRun, p Programs, log io.Writer) (ClusterResult, error) {
	res := ClusterResult{ClusterRun: c, Peak: -1, Denials: -1}
	dir, err := os.MkdirTemp("", "zsched-cluster-")
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	defer os.RemoveAll(dir)
	var url string
	if c.Shared {
		srv, err := redistest.Start(filepath.Join(dir, "redis"), 0)
		if err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
		defer srv.Stop()
		url = srv.URL(0)
	}
	delivered, refused := filepath.Join(dir, "delivered"), filepath.Join(dir, "refused")
	argv := []string{p.Limited, "-c", "smtp", "-slots", filepath.Join(dir, "slots"), "-k", strconv.Itoa(c.Limit),
		"-d", c.Service.String(), "-log", delivered, "-refused", refused}
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	var configs []string
	for i := 1; i <= c.Nodes; i++ {
		nd := filepath.Join(dir, "node"+strconv.Itoa(i))
		po := filepath.Join(nd, "po")
		doc := fmt.Sprintf("[scheduler]\npostoffice = %q\nscaninterval = \"1s\"\nshutdown_timeout = \"10s\"\nlog_level = \"info\"\n"+
			"[[clause]]\nselect = \"smtp/*\"\ncommand = [%s]\ninterval = %q\nretries = [1]\n%s\n",
			po, strings.Join(q, ", "), c.Retry.String(), c.Clause)
		if c.Shared {
			doc += fmt.Sprintf("[cluster]\nredis = %q\nnode = %q\nlease = %q\n", url, "node"+strconv.Itoa(i), c.Lease.String())
		}
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
		cf := filepath.Join(nd, "scheduler.toml")
		if err := os.WriteFile(cf, []byte(doc), 0o644); err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
		configs = append(configs, cf)
		sp := &ctlfile.Spool{Root: po, NoSync: true}
		if err := sp.Init(); err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
		for m := 0; m < c.Messages; m++ {
			msg := &ctlfile.Message{Sender: "lab@example.org", Header: []byte("Subject: cluster " + strconv.Itoa(m)),
				Body: []byte("cluster experiment\n"), Rcpts: []ctlfile.Address{{Channel: "smtp", Host: host,
					User: "n" + strconv.Itoa(i) + ".u" + strconv.Itoa(m) + "@" + host}}}
			if _, err := sp.Enqueue(msg); err != nil {
				return res, fmt.Errorf("lab: %w", err)
			}
		}
	}

	out := log
	if out == nil {
		out = io.Discard
	}
	var nodes []*exec.Cmd
	stopAll := func() error {
		var errs []error
		for _, cmd := range nodes {
			// SIGTERM: the node stops its agents and releases its leases.
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				errs = append(errs, fmt.Errorf("lab: stop node %d: %w", cmd.Process.Pid, err))
			}
		}
		for _, cmd := range nodes {
			if err := cmd.Wait(); err != nil {
				errs = append(errs, fmt.Errorf("lab: node %d: %w", cmd.Process.Pid, err))
			}
		}
		nodes = nil
		return errors.Join(errs...)
	}
	start := time.Now()
	for _, cf := range configs {
		cmd := exec.Command(p.Scheduler, "run")
		cmd.Env = append(os.Environ(), "ZSCHED_CONFIG="+cf)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			stopAll()
			return res, fmt.Errorf("lab: start a node: %w", err)
		}
		nodes = append(nodes, cmd)
	}
	want := c.Nodes * c.Messages
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n, _, err := countLog(delivered)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			stopAll()
			return res, err
		}
		if n >= want {
			break
		}
		select {
		case <-ctx.Done():
			stopAll()
			return res, fmt.Errorf("lab: %d of %d delivered: %w", n, want, context.Cause(ctx))
		case <-tick.C:
		}
	}
	res.Drain = time.Since(start)
	if err := stopAll(); err != nil {
		return res, err
	}
	n, dups, err := countLog(delivered)
	if err != nil {
		return res, err
	}
	if n != want || dups > 0 {
		return res, fmt.Errorf("lab: %d recipients delivered (%d twice), %d queued", n, dups, want)
	}
	first, _, err := countLog(refused)
	switch {
	case err == nil:
		res.FirstRefused, res.Refusals = first, lineCount(refused)
	case !errors.Is(err, os.ErrNotExist): // none refused: no file
		return res, err
	}
	res.Sessions = want + res.Refusals
	return res, nil
}

// countLog reads a limiter log ("inum/offset user" a line): the distinct
// users, and how many appear more than once.
func countLog(path string) (users, dups int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, u, ok := strings.Cut(sc.Text(), " "); ok {
			seen[u]++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("lab: %w", err)
	}
	for _, n := range seen {
		if n > 1 {
			dups++
		}
	}
	return len(seen), dups, nil
}

// lineCount is how many lines path holds (0 when it cannot be read).
func lineCount(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// ClusterRealRuns are the real-process settings: 3 nodes against 5 and
// against 2 sessions, local windows and the shared window, messages each.
func ClusterRealRuns(messages int) []ClusterRun {
	var rs []ClusterRun
	for _, limit := range []int{5, 2} {
		for _, shared := range []bool{false, true} {
			r := DefaultCluster(3, limit, shared)
			r.Messages, r.Jitter, r.Refusal = messages, 0, 0
			rs = append(rs, r)
		}
	}
	return rs
}

// MedianCluster is the runs of one setting as one: the median of each
// figure on its own (runs of real processes vary).
func MedianCluster(rs []ClusterResult) ClusterResult {
	med := func(f func(ClusterResult) int64) int64 {
		v := make([]int64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	m := rs[0]
	m.FirstRefused = int(med(func(r ClusterResult) int64 { return int64(r.FirstRefused) }))
	m.Refusals = int(med(func(r ClusterResult) int64 { return int64(r.Refusals) }))
	m.Sessions = int(med(func(r ClusterResult) int64 { return int64(r.Sessions) }))
	m.Drain = time.Duration(med(func(r ClusterResult) int64 { return int64(r.Drain) }))
	return m
}

// LoadAvg is the machine's 1-minute load average, "?" when unknown: real
// runs quote it beside their figures.
func LoadAvg() string {
	f, _, _ := strings.Cut(loadavg(), " ")
	return f
}

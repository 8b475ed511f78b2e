package lab

import (
	"fmt"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"time"

	"zsched/config"
	"zsched/report"
	"zsched/sim"
	"zsched/window"
)

// The cluster experiment (issue 20): N scheduler nodes, each with its own
// queue, against one destination that takes K sessions at once, with each
// node's own windows or one window shared by all (window.Board, the
// in-memory twin of the Redis book). The nodes are real cores: one
// simulation each (package sim: the core, simulated agents, a fake
// clock), all on one timeline (sim.Cluster), the shared ones each with
// board.Node(name) as its book. The destination is testagents/limited's:
// at most K sessions at once across every node's agents, one per job; a
// job that finds none free is refused after a short handshake with
// deferall for its recipient (a site failure), the others take the
// service time (plus jitter) and are delivered. A refused recipient waits
// for its retry time (the clause's interval), a dead destination for its
// own. Everything is deterministic for a seed.

// ClusterRun is one run of the cluster experiment.
type ClusterRun struct {
	Nodes    int           // scheduler nodes
	Messages int           // per node, one recipient each, all to the destination
	Limit    int           // sessions the destination accepts at once; it refuses the rest
	Service  time.Duration // per message
	Jitter   time.Duration // most a session takes beyond Service, uniform per session
	Refusal  time.Duration // how long a refused session takes: connect, greeting 421
	Retry    time.Duration // a refused message's retry time (the clause's interval)
	Shared   bool          // one shared window (window.Board), else each node's own windows
	Lease    time.Duration // the Board's lease time
	Clause   string        // scheduler.toml clause keys beyond the defaults
	Seed     int64
}

// DefaultCluster is the setting: 400 one-recipient messages per
// node, 20 ms per message, the clause defaults (maxthr 20, initial 5,
// Postfix 1/N feedback, failed_cohort_limit 1, learned_ceiling,
// slow_start).
func DefaultCluster(nodes, limit int, shared bool) ClusterRun {
	return ClusterRun{Nodes: nodes, Messages: 400, Limit: limit, Service: 20 * time.Millisecond,
		Jitter: 2 * time.Millisecond, Refusal: 2 * time.Millisecond, Retry: time.Second, Shared: shared,
		Lease: 30 * time.Second, Seed: 1}
}

// ClusterResult is what a run measured.
type ClusterResult struct {
	ClusterRun
	FirstRefused int           // messages refused at their first attempt
	Refusals     int           // refused sessions in all
	Sessions     int           // sessions in all, refused ones included
	Drain        time.Duration // until the last message was delivered
	Peak         int           // most sessions open at the destination at once, refused ones included
	Denials      int           // acquires a book denied (no session tried)
}

// Ideal is the drain time of a perfect scheduler: messages × service time
// ÷ sessions.
func (r ClusterResult) Ideal() time.Duration {
	return time.Duration(r.Nodes*r.Messages) * r.Service / time.Duration(r.Limit)
}

// FirstRefusedRate is the share of messages refused at their first attempt.
func (r ClusterResult) FirstRefusedRate() float64 {
	return float64(r.FirstRefused) / float64(r.Nodes*r.Messages)
}

// Met reports whether the run meets the goals for the shared
// window: at most 3 % refused at the first attempt, drained within 1.3×
// the ideal, at most the limit plus one probe in sessions at once.
func (r ClusterResult) Met() bool { return len(r.Missed()) == 0 }

// Missed names the goals the run misses: "refused", "drain", "peak".
func (r ClusterResult) Missed() []string {
	var m []string
	if r.FirstRefusedRate() > 0.03 {
		m = append(m, "refused")
	}
	if float64(r.Drain) > 1.3*float64(r.Ideal()) {
		m = append(m, "drain")
	}
	if r.Peak > r.Limit+1 { // -1: not measured
		m = append(m, "peak")
	}
	return m
}

// limiter is the destination every node sends to: testagents/limited's
// slots, counted across the nodes on the one clock. A session (a job)
// holds a slot until it ends; a refused one holds none, but is open at the
// destination for its handshake (Peak counts it).
type limiter struct {
	ClusterRun
	rng   *rand.Rand
	ends  []time.Time // end of each accepted session in progress
	open  []time.Time // end of every session in progress, refused ones included
	tried map[[2]int64]bool
	res   *ClusterResult
}

func (l *limiter) serve(node int, now time.Time, j sim.Job) sim.Response {
	keep := func(ts []time.Time) []time.Time {
		out := ts[:0]
		for _, e := range ts {
			// A session ending now has ended: its reports are what
			// makes the scheduler feed the next job.
			if e.After(now) {
				out = append(out, e)
			}
		}
		return out
	}
	l.ends, l.open = keep(l.ends), keep(l.open)
	key := [2]int64{int64(node), j.Msg.Inum}
	first := !l.tried[key]
	l.tried[key] = true
	l.res.Sessions++
	st := make([]report.Status, len(j.Rcpts))
	d := l.Service * time.Duration(len(j.Rcpts))
	if l.Jitter > 0 {
		d += time.Duration(l.rng.Int63n(int64(l.Jitter)))
	}
	refused := len(l.ends) >= l.Limit
	if refused {
		d = l.Refusal
		l.res.Refusals++
		if first {
			l.res.FirstRefused++
		}
	} else {
		l.ends = append(l.ends, now.Add(d))
	}
	l.open = append(l.open, now.Add(d))
	l.res.Peak = max(l.res.Peak, len(l.open))
	for i := range st {
		st[i] = report.OK3
		if refused {
			st[i] = report.DeferAll
		}
	}
	if refused {
		return sim.Response{Status: st, Delay: d, Text: "421 4.7.0 too many concurrent sessions"}
	}
	return sim.Response{Status: st, Delay: d}
}

// counting is a book that counts the acquires it denies.
type counting struct {
	window.Book
	denials *int
}

func (c counting) Do(now time.Time, reqs []window.Request) []window.Event {
	evs := c.Book.Do(now, reqs)
	for _, ev := range evs {
		if ev.Kind == window.Denied {
			*c.denials++
		}
	}
	return evs
}

// RunCluster runs one setting until every message is delivered, and
// measures it.
func RunCluster(c ClusterRun) (ClusterResult, error) {
	res := ClusterResult{ClusterRun: c}
	cfg, err := config.Parse("lab.toml", []byte(fmt.Sprintf(
		"[scheduler]\npostoffice = \"/nonexistent\"\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"x\"\ninterval = %q\nretries = [1]\n%s",
		c.Retry.String(), c.Clause)))
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	lim := &limiter{ClusterRun: c, rng: rand.New(rand.NewSource(c.Seed)), tried: make(map[[2]int64]bool), res: &res}
	ns := make([]*sim.Sim, c.Nodes)
	for i := range ns {
		s := sim.New(cfg, nil, c.Seed+int64(i))
		s.Behavior = func(j sim.Job) sim.Response { return lim.serve(i, s.Now, j) }
		ns[i] = s
	}
	cl := sim.NewCluster(ns)
	if c.Shared {
		board := window.NewBoard(c.Lease)
		books := make([]window.Book, c.Nodes)
		for i := range books {
			books[i] = counting{Book: board.Node("node" + strconv.Itoa(i+1)), denials: &res.Denials}
		}
		cl.Share(books, c.Lease/3)
	}
	for _, s := range ns {
		for m := 0; m < c.Messages; m++ {
			s.Enqueue("smtp/" + host + "/u" + strconv.Itoa(m))
		}
	}
	done := func() bool {
		for _, s := range ns {
			if len(s.Completed) < c.Messages {
				return false
			}
		}
		return true
	}
	for !done() {
		if !cl.Step() {
			return res, fmt.Errorf("lab: the cluster stopped with messages left (%d nodes, limit %d)", c.Nodes, c.Limit)
		}
		if err := cl.Err(); err != nil {
			return res, fmt.Errorf("lab: cluster: %w", err)
		}
	}
	res.Drain = cl.Now.Sub(sim.Epoch)
	return res, nil
}

// ClusterRuns are the settings: 3 nodes against 5 and against 2
// sessions, 10 nodes against 5, each with local and with shared windows,
// and beside them one node with all their messages: the scheduler the
// shared window means to make of them.
func ClusterRuns(messages int, seed int64) []ClusterRun {
	var rs []ClusterRun
	for _, s := range [][2]int{{3, 5}, {3, 2}, {10, 5}} {
		for _, shared := range []bool{false, true} {
			r := DefaultCluster(s[0], s[1], shared)
			r.Messages, r.Seed = messages, seed
			rs = append(rs, r)
		}
		one := DefaultCluster(1, s[1], false)
		one.Messages, one.Seed = s[0]*messages, seed
		rs = append(rs, one)
	}
	return rs
}

// measured is n, or "-" when it was not measured (negative).
func measured(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// WriteClusterTable prints results as one table.
func WriteClusterTable(w io.Writer, rs []ClusterResult) error {
	var b strings.Builder
	const head = "%5s %8s %5s  %-7s %9s %8s %9s %8s %7s %6s %7s  %s\n"
	fmt.Fprintf(&b, head, "nodes", "messages", "limit", "windows", "1st-pass", "refusals", "drain", "ideal", "drain/", "peak", "denials", "shared goal")
	fmt.Fprintf(&b, head, "", "in all", "", "", "refused %", "", "", "", "ideal", "sess.", "", "(≤3 %, ≤1.3×, ≤limit+1)")
	b.WriteString(strings.Repeat("-", 113) + "\n")
	for _, r := range rs {
		kind, goal := "local", "-"
		if r.Nodes == 1 {
			kind = "1 node"
		}
		if r.Shared {
			kind, goal = "shared", "met"
			if m := r.Missed(); len(m) > 0 {
				goal = "missed: " + strings.Join(m, ", ")
			}
		}
		fmt.Fprintf(&b, "%5d %8d %5d  %-7s %9.1f %8d %9s %8s %7.2f %6s %7s  %s\n",
			r.Nodes, r.Nodes*r.Messages, r.Limit, kind, 100*r.FirstRefusedRate(), r.Refusals, r.Drain.Round(10*time.Millisecond),
			r.Ideal().Round(10*time.Millisecond), float64(r.Drain)/float64(r.Ideal()), measured(r.Peak), measured(r.Denials), goal)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

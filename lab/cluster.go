package lab

import (
	"fmt"
	"io"
	"math/rand"
	"strconv"
	"strings"
	"time"

	"zsched/config"
	"zsched/sim"
	"zsched/window"
)

// The cluster experiment (issue 20): N scheduler nodes, each with its own
// queue, against one destination that takes K sessions at once, with each
// node's own window (window.Local) or one window shared by all
// (window.Board, the in-memory twin of the Redis book), on a fake clock.
//
// The nodes here are a small model, not the real core: the core is being
// reworked and takes a window.Book only once that lands. Each node starts
// one session per message while its book grants a lease (up to the
// clause's maxthr), judges each session (a refusal is a site failure) and
// releases the lease; a refused message waits for its retry time, as a
// recipient deferred by a site failure does in the core; a dead
// destination waits for its dead-until time. Once the core is wired to a
// Book, this model gives way to N real cores over one Board (as lab.Sim
// runs one).

// ClusterRun is one run of the cluster experiment.
type ClusterRun struct {
	Nodes    int           // scheduler nodes
	Messages int           // per node, one recipient each, all to the destination
	Limit    int           // sessions the destination accepts at once; it refuses the rest
	Service  time.Duration // per message
	Jitter   time.Duration // most a session takes beyond Service, uniform per session
	Refusal  time.Duration // how long a refused session takes: connect, greeting 421
	Retry    time.Duration // a refused message's retry time, and a dead destination's
	Shared   bool          // one shared window (window.Board), else a window per node
	Lease    time.Duration // the Board's lease time
	Clause   string        // scheduler.toml clause keys beyond the defaults
	Seed     int64
}

// DefaultCluster is the setting: 400 one-recipient messages per
// node, 20 ms per message, the clause defaults (maxthr 20, initial 5,
// Postfix 1/N feedback, failed_cohort_limit 1, learned_ceiling).
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
	PeakLeases   int           // most leases held at once, every node's
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
func (r ClusterResult) Met() bool {
	return r.FirstRefusedRate() <= 0.03 && float64(r.Drain) <= 1.3*float64(r.Ideal()) && r.Peak <= r.Limit+1
}

type clusterEvent struct {
	node  int
	kind  uint8 // endSession, retryDue, wakeNode
	lease window.Lease
	msg   int
	ok    bool // endSession: accepted (else refused)
}

const (
	endSession uint8 = iota
	retryDue
	wakeNode
)

type clusterNode struct {
	book    window.Book
	ready   []int // messages due, oldest first
	blocked bool  // denied: waits for Free or its retry time
	tried   map[int]bool
}

var clusterEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// RunCluster runs one setting to the end and measures it.
func RunCluster(c ClusterRun) (ClusterResult, error) {
	res := ClusterResult{ClusterRun: c}
	cfg, err := config.Parse("lab.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"x\"\n"+c.Clause))
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	p := window.ParamsOf(&cfg.Clauses[0])
	d := window.Dest{Channel: "smtp", Host: host}
	rng := rand.New(rand.NewSource(c.Seed))
	board := window.NewBoard(c.Lease)
	ns := make([]*clusterNode, c.Nodes)
	for i := range ns {
		n := &clusterNode{tried: make(map[int]bool, c.Messages)}
		for m := 0; m < c.Messages; m++ {
			n.ready = append(n.ready, m)
		}
		if c.Shared {
			n.book = board.Node("node" + strconv.Itoa(i))
		} else {
			n.book = window.NewLocal()
		}
		ns[i] = n
	}
	var q sim.Timeline[clusterEvent]
	now := clusterEpoch
	open, accepted, leases, left := 0, 0, 0, c.Nodes*c.Messages
	var handle func(i int, evs []window.Event)
	pump := func(i int) {
		n := ns[i]
		for len(n.ready) > 0 && !n.blocked {
			handle(i, n.book.Do(now, []window.Request{{Op: window.Acquire, Dest: d, Params: p}}))
		}
	}
	handle = func(i int, evs []window.Event) {
		n := ns[i]
		for _, ev := range evs {
			switch ev.Kind {
			case window.Granted:
				if len(n.ready) == 0 {
					// Granted after the work ran out (a Free answered
					// late): give it back.
					handle(i, n.book.Do(now, []window.Request{{Op: window.Release, Lease: ev.Lease}}))
					continue
				}
				m := n.ready[0]
				n.ready = n.ready[1:]
				first := !n.tried[m]
				n.tried[m] = true
				leases++
				res.PeakLeases = max(res.PeakLeases, leases)
				res.Sessions++
				open++
				res.Peak = max(res.Peak, open)
				if accepted >= c.Limit {
					res.Refusals++
					if first {
						res.FirstRefused++
					}
					q.Post(now.Add(c.Refusal), clusterEvent{node: i, kind: endSession, lease: ev.Lease, msg: m})
					continue
				}
				accepted++
				dur := c.Service
				if c.Jitter > 0 {
					dur += time.Duration(rng.Int63n(int64(c.Jitter)))
				}
				q.Post(now.Add(dur), clusterEvent{node: i, kind: endSession, lease: ev.Lease, msg: m, ok: true})
			case window.Denied:
				res.Denials++
				n.blocked = true
				if !ev.Retry.IsZero() {
					q.Post(ev.Retry, clusterEvent{node: i, kind: wakeNode})
				}
			case window.Free:
				n.blocked = false
			}
		}
	}
	for i := range ns {
		pump(i)
	}
	for left > 0 {
		if q.Len() == 0 {
			return res, fmt.Errorf("lab: the cluster model stalled with %d messages left", left)
		}
		var e clusterEvent
		now, e = q.Pop()
		n := ns[e.node]
		switch e.kind {
		case endSession:
			open--
			leases--
			if e.ok {
				accepted--
				left--
			} else {
				q.Post(now.Add(c.Retry), clusterEvent{node: e.node, kind: retryDue, msg: e.msg})
			}
			handle(e.node, n.book.Do(now, []window.Request{
				{Op: window.Report, Dest: d, Params: p, Failed: !e.ok, DeadUntil: now.Add(c.Retry)},
				{Op: window.Release, Lease: e.lease}}))
		case retryDue:
			n.ready = append(n.ready, e.msg)
		case wakeNode:
			n.blocked = false
		}
		// Others' releases leave Free events on a shared board.
		for i := range ns {
			handle(i, ns[i].book.Do(now, nil))
			pump(i)
		}
	}
	res.Drain = now.Sub(clusterEpoch)
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
			if !r.Met() {
				goal = "NOT MET"
			}
		}
		fmt.Fprintf(&b, "%5d %8d %5d  %-7s %9.1f %8d %9s %8s %7.2f %6d %7d  %s\n",
			r.Nodes, r.Nodes*r.Messages, r.Limit, kind, 100*r.FirstRefusedRate(), r.Refusals, r.Drain.Round(10*time.Millisecond),
			r.Ideal().Round(10*time.Millisecond), float64(r.Drain)/float64(r.Ideal()), r.Peak, r.Denials, goal)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

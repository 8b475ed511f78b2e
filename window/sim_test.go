package window_test

import (
	"container/heap"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"zsched/window"
)

// A small deterministic model of N nodes sending to one destination behind
// a limiter (a fake server that accepts K sessions and refuses the rest
// after a short handshake), on a fake clock. Each node starts a session
// per message while its book grants one, reports each session's outcome
// and releases its lease. It is enough to see whether the book keeps the
// cluster's sessions within the limit.

type simEvent struct {
	at    time.Time
	seq   int
	node  int
	kind  int // evEnd, evWake
	lease window.Lease
	ok    bool // evEnd: the session was accepted
}

const (
	evEnd = iota
	evWake
)

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simNode struct {
	book    window.Book
	ready   int  // messages due now
	blocked bool // denied: wait for Free or the retry time
	left    int  // messages not yet delivered
}

type simResult struct {
	peakLeases, peakServer, refused, attempts int
	drain                                     time.Duration
}

// simulate runs nodes nodes of msgs messages each against a server of
// limit sessions: shared over one Board, or each node with a Local.
func simulate(t *testing.T, p window.Params, nodes, msgs, limit int, shared bool, seed int64) simResult {
	t.Helper()
	const service, handshake, retry = 20 * time.Millisecond, 2 * time.Millisecond, time.Second
	rng := rand.New(rand.NewSource(seed))
	board := window.NewBoard(30 * time.Second)
	ns := make([]*simNode, nodes)
	for i := range ns {
		ns[i] = &simNode{ready: msgs, left: msgs}
		if shared {
			ns[i].book = board.Node(fmt.Sprint("n", i))
		} else {
			ns[i].book = window.NewLocal()
		}
	}
	var q simQueue
	seq := 0
	push := func(e simEvent) { seq++; e.seq = seq; heap.Push(&q, e) }
	now := epoch
	var res simResult
	leases, open := 0, 0
	var handle func(i int, evs []window.Event)
	pump := func(i int) {
		n := ns[i]
		for n.ready > 0 && !n.blocked {
			handle(i, n.book.Do(now, []window.Request{{Op: window.Acquire, Dest: dest, Params: p}}))
		}
	}
	handle = func(i int, evs []window.Event) {
		n := ns[i]
		for _, ev := range evs {
			switch ev.Kind {
			case window.Granted:
				n.ready--
				leases++
				res.peakLeases = max(res.peakLeases, leases)
				res.attempts++
				if open >= limit {
					res.refused++
					push(simEvent{at: now.Add(handshake), node: i, kind: evEnd, lease: ev.Lease})
					continue
				}
				open++
				res.peakServer = max(res.peakServer, open)
				d := service + time.Duration(rng.Int63n(int64(service/10)))
				push(simEvent{at: now.Add(d), node: i, kind: evEnd, lease: ev.Lease, ok: true})
			case window.Denied:
				n.blocked = true
				if !ev.Retry.IsZero() {
					push(simEvent{at: ev.Retry, node: i, kind: evWake})
				}
			case window.Free:
				n.blocked = false
			}
		}
	}
	for i := range ns {
		pump(i)
	}
	left := nodes * msgs
	for q.Len() > 0 && left > 0 {
		e := heap.Pop(&q).(simEvent)
		now = e.at
		n := ns[e.node]
		switch e.kind {
		case evEnd:
			if e.ok {
				open--
				n.left--
				left--
			} else {
				push(simEvent{at: now.Add(retry), node: e.node, kind: evWake, ok: true})
			}
			leases--
			handle(e.node, n.book.Do(now, []window.Request{
				{Op: window.Report, Dest: dest, Params: p, Failed: !e.ok, DeadUntil: now.Add(retry)},
				{Op: window.Release, Lease: e.lease}}))
		case evWake:
			if e.ok { // a refused message's retry time
				n.ready++
			}
			n.blocked = false
		}
		for i := range ns {
			if shared {
				handle(i, ns[i].book.Do(now, nil))
			}
			pump(i)
		}
		if now.Sub(epoch) > time.Hour {
			t.Fatalf("not drained after an hour: %d leases, %d open", leases, open)
		}
	}
	for i, n := range ns {
		if n.left != 0 || n.ready != 0 {
			t.Fatalf("node %d: %d messages left, %d ready", i, n.left, n.ready)
		}
	}
	res.drain = now.Sub(epoch)
	return res
}

// TestTenNodesShareFiveSessions: ten nodes against a destination that
// takes five sessions. Each node's own window is at least one, so local
// windows alone open ten and more; the shared window keeps the cluster's
// sessions at the limit plus one probe.
func TestTenNodesShareFiveSessions(t *testing.T) {
	p := params(t, "")
	for seed := int64(1); seed <= 3; seed++ {
		shared := simulate(t, p, 10, 100, 5, true, seed)
		local := simulate(t, p, 10, 100, 5, false, seed)
		t.Logf("seed %d: shared: peak %d leases, %d of %d sessions refused, drained in %v; local: peak %d, %d of %d refused, %v",
			seed, shared.peakLeases, shared.refused, shared.attempts, shared.drain,
			local.peakLeases, local.refused, local.attempts, local.drain)
		if shared.peakLeases > 5+1 {
			t.Errorf("seed %d: the shared window let %d sessions run at once against a limit of 5", seed, shared.peakLeases)
		}
		if local.peakLeases < 10 {
			t.Errorf("seed %d: local windows peaked at %d sessions: the model does not load the limiter", seed, local.peakLeases)
		}
		if 100*shared.refused > 3*1000 {
			t.Errorf("seed %d: shared: %d refusals for 1000 messages, want at most 3 %%", seed, shared.refused)
		}
	}
}

package window

import (
	"slices"
	"strings"
	"time"
)

// Board is the shared state of a cluster held in memory, for the
// simulator: N simulated nodes in one process, each with its Node, over
// one Record per destination and one set of leases. It is what Redis holds
// for real nodes (package cluster), with the same rules: a session starts
// only while the live leases are below the shared window, feedback from
// any node moves the one window, a lease not renewed expires. It is
// deterministic: time is an argument, nothing runs by itself, and nothing
// depends on map order. Not safe for concurrent use (one simulator loop
// drives every node).
type Board struct {
	lease time.Duration
	dests map[Dest]*shared
	order []Dest // destinations in creation order, for deterministic walks
	nodes []*Node
	where map[Lease]Dest // every lease granted and not released
	seq   Lease
}

type shared struct {
	rec     Record
	leases  []held  // live or not yet seen expired, by lease
	waiting []*Node // denied since the last Free, first asker first
}

type held struct {
	id    Lease
	node  *Node
	until time.Time
}

// Node is one simulated node's book on a Board.
type Node struct {
	board *Board
	name  string
	alive time.Time // live until: last request or renewal + the lease time
	inbox []Event   // Free events for this node from others' requests
}

// NewBoard returns an empty board whose leases last lease unless renewed.
func NewBoard(lease time.Duration) *Board {
	return &Board{lease: lease, dests: make(map[Dest]*shared), where: make(map[Lease]Dest)}
}

// Node returns the node named name, new if the board has none.
func (b *Board) Node(name string) *Node {
	for _, n := range b.nodes {
		if n.name == name {
			return n
		}
	}
	n := &Node{board: b, name: name}
	b.nodes = append(b.nodes, n)
	return n
}

// Name is the node's name.
func (n *Node) Name() string { return n.name }

func (b *Board) dest(d Dest, p Params) *shared {
	s, ok := b.dests[d]
	if !ok {
		s = &shared{rec: NewRecord(p)}
		b.dests[d] = s
		b.order = append(b.order, d)
	}
	p.Apply(&s.rec.Window)
	return s
}

// expire drops the leases that ran out at now, and tells the waiting if
// that freed a session.
func (b *Board) expire(d Dest, s *shared, now time.Time) {
	n := len(s.leases)
	s.leases = slices.DeleteFunc(s.leases, func(h held) bool { return !h.until.After(now) })
	if len(s.leases) < n {
		b.free(d, s, now, false)
	}
}

// free tells every node denied on d that its answer may have changed: a
// session is free, or the destination just died (died). The asking node's
// own Free goes to its inbox like the others'.
func (b *Board) free(d Dest, s *shared, now time.Time, died bool) {
	if len(s.waiting) == 0 || !died && (s.rec.Window.Dead() || len(s.leases) >= s.rec.Window.Limit()) {
		return
	}
	for _, n := range s.waiting {
		n.inbox = append(n.inbox, Event{Kind: Free, Dest: d, State: b.state(s, n, now)})
	}
	s.waiting = s.waiting[:0]
}

func (b *Board) wait(s *shared, n *Node) {
	if !slices.Contains(s.waiting, n) {
		s.waiting = append(s.waiting, n)
	}
}

func (b *Board) liveNodes(now time.Time) int {
	k := 0
	for _, n := range b.nodes {
		if n.alive.After(now) {
			k++
		}
	}
	return k
}

func (b *Board) state(s *shared, n *Node, now time.Time) State {
	mine := 0
	var by []NodeLeases
	for _, h := range s.leases {
		if h.node == n {
			mine++
		}
		i := slices.IndexFunc(by, func(x NodeLeases) bool { return x.Node == h.node.name })
		if i < 0 {
			by = append(by, NodeLeases{Node: h.node.name})
			i = len(by) - 1
		}
		by[i].Leases++
	}
	slices.SortFunc(by, func(a, b NodeLeases) int { return strings.Compare(a.Node, b.Node) })
	st := s.rec.State(now, len(s.leases), mine, b.liveNodes(now))
	st.ByNode = by
	return st
}

// Do answers n's requests at once, followed by the Free events others'
// requests left for n. Do(now, nil) only collects those.
func (n *Node) Do(now time.Time, reqs []Request) []Event {
	b := n.board
	n.alive = now.Add(b.lease)
	var evs []Event
	for _, r := range reqs {
		switch r.Op {
		case Acquire:
			s := b.dest(r.Dest, r.Params)
			b.expire(r.Dest, s, now)
			ok, why, revived := s.rec.Admit(len(s.leases), now)
			if !ok {
				b.wait(s, n)
				retry := s.rec.DeadUntil
				if why == Full {
					retry = s.leases[0].until
					for _, h := range s.leases[1:] {
						if h.until.Before(retry) {
							retry = h.until
						}
					}
				}
				evs = append(evs, Event{Kind: Denied, Dest: r.Dest, Reason: why, Retry: retry, Revived: revived,
					State: b.state(s, n, now)})
				continue
			}
			b.seq++
			s.leases = append(s.leases, held{id: b.seq, node: n, until: now.Add(b.lease)})
			b.where[b.seq] = r.Dest
			evs = append(evs, Event{Kind: Granted, Dest: r.Dest, Lease: b.seq, Revived: revived, State: b.state(s, n, now)})
		case Release:
			d, ok := b.where[r.Lease]
			if !ok {
				continue
			}
			delete(b.where, r.Lease)
			s := b.dests[d]
			// An expired lease may be gone already: nothing to free.
			if i := slices.IndexFunc(s.leases, func(h held) bool { return h.id == r.Lease && h.node == n }); i >= 0 {
				s.leases = slices.Delete(s.leases, i, i+1)
			}
			b.expire(d, s, now)
			b.free(d, s, now, false)
		case Report:
			s := b.dest(r.Dest, r.Params)
			b.expire(r.Dest, s, now)
			from, died := s.rec.Judge(r.Failed, r.DeadUntil, len(s.leases), b.liveNodes(now), now)
			evs = append(evs, Event{Kind: Changed, Dest: r.Dest, From: from, Failed: r.Failed, Died: died,
				Revived: from == 0 && !s.rec.Window.Dead(), State: b.state(s, n, now)})
			b.free(r.Dest, s, now, died)
		}
	}
	evs = append(evs, n.inbox...)
	n.inbox = n.inbox[:0]
	return evs
}

// Renew extends n's leases and its liveness to now plus the lease time:
// a running node does it while its sessions run (the Redis client every
// third of a lease). A node that stops renewing is dead to the others
// once its leases expire.
func (n *Node) Renew(now time.Time) {
	b := n.board
	n.alive = now.Add(b.lease)
	for _, d := range b.order {
		s := b.dests[d]
		b.expire(d, s, now)
		for i := range s.leases {
			if s.leases[i].node == n {
				s.leases[i].until = now.Add(b.lease)
			}
		}
	}
}

// State returns the shared state of d at now as node n would see it, and
// whether the board has any.
func (n *Node) State(d Dest, now time.Time) (State, bool) {
	s, ok := n.board.dests[d]
	if !ok {
		return State{}, false
	}
	n.board.expire(d, s, now)
	return n.board.state(s, n, now), true
}

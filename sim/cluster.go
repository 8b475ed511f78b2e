package sim

import (
	"time"

	"zsched/window"
)

// Cluster is several simulations on one fake clock: scheduler nodes, each
// with its own core, queue and agents, whose cores may share their
// destinations' windows through books answered at once (window.Board's
// nodes). Step handles the earliest event or timer of any node (the first
// node's on a tie, so a run is the same every time), then hands every
// node the events others' requests left in its book (Free: a session came
// free), until none is left. Every node's Now is the cluster's.
type Cluster struct {
	Nodes []*Sim
	Now   time.Time
	// books are the nodes' books, nil for a node that keeps its own
	// windows; renew is how often the nodes renew their leases (a third
	// of the lease time, as the Redis book does), zero for never.
	books     []window.Book
	renew     time.Duration
	nextRenew time.Time
}

// NewCluster returns a cluster of nodes, all at Epoch, each keeping its
// own windows until Share.
func NewCluster(nodes []*Sim) *Cluster {
	return &Cluster{Nodes: nodes, Now: Epoch, books: make([]window.Book, len(nodes))}
}

// Share makes books[i] node i's book of windows (core.UseBook), to be
// called before any message arrives. Books that renew leases (Renew, as
// window.Node) are renewed every renew of simulated time while anything
// happens.
func (c *Cluster) Share(books []window.Book, renew time.Duration) {
	for i, b := range books {
		c.books[i] = b
		c.Nodes[i].Core.UseBook(b)
	}
	c.renew = renew
	if renew > 0 {
		c.nextRenew = c.Now.Add(renew)
	}
}

// renewer is a book whose leases expire unless renewed (window.Node).
type renewer interface{ Renew(now time.Time) }

// Next is the time of the node's next event or timer, as Step would take
// it; ok is false when nothing is left to happen.
func (s *Sim) Next() (at time.Time, ok bool) {
	earlier := func(t time.Time) {
		if !t.IsZero() && (!ok || t.Before(at)) {
			at, ok = t, true
		}
	}
	earlier(s.Core.NextWakeup())
	earlier(s.gateWake())
	if t, due := s.events.Next(); due {
		earlier(t)
	}
	return at, ok
}

// Step handles the earliest event or timer of any node, or the lease
// renewal if it comes first, and the book events it leaves for the
// others; it returns false when nothing is left to happen anywhere.
func (c *Cluster) Step() bool {
	best := -1
	var at time.Time
	for i, s := range c.Nodes {
		if s.err != nil {
			continue
		}
		if t, ok := s.Next(); ok && (best < 0 || t.Before(at)) {
			best, at = i, t
		}
	}
	if best < 0 {
		return false
	}
	if c.renew > 0 && !c.nextRenew.After(at) {
		c.setNow(c.nextRenew)
		for _, b := range c.books {
			if r, ok := b.(renewer); ok {
				r.Renew(c.Now)
			}
		}
		c.nextRenew = c.nextRenew.Add(c.renew)
	} else {
		c.setNow(at)
		c.Nodes[best].Step()
	}
	c.poll()
	return true
}

func (c *Cluster) setNow(at time.Time) {
	if at.After(c.Now) {
		c.Now = at
	}
	for _, s := range c.Nodes {
		if s.Now.Before(c.Now) {
			s.Now = c.Now
		}
	}
}

// poll hands each node the events waiting in its book, over and over:
// handling them may free sessions others wait for.
func (c *Cluster) poll() {
	for again := true; again; {
		again = false
		for i, b := range c.books {
			if b == nil {
				continue
			}
			s := c.Nodes[i]
			if evs := b.Do(c.Now, nil); len(evs) > 0 {
				again = true
				s.Do(func(now time.Time) { s.Core.Window(now, evs) })
			}
		}
	}
}

// Err returns the first invariant or protocol violation any node saw.
func (c *Cluster) Err() error {
	for _, s := range c.Nodes {
		if s.err != nil {
			return s.err
		}
	}
	return nil
}

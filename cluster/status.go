package cluster

import (
	"strconv"
	"time"
)

// Mode is the state of a node's link to the shared store.
type Mode uint8

const (
	// Connecting: not yet heard from the store since start. Requests are
	// answered by the fallback windows meanwhile (the store's first
	// answer or failure settles it).
	Connecting Mode = iota
	// Shared: the store answers; the windows are the cluster's.
	Shared
	// Fallback: the store is unreachable; each destination has a local
	// window capped at this node's share of the last shared one, and the
	// node reconnects with backoff.
	Fallback
)

func (m Mode) String() string {
	switch m {
	case Connecting:
		return "connecting"
	case Shared:
		return "shared"
	case Fallback:
		return "fallback"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Status is a node's view of its cluster, for metrics (a gauge per mode,
// the counters) and mailq's "cluster: fallback" line.
type Status struct {
	Node  string
	Store string // the store's URL without password
	Mode  Mode
	Since time.Time // when Mode began
	Nodes int       // live nodes at the last answer (this one included)
	// Err is why the store is unreachable (Fallback), "" otherwise.
	Err        string
	Fallbacks  int // times the node fell back since start
	Reconnects int // times it came back
	Leases     int // sessions this node holds
}

// String is mailq's line: "cluster: shared (node mx1, 3 nodes)" or
// "cluster: fallback since 12:00:01 (node mx1): dial tcp ...".
func (s Status) String() string {
	b := "cluster: " + s.Mode.String()
	if s.Mode == Fallback {
		b += " since " + s.Since.Format(time.TimeOnly)
	}
	b += " (node " + s.Node
	if s.Mode == Shared {
		b += ", " + strconv.Itoa(s.Nodes) + " nodes"
	}
	b += ")"
	if s.Err != "" {
		b += ": " + s.Err
	}
	return b
}

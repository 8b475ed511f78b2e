package admission

import "time"

// ReconcileEvery is how often, at most, the recipient count is checked
// against the core while the recipient limit holds messages back.
const ReconcileEvery = time.Second

// Limits are the active limits: messages and recipients in core
// (message_active_limit and recipient_active_limit; Postfix's
// qmgr_message_active_limit and qmgr_message_recipient_limit). A limit
// of 0 or less is no limit.
type Limits struct {
	Messages   int
	Recipients int
}

// Core is what the gate asks of the scheduling core: how many messages it
// holds, and whether it still holds one (core.Core has both).
type Core interface {
	Messages() int
	Has(inum int64) bool
}

// Gate admits messages into the core while it holds fewer than
// Limits.Messages messages and Limits.Recipients recipients.
//
// A message is admitted whole while the counts are below the limits (a
// control file is read whole, never in part), so one message may overshoot
// the recipient limit by its own size, and a message larger than the limit
// is still admitted once the core has room.
//
// The core counts messages, not recipients: the gate counts them, per
// message, as admitted (Admit), lowered by each final outcome (Settled)
// and released when the message completes (Left). A message may also leave
// the core without a completion (a resync storm, an operator's kill, a
// vanished file); what such messages still count is released by
// reconciling against the core, at most once per ReconcileEvery while the
// recipient limit holds messages back.
type Gate struct {
	Limits Limits

	rcpts      map[int64]int // recipients in core, by message
	total      int
	reconciled time.Time
}

// NewGate returns a gate with the given limits and nothing admitted.
func NewGate(l Limits) *Gate {
	return &Gate{Limits: l, rcpts: make(map[int64]int)}
}

func under(n, limit int) bool { return limit <= 0 || n < limit }

// Room reports whether the core may take another message now. While the
// recipient count is at its limit it reconciles the count with c, at most
// once per ReconcileEvery; released, if not nil, is told of each message
// the core no longer holds (the caller forgets what it kept for it).
func (g *Gate) Room(now time.Time, c Core, released func(inum int64)) bool {
	if !under(c.Messages(), g.Limits.Messages) {
		return false
	}
	if under(g.total, g.Limits.Recipients) {
		return true
	}
	if now.Sub(g.reconciled) < ReconcileEvery {
		return false
	}
	g.reconciled = now
	for inum, n := range g.rcpts {
		if !c.Has(inum) {
			g.total -= n
			delete(g.rcpts, inum)
			if released != nil {
				released(inum)
			}
		}
	}
	return under(g.total, g.Limits.Recipients)
}

// Full reports whether either count is at its limit (without reconciling:
// the count may be stale until Room reconciles it).
func (g *Gate) Full(c Core) bool {
	return !under(c.Messages(), g.Limits.Messages) || !under(g.total, g.Limits.Recipients)
}

// Admit counts a message the core took, with rcpts recipients (pending and
// refused: each ends with a final outcome).
func (g *Gate) Admit(inum int64, rcpts int) {
	g.rcpts[inum] = rcpts
	g.total += rcpts
}

// Settled lowers the count by one recipient of inum that reached a final
// outcome.
func (g *Gate) Settled(inum int64) {
	if n, ok := g.rcpts[inum]; ok && n > 0 {
		g.rcpts[inum] = n - 1
		g.total--
	}
}

// Left releases what a message that left the core still counted.
func (g *Gate) Left(inum int64) {
	if n, ok := g.rcpts[inum]; ok {
		g.total -= n
		delete(g.rcpts, inum)
	}
}

// Recipients returns the recipients counted in core.
func (g *Gate) Recipients() int { return g.total }

// Messages returns the messages counted (those admitted and not yet
// released).
func (g *Gate) Messages() int { return len(g.rcpts) }

// Wake returns when Room may next answer differently for messages held
// back by the recipient limit (the next reconciliation), or the zero time
// when the count is below the limit. The caller asks only while messages
// wait.
func (g *Gate) Wake() time.Time {
	if under(g.total, g.Limits.Recipients) {
		return time.Time{}
	}
	return g.reconciled.Add(ReconcileEvery)
}

package mailq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Message is one message of the spool as SHOW QUEUE MESSAGES (and
// `scheduler queue -json`) gives it: the daemon builds it from the control
// file and what the core knows of it.
type Message struct {
	ID         string    `json:"id"`
	Path       string    `json:"path"`
	Arrival    time.Time `json:"arrival"`
	Size       int64     `json:"size"`
	Sender     string    `json:"sender"`
	InCore     bool      `json:"in_core"`
	Held       bool      `json:"held"`
	Recipients []Rcpt    `json:"recipients"`
}

// Rcpt is one pending recipient in Message.
type Rcpt struct {
	Offset   int64      `json:"offset"`
	Address  string     `json:"address"`
	Channel  string     `json:"channel"`
	Host     string     `json:"host"`
	State    string     `json:"state"` // pending, in flight, deferred, held, etrn, unrouted
	Until    *time.Time `json:"until,omitempty"`
	Attempts int        `json:"attempts"`
	Reason   string     `json:"reason,omitempty"`
	Last     string     `json:"last,omitempty"`
}

// Recipient states in the listing.
const (
	StatePending  = "pending"
	StateInFlight = "in flight"
	StateDeferred = "deferred"
	StateHeld     = "held"
	StateETRN     = "etrn"
	StateUnrouted = "unrouted"
)

// Entry is one message of `scheduler queue`: a head line (id, size,
// arrival, sender, flags) and a line per recipient, as postqueue -p.
func Entry(q *Message) string {
	var b strings.Builder
	from := q.Sender
	if from == "" {
		from = "<>"
	}
	fmt.Fprintf(&b, "%-22s %8d  %s  %s", q.ID, q.Size, q.Arrival.Format(time.RFC3339), from)
	if q.Held {
		b.WriteString("  [held]")
	}
	if !q.InCore {
		b.WriteString("  [on disk]")
	}
	for _, r := range q.Recipients {
		state := r.State
		if r.Until != nil {
			state += " until " + r.Until.Format(time.RFC3339)
		}
		fmt.Fprintf(&b, "\n    %s/%s\t%s\t%s\tattempts=%d", r.Channel, r.Host, r.Address, state, r.Attempts)
		if r.Reason != "" && r.State != StateDeferred {
			b.WriteString("\t(" + r.Reason + ")")
		}
		if r.Last != "" {
			b.WriteString("\tlast=" + strconv.Quote(r.Last))
		}
	}
	return b.String()
}

// Total is the last line of `scheduler queue`: the messages and
// recipients listed, and how many of the messages are in core.
func Total(msgs, rcpts, inCore int) string {
	return fmt.Sprintf("-- %d messages, %d recipients (in core: %d messages; on disk only: %d)", msgs, rcpts, inCore, msgs-inCore)
}

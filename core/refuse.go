package core

import (
	"time"

	"zsched/report"
	"zsched/vertex"
)

// Refusal is a recipient the caller refused before scheduling it (the
// daemon refuses hosts and addresses longer than RFC 5321 allows, which
// no agent could be fed): it fails at once, with a d line and an outcome,
// as expiry fails one, so its sender gets a DSN. It is not placed and
// counts as failed.
type Refusal struct {
	Offset  int64  // of the r line
	User    string // the address
	Channel string
	Host    string
	Notify  uint8
	Status  string // RFC 3463 status with its comment, e.g. "5.1.3 (bad destination mailbox address syntax)"
	Text    string // why, in words
}

// refuse fails a refused recipient of m.
func (s *Core) refuse(m *vertex.Message, r Refusal, now time.Time) {
	n := report.Notary{Recipient: r.User, Action: "failed", Status: r.Status,
		Diagnostic: "x-local; 500 (" + r.Text + ")"}
	s.diag(m, vertex.Rcpt{Offset: r.Offset, User: r.User, Notify: r.Notify}, n, r.Text)
	s.stats.Failed++
	s.ready.Outcomes = append(s.ready.Outcomes, Outcome{
		Path: m.Path, QID: m.QID, Inum: m.Inum, Offset: r.Offset, User: r.User,
		Channel: r.Channel, Host: r.Host, Status: "refused",
		Delay: now.Sub(m.Arrival), Text: r.Text,
	})
}

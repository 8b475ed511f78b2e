// Package testagents owns the tiny transport agents that tests, benchmarks
// and the example configuration run as real processes: sink (delivers
// everything), flaky (defers a fraction), deferall (the whole site fails),
// crash (dies mid-job), hang (never answers), garbage (breaks the
// protocol), slow (sink with a delay), limited (a destination that takes K
// sessions at once and refuses the rest with 421), forker (forks a child
// that delivers, as ZMailer's sm does), and agent.sh (a hand-written POSIX
// shell agent). Each is a main package in its own directory, built on
// package ta except garbage and agent.sh. This package holds the delivery
// logic they share and checks that no agent process outlives a test
// (LeakCheck); internal/agentbin builds them for tests and the lab (as
// `make build` does into testagents/bin).
package testagents

import (
	"bytes"
	"io"
	"strconv"
	"time"

	"zsched/ctlfile"
	"zsched/report"
	"zsched/ta"
)

// Sink delivers by acknowledging: ok3, or ok2 with a d line for a
// recipient that asked for NOTIFY=SUCCESS (the agent owes that DSN).
type Sink struct {
	// Log, when set, gets one line "inum/offset user" per delivered
	// recipient, written with a single Write before the recipient is marked,
	// so that an O_APPEND file records every delivery even if the agent is
	// killed: crash tests count duplicates with it.
	Log io.Writer
	// Delay is slept per recipient, standing in for a slow destination.
	Delay time.Duration

	res []ta.Result // Deliver's, reused
}

// Deliver delivers every recipient of d. The results it returns are valid
// until its next call: Serve settles them before it takes the next job.
func (s *Sink) Deliver(d *ta.Delivery) []ta.Result {
	res := s.res[:0]
	for _, i := range d.Rcpts {
		res = append(res, s.DeliverOne(d, i))
	}
	s.res = res
	return res
}

// DeliverOne delivers recipient i of d.
func (s *Sink) DeliverOne(d *ta.Delivery, i int) ta.Result {
	if s.Delay > 0 {
		time.Sleep(s.Delay)
	}
	rc := d.Rcpt(i)
	if s.Log != nil {
		var b bytes.Buffer
		b.WriteString(strconv.FormatInt(d.File.Inum, 10))
		b.WriteByte('/')
		b.WriteString(strconv.FormatInt(rc.Offset, 10))
		b.WriteByte(' ')
		b.WriteString(rc.User)
		b.WriteByte('\n')
		if _, err := s.Log.Write(b.Bytes()); err != nil {
			// Not delivered if we cannot prove it was.
			return ta.Result{Rcpt: i, Status: report.Deferred, Text: "sink: log: " + err.Error()}
		}
	}
	if rc.Notify&ctlfile.NotifySuccess != 0 {
		return ta.Result{Rcpt: i, Status: report.OK2, Text: "delivered to the sink",
			Notary: report.Notary{Recipient: rc.User, Action: "delivered", Status: "2.0.0", Diagnostic: "x-sink; 250 (delivered to the sink)"}}
	}
	return ta.Result{Rcpt: i, Status: report.OK3, Text: "delivered to the sink"}
}

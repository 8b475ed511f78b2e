package core

import (
	"time"

	"zsched/report"
	"zsched/vertex"
)

// The core's input from the queue (Arrival) and its output, the batches of
// effects (Ready), with the steps that hand a batch over (doc.go).

// Arrival is a control file read from the queue, reduced to what the core
// schedules: its pending recipients grouped per (channel, host).
type Arrival struct {
	Inum int64
	Path string // relative to postoffice/transport
	ID   string // body file name
	// QID is the message's queue id (ctlfile.File.QueueID), what logs and
	// commands name it by; "" means Path.
	QID     string
	Arrival time.Time
	Bounce  bool
	// Held places the message on operator hold (a hold kept on disk).
	Held bool
	// Warned says a delay warning was already sent for the message (a d
	// line with action "delayed" in the file): not again after a restart.
	Warned bool
	// Diags says the file holds d lines not yet reported in a DSN: the
	// message owes a report at completion even if no report line said so
	// (an agent appended one and died before reporting).
	Diags  bool
	Groups []Group
	// Refused are recipients failed at once, not scheduled (refuse.go).
	Refused []Refusal
}

// Group is the pending recipients of one (channel, host).
type Group struct {
	Channel string
	Host    string
	Rcpts   []vertex.Rcpt
	// Retry state kept across a restart (the daemon's retry journal): the
	// vertex's attempts so far, its index into the clause's retries, and
	// its next attempt time (zero: due now). See restoreRetry.
	Attempts int
	Retry    int
	Next     time.Time
}

// Spawn asks for a new agent running the command of Clause for Channel and
// Host. Lines for it follow in Ready.Writes.
type Spawn struct {
	Agent   int
	Clause  int
	Channel string
	Host    string
}

// Write sends one line (without its newline) to an agent.
type Write struct {
	Agent int
	Line  string
	// Due is when the vertex of a job line became due (zero for other
	// lines): the start of its dispatch latency.
	Due time.Time
}

// Stop ends an agent: gracefully (an empty line and half-close) or, with
// Kill, by signal.
type Stop struct {
	Agent  int
	Kill   bool
	Reason string
}

// Diag asks for a d line appended to a control file for the recipient at
// Offset: the scheduler writes it when the agent did not (ok with
// NOTIFY=SUCCESS, error, expiry).
type Diag struct {
	Path   string
	Inum   int64
	Offset int64
	Notary report.Notary
	Text   string
}

// Outcome is one recipient's result of one attempt: the line operators grep.
type Outcome struct {
	Path     string
	QID      string // the message's queue id (vertex.Message.QID), what the line names it by
	Inum     int64
	Offset   int64
	User     string
	Channel  string
	Host     string
	Agent    int
	Status   string // a status word, or "expired", "gone"
	Delay    time.Duration
	Attempts int
	Retry    int       // the vertex's retry index after this attempt (kept across a restart)
	Next     time.Time // next retry, zero when final
	Text     string
}

// Final reports whether the outcome ends the recipient.
func (o Outcome) Final() bool { return o.Next.IsZero() }

// Complete says a message has no pending recipient left: send its DSN if
// Diags, then remove its files.
type Complete struct {
	Path   string
	ID     string
	Inum   int64
	Diags  bool
	Bounce bool
	// Killed: the operator killed the message; remove its files, send no
	// DSN.
	Killed bool
}

// DSN asks for a delivery status notification now from the message's d
// lines not yet reported, while the message stays queued (a delay warning).
type DSN struct {
	Path string
	ID   string
	Inum int64
}

// Reread asks for the control file to be read again and the result given to
// Reread (after an agent's #resync or death: stale locks get reset).
type Reread struct {
	Path string
	Inum int64
}

// Throttle says a ring's transport failed: an agent exited before its
// first #hungry, died with jobs outstanding or could not be started, and no
// new agent is started for the ring until Until (throttle.go). The caller
// logs it once, with the agent's last output.
type Throttle struct {
	Agent    int
	Clause   int
	Channel  string
	Host     string // the failing agent's destination
	Ring     string // the ring's host, for a host-bound clause
	Until    time.Time
	Backoff  time.Duration
	Failures int    // failures since the ring last worked
	Reason   string // how the agent ended
}

// Ready is a batch of effects: those of the events since the batch before
// it was taken.
type Ready struct {
	Spawns    []Spawn
	Writes    []Write
	Stops     []Stop
	Diags     []Diag
	Outcomes  []Outcome
	Completes []Complete
	Rereads   []Reread
	DSNs      []DSN // after Diags: the d lines they report are written
	Throttles []Throttle
	// Observations are what the core saw and decided, in order: no
	// effects, data to log, count and measure (observation.go).
	Observations []Observation
}

// Empty reports whether there is nothing to do.
func (r *Ready) Empty() bool {
	return len(r.Spawns)+len(r.Writes)+len(r.Stops)+len(r.Diags)+
		len(r.Outcomes)+len(r.Completes)+len(r.Rereads)+len(r.DSNs)+len(r.Throttles)+
		len(r.Observations) == 0
}

// HasReady reports whether events since the batch in hand was taken (or
// since the last Advance) have effects for a new batch.
func (s *Core) HasReady() bool { return !s.ready.Empty() }

// Ready returns the effects of the events since the last batch was taken,
// and hands that batch to the caller until Advance: its slices stay valid
// and unchanged while the caller carries it out, other calls into the core
// included, whose effects go to the next batch. Calling Ready again before
// Advance is a broken invariant and panics.
//
// The batch's Rereads must each be answered through Reread before any
// other event is fed to the core, and before Advance: an event that comes
// first, or an Advance with a re-read unanswered, panics.
func (s *Core) Ready() Ready {
	if s.taken {
		panic("core: Ready called again before Advance")
	}
	r := s.ready
	s.ready, s.spare = s.spare, Ready{}
	s.inHand, s.taken = r, true
	s.owed = len(r.Rereads)
	s.answered = append(s.answered[:0], make([]bool, len(r.Rereads))...)
	return r
}

// Advance tells the core that the batch from Ready was carried out: its
// slices are the core's again, and the next batch reuses them (a caller
// that keeps actions longer copies them). Reuse is what makes a dispatch
// allocate no action slices: under load a batch is taken for every turn
// of agent lines. Advance without a batch in hand, or with one of its
// re-reads unanswered, is a broken invariant and panics.
func (s *Core) Advance() {
	if !s.taken {
		panic("core: Advance without a batch from Ready")
	}
	if s.owed > 0 {
		panic("core: Advance before the batch's re-reads were answered through Reread")
	}
	s.spare = s.inHand.reuse()
	s.inHand, s.taken = Ready{}, false
}

// event checks, as an event begins, that the caller answered the re-reads
// of the batch in hand: an event handled between a file's re-read request
// and its answer could feed recipients whose stale locks are not reset yet.
func (s *Core) event(name string) {
	if s.owed > 0 {
		panic("core: " + name + " before the batch's re-reads were answered through Reread")
	}
}

// answer notes the re-read of inum answered, if the batch in hand asked for
// it and it was not answered yet.
func (s *Core) answer(inum int64) {
	if s.owed == 0 {
		return
	}
	for i, rr := range s.inHand.Rereads {
		if rr.Inum == inum && !s.answered[i] {
			s.answered[i] = true
			s.owed--
			return
		}
	}
}

// readyKeep bounds the slices Ready keeps for reuse: a burst (a scan that
// queued thousands of messages, a mass expiry) must not pin its memory.
const readyKeep = 4096

// reuse returns r's slices emptied, their elements cleared so that they
// hold no strings or messages alive.
func (r *Ready) reuse() Ready {
	return Ready{
		Spawns:       reuseSlice(r.Spawns),
		Writes:       reuseSlice(r.Writes),
		Stops:        reuseSlice(r.Stops),
		Diags:        reuseSlice(r.Diags),
		Outcomes:     reuseSlice(r.Outcomes),
		Completes:    reuseSlice(r.Completes),
		Rereads:      reuseSlice(r.Rereads),
		DSNs:         reuseSlice(r.DSNs),
		Throttles:    reuseSlice(r.Throttles),
		Observations: reuseSlice(r.Observations),
	}
}

func reuseSlice[T any](s []T) []T {
	if cap(s) > readyKeep {
		return nil
	}
	clear(s)
	return s[:0]
}

package daemon

import (
	"github.com/hashicorp/go-hclog"

	"zsched/core"
)

// outcomeLog formats the per-recipient outcome lines on a goroutine beside
// the loop: under load the loop logs one line per recipient, and hclog's
// formatting of it was a fifth of the loop's CPU (BenchmarkLoopCeiling).
// The loop hands over each turn's outcomes in one batch, with what is its
// state taken on the loop: the queue id, the agent's pid while the agent
// is still known, the statelog open at the time (a reload syncs the writer
// before it closes that one); the retry journal's record stays on the
// loop. The lines come out in the order the core produced them, to the log
// and to the statelog, only later than the loop's own lines of the same
// turn. Nothing reads these lines back: the delivery state is in the
// control files, the counters and the retry journal are kept on the loop.
type outcomeLog struct {
	log     hclog.Logger
	pending []loggedOutcome // this turn's, the loop's
	batches chan []loggedOutcome
	free    chan []loggedOutcome // written batches, for reuse
	synced  chan struct{}        // answers a nil batch: all before it is written
	exit    chan struct{}
}

// loggedOutcome is an outcome with its message's queue id, the pid of the
// agent that had it and the statelog it goes to (nil: none).
type loggedOutcome struct {
	core.Outcome
	qid string
	pid int
	st  *stateLog
}

// outcomeBatch bounds a batch: the loop hands it over when full.
const outcomeBatch = 512

func newOutcomeLog(log hclog.Logger) *outcomeLog {
	l := &outcomeLog{
		log:     log,
		batches: make(chan []loggedOutcome, 64),
		free:    make(chan []loggedOutcome, 64),
		synced:  make(chan struct{}),
		exit:    make(chan struct{}),
	}
	go l.run()
	return l
}

func (l *outcomeLog) run() {
	asHelper()
	defer close(l.exit)
	line := newOutcomeLine()
	unchecked := uncheckedOf(l.log)
	for b := range l.batches {
		if b == nil {
			l.synced <- struct{}{}
			continue
		}
		for i := range b {
			line.write(l.log, unchecked, b[i].st, &b[i].Outcome, b[i].qid, b[i].pid)
		}
		clear(b)
		select {
		case l.free <- b[:0]:
		default:
		}
	}
}

// add queues one outcome. The loop's goroutine only.
func (l *outcomeLog) add(o core.Outcome, qid string, pid int, st *stateLog) {
	if l.pending == nil {
		select {
		case l.pending = <-l.free:
		default:
			l.pending = make([]loggedOutcome, 0, 64)
		}
	}
	l.pending = append(l.pending, loggedOutcome{o, qid, pid, st})
	if len(l.pending) >= outcomeBatch {
		l.flush()
	}
}

// flush hands the queued outcomes to the writer. It blocks only while the
// writer is 64 batches behind, as a write to the log would.
func (l *outcomeLog) flush() {
	if len(l.pending) == 0 {
		return
	}
	l.batches <- l.pending
	l.pending = nil
}

// sync returns once every outcome queued so far is written to the logger
// and the statelog: before a line that must follow them (the drain's
// summary), and before the statelog they went to is closed (a reload).
func (l *outcomeLog) sync() {
	l.flush()
	l.batches <- nil
	<-l.synced
}

// close writes what is queued and stops the writer.
func (l *outcomeLog) close() {
	l.flush()
	close(l.batches)
	<-l.exit
}

package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/core"
)

// The retry journal (issue 17): each deferred recipient's attempts, retry
// index and next attempt time, kept across a restart or a crash. The
// control files cannot hold them (a deferred recipient's status byte is
// blank, as a new one's: ZMailer's format has no retry field), so they are
// appended to postoffice/state/retry, one line per deferral outcome:
//
//	D <queue id> <rcpt offset> <attempts> <retry index> <next, Unix ms>
//	X <queue id>          the message left the spool (completed, killed)
//	F <queue id>          the operator flushed it: due now
//	# at <Unix ms>        when the lines after it were written
//
// The times are the wall clock's, which may step back (an hour, a clock
// set by hand): a next time written before such a step would keep its
// recipient waiting that much longer after a restart. So each write
// starts with the time it was written, a comment to a reader that does not
// know it; a start whose clock is behind the time a record was written
// gives that recipient the wait the record asked for, counted from now.
//
// The loop only appends lines to a buffer; a goroutine writes the buffer
// every journalFlush (a SIGKILL loses at most that much retry state: those
// recipients are retried early, never lost), and rewrites the file with
// only its live lines when it has grown past twice those and
// journalCompactMin. At start the journal is replayed into a map by queue
// id, and each message read into core takes its recipients' state from it
// (core.Group's Attempts, Retry, Next): a recipient whose next attempt is
// ahead waits for it. One whose time passed while the scheduler was down
// is due, but not all at once: it is spread over its clause's interval,
// by its queue id's hash — and so is every message older than an interval
// when there is no journal at all (first start after an upgrade, a lost
// state directory): a start with 100 000 deferred recipients then does not
// try them all in its first seconds.

const journalHeader = "# zsched retry v1"

// journalFlush is how often the journal's buffer is written.
const journalFlush = 100 * time.Millisecond

// journalCompactMin is the least number of lines before a compaction.
const journalCompactMin = 100000

// retryRec is one recipient's kept state.
type retryRec struct {
	attempts, retry int
	next            time.Time
	at              time.Time // when it was written ("# at"); zero if not known
}

// due is when the recipient is due again, as seen at now: next, unless
// the clock is now behind the time the record was written (it stepped
// back), when the wait the record asked for counts from now instead.
func (r retryRec) due(now time.Time) time.Time {
	if !r.at.IsZero() && now.Before(r.at) {
		return now.Add(r.next.Sub(r.at))
	}
	return r.next
}

// stampPrefix starts the comment line that says when the lines after it
// were written.
const stampPrefix = "# at "

// journal is the retry journal of one daemon.
type journal struct {
	path string
	log  hclog.Logger
	now  func() time.Time // the daemon's clock, as New had it: the stamps' ("# at")

	mu  sync.Mutex
	buf bytes.Buffer // lines the loop appended, not yet written

	// Run's goroutine only: the state replayed at start, taken by each
	// message as it is read into core.
	replay  map[string]map[int64]retryRec
	missing bool      // there was no journal at start
	start   time.Time // when this daemon started

	lines, live int  // written since the last compaction; live at it
	failing     bool // the last write failed (logged once)
	stop        chan struct{}
	done        chan struct{}

	// unwritten is what writes could not append, each flush's lines after
	// their "# at" line, for the next write (its goroutine's).
	unwritten []byte
}

// loadJournal replays the journal. Called by New, before any read.
func (d *Daemon) loadJournal() {
	j := &journal{path: filepath.Join(d.spool.StateDir(), "retry"), log: d.log, now: d.now,
		replay: make(map[string]map[int64]retryRec), start: d.now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	d.retry = j
	f, err := os.Open(j.path)
	bad := 0
	if err == nil {
		bad, err = replayJournalErr(f, j.replay)
		f.Close()
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		j.missing = true
	case err != nil && !errors.Is(err, bufio.ErrTooLong):
		// Left as it is, as the holds file: rewritten with what was read
		// of it, the rest would be lost for good, while it may read whole
		// once the fault is fixed (at the next start). What was read
		// applies; the rest is spread.
		d.log.Error("cannot read the retry journal; what was not read is spread over its retry interval, and the file is left as it is",
			"file", j.path, "error", err, "messages_read", len(j.replay))
		j.missing = true
		go j.run()
		return
	default: // a line too long ends the read: what follows is damage
		if bad > 0 {
			d.log.Warn("retry journal: lines skipped", "file", j.path, "lines", bad)
		}
		n := 0
		for _, m := range j.replay {
			n += len(m)
		}
		j.live = n
		d.log.Info("retry state restored", "file", j.path, "messages", len(j.replay), "recipients", n)
	}
	// Start from a compact file: only what was replayed.
	if err := j.rewrite(); err != nil {
		d.log.Error("cannot write the retry journal", "file", j.path, "error", err)
	}
	go j.run()
}

// replayJournal reads journal lines into m; it returns how many it could
// not read. The last record of a recipient wins; X and F forget a message;
// a record takes the time of the "# at" line before it.
func replayJournal(r io.Reader, m map[string]map[int64]retryRec) (bad int) {
	bad, _ = replayJournalErr(r, m)
	return bad
}

// replayJournalErr is replayJournal, with the error that ended the read
// early (nil at the end of the file).
func replayJournalErr(r io.Reader, m map[string]map[int64]retryRec) (bad int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<16)
	var at time.Time
	for sc.Scan() {
		line := sc.Text()
		if ms, ok := strings.CutPrefix(line, stampPrefix); ok {
			if v, err := strconv.ParseInt(ms, 10, 64); err == nil {
				at = time.UnixMilli(v)
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && (f[0] == "X" || f[0] == "F"):
			delete(m, f[1])
		case len(f) == 6 && f[0] == "D":
			off, e1 := strconv.ParseInt(f[2], 10, 64)
			att, e2 := strconv.Atoi(f[3])
			ri, e3 := strconv.Atoi(f[4])
			ms, e4 := strconv.ParseInt(f[5], 10, 64)
			if e1 != nil || e2 != nil || e3 != nil || e4 != nil || att < 0 || ri < 0 {
				bad++
				continue
			}
			rs := m[f[1]]
			if rs == nil {
				rs = make(map[int64]retryRec)
				m[f[1]] = rs
			}
			rs[off] = retryRec{attempts: att, retry: ri, next: time.UnixMilli(ms), at: at}
		default:
			bad++ // a line cut by a crash, most likely
		}
	}
	return bad, sc.Err()
}

// deferred records a deferral outcome (on the loop: a buffered append).
func (j *journal) deferred(qid string, o core.Outcome) {
	if j == nil || o.Final() {
		return
	}
	j.mu.Lock()
	fmt.Fprintf(&j.buf, "D %s %d %d %d %d\n", qid, o.Offset, o.Attempts, o.Retry, o.Next.UnixMilli())
	j.mu.Unlock()
}

// forget records that a message left the spool (X) or was flushed (F).
func (j *journal) forget(kind byte, qid string) {
	if j == nil {
		return
	}
	delete(j.replay, qid)
	j.mu.Lock()
	j.buf.WriteByte(kind)
	j.buf.WriteByte(' ')
	j.buf.WriteString(qid)
	j.buf.WriteByte('\n')
	j.mu.Unlock()
}

// take returns the buffered lines and empties the buffer.
func (j *journal) take() []byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.buf.Len() == 0 {
		return nil
	}
	b := bytes.Clone(j.buf.Bytes())
	j.buf.Reset()
	return b
}

// run writes the buffer every journalFlush until close.
func (j *journal) run() {
	asHelper()
	defer close(j.done)
	t := time.NewTicker(journalFlush)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			j.write()
			return
		case <-t.C:
			j.write()
		}
	}
}

// write appends the buffered lines, then compacts when due. Lines it
// cannot append (a full disk, EIO) are kept (unwritten), stamped with the
// time they were first written, ahead of those buffered since, and
// appended by a later flush: dropped, a deferral would be retried early
// after a restart, and a flush or a message's end (F, X) forgotten;
// stamped again with the later write's time, a record would count its
// wait from then after a clock step back. What a failed write left of
// them is cut off, so that no line is written in half. The failure is
// logged once, until a write succeeds.
func (j *journal) write() {
	b := j.take()
	if b == nil && j.unwritten == nil {
		return
	}
	out := j.unwritten
	if b != nil {
		out = append(out, j.stamp(b)...)
	}
	if err := j.append(out); err != nil {
		j.unwritten = out
		dropped := 0
		if len(out) > journalKeepMax {
			j.unwritten, dropped = nil, len(out)
		}
		if !j.failing {
			j.failing = true
			j.log.Error("cannot append to the retry journal; its lines are kept and written again",
				"file", j.path, "error", err)
		}
		if dropped > 0 {
			j.log.Warn("retry journal: lines kept too long dropped; their recipients may be retried early after a restart",
				"file", j.path, "bytes", dropped)
		}
		return
	}
	j.unwritten = nil
	if j.failing {
		j.failing = false
		j.log.Info("retry journal written again", "file", j.path)
	}
	j.lines += bytes.Count(out, []byte{'\n'})
	if j.lines >= journalCompactMin && j.lines > 2*j.live {
		if err := j.compact(); err != nil {
			// Tried again after as many lines more, not at every flush.
			j.lines = 0
			j.log.Error("cannot compact the retry journal", "file", j.path, "error", err)
		}
	}
}

// journalKeepMax bounds the lines kept while the journal cannot be
// written: some 100 000 deferrals.
const journalKeepMax = 8 << 20

// stamp returns b after a line with the time it is written.
func (j *journal) stamp(b []byte) []byte {
	if j.now == nil {
		return b
	}
	s := strconv.AppendInt([]byte(stampPrefix), j.now().UnixMilli(), 10)
	return append(append(s, '\n'), b...)
}

// append writes b at the end of the journal; a write that fails is cut
// back off.
func (j *journal) append(b []byte) error {
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil {
		if _, err = f.Write(b); err != nil {
			f.Truncate(fi.Size())
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// compact rewrites the journal with its live lines only (its goroutine).
func (j *journal) compact() error {
	f, err := os.Open(j.path)
	if err != nil {
		return err
	}
	defer f.Close()
	return j.compactFrom(f)
}

// compactFrom is compact of the journal read from r. A read that fails
// part way (EIO) leaves the journal as it is, as loadJournal does: the
// records past the fault would be lost for good; a line too long ends the
// read as at start (damage).
func (j *journal) compactFrom(r io.Reader) error {
	m := make(map[string]map[int64]retryRec)
	if _, err := replayJournalErr(r, m); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("read: %w", err)
	}
	data := formatJournal(m)
	if err := writeAtomic(j.path, data); err != nil {
		return err
	}
	j.live = bytes.Count(data, []byte{'\n'}) - 1
	j.lines = 0
	return nil
}

// rewrite writes the replayed state as the whole journal (at start).
func (j *journal) rewrite() error {
	data := formatJournal(j.replay)
	j.live = bytes.Count(data, []byte{'\n'}) - 1
	return writeAtomic(j.path, data)
}

// formatJournal writes m as a whole journal, each record after the "# at"
// line of the time it was written, so that a rewrite keeps them.
func formatJournal(m map[string]map[int64]retryRec) []byte {
	type line struct {
		qid string
		off int64
		r   retryRec
	}
	var ls []line
	for qid, rs := range m {
		for off, r := range rs {
			ls = append(ls, line{qid, off, r})
		}
	}
	slices.SortFunc(ls, func(a, b line) int {
		return cmp.Or(a.r.at.Compare(b.r.at), strings.Compare(a.qid, b.qid), cmp.Compare(a.off, b.off))
	})
	var b bytes.Buffer
	b.WriteString(journalHeader + "\n")
	var at time.Time
	for _, l := range ls {
		if !l.r.at.Equal(at) { // the unknown (zero) first: no stamp before them
			at = l.r.at
			if !at.IsZero() {
				fmt.Fprintf(&b, "%s%d\n", stampPrefix, at.UnixMilli())
			}
		}
		fmt.Fprintf(&b, "D %s %d %d %d %d\n", l.qid, l.off, l.r.attempts, l.r.retry, l.r.next.UnixMilli())
	}
	return b.Bytes()
}

// close writes what is buffered and stops the writer.
func (j *journal) close() {
	if j == nil {
		return
	}
	select {
	case <-j.stop:
	default:
		close(j.stop)
	}
	<-j.done
}

// restore gives an arrival's groups the state kept for its recipients,
// and spreads what is overdue (see the comment at the top).
func (d *Daemon) restoreRetry(a *core.Arrival, qid string, arrival time.Time) {
	j := d.retry
	if j == nil {
		return
	}
	rs := j.replay[qid]
	if rs == nil && !j.missing {
		// Nothing kept for it, and a journal to say so: the common case,
		// every message but those a restart found deferred. The clock and
		// the clause's interval (a match by destination) are not needed.
		return
	}
	var now time.Time // read once, when a recipient has state
	// Older than the least spread (a minute, retrySpread): only then can
	// it be older than its clause's, which costs a match to learn.
	old := j.missing && !arrival.IsZero() && arrival.Before(j.start.Add(-time.Minute))
	for i := range a.Groups {
		g := &a.Groups[i]
		found := false
		for _, r := range g.Rcpts {
			rec, ok := rs[r.Offset]
			if !ok {
				continue
			}
			if now.IsZero() {
				now = d.now() // due needs it: a record stamped ahead of it (a clock stepped back) counts its wait from now
			}
			found = true
			g.Attempts = max(g.Attempts, rec.attempts)
			g.Retry = max(g.Retry, rec.retry)
			if next := rec.due(now); next.After(g.Next) {
				g.Next = next
			}
		}
		switch {
		case found && !g.Next.After(now):
			// Overdue while the scheduler was down.
			g.Next = spreadAt(qid, j.start, d.retrySpread(g.Channel, g.Host))
		case !found && old:
			if spread := d.retrySpread(g.Channel, g.Host); arrival.Before(j.start.Add(-spread)) {
				// No journal: an old message was most likely tried before.
				g.Next = spreadAt(qid, j.start, spread)
			}
		}
	}
	if rs != nil {
		delete(j.replay, qid)
	}
}

// retrySpread is the window overdue recipients of a destination are
// spread over: its clause's interval, a minute at least.
func (d *Daemon) retrySpread(channel, host string) time.Duration {
	w := time.Minute
	if ci, ok := d.cfg.Match(channel, strings.ToLower(host)); ok {
		w = max(w, d.cfg.Clauses[ci].Interval.D())
	}
	return w
}

// spreadAt places qid in [start, start+w) by its hash: the same message
// lands at the same place whenever it is read.
func spreadAt(qid string, start time.Time, w time.Duration) time.Time {
	h := fnv.New64a()
	h.Write([]byte(qid))
	return start.Add(time.Duration(h.Sum64() % uint64(w)))
}

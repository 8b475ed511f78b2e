package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
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
}

// journal is the retry journal of one daemon.
type journal struct {
	path string
	log  hclog.Logger

	mu  sync.Mutex
	buf bytes.Buffer // lines the loop appended, not yet written

	// Run's goroutine only: the state replayed at start, taken by each
	// message as it is read into core.
	replay  map[string]map[int64]retryRec
	missing bool      // there was no journal at start
	start   time.Time // when this daemon started

	lines, live int // written since the last compaction; live at it
	stop        chan struct{}
	done        chan struct{}
}

// loadJournal replays the journal. Called by New, before any read.
func (d *Daemon) loadJournal() {
	j := &journal{path: filepath.Join(d.spool.StateDir(), "retry"), log: d.log,
		replay: make(map[string]map[int64]retryRec), start: d.now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	d.retry = j
	f, err := os.Open(j.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		j.missing = true
	case err != nil:
		d.log.Error("cannot read the retry journal; deferred mail is spread over its retry interval", "file", j.path, "error", err)
		j.missing = true
	default:
		bad := replayJournal(f, j.replay)
		f.Close()
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
// not read. The last record of a recipient wins; X and F forget a message.
func replayJournal(r io.Reader, m map[string]map[int64]retryRec) (bad int) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<16)
	for sc.Scan() {
		line := sc.Text()
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
			rs[off] = retryRec{attempts: att, retry: ri, next: time.UnixMilli(ms)}
		default:
			bad++ // a line cut by a crash, most likely
		}
	}
	return bad
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

// write appends the buffered lines, then compacts when due.
func (j *journal) write() {
	b := j.take()
	if b == nil {
		return
	}
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		j.log.Error("cannot append to the retry journal", "file", j.path, "error", err)
		return
	}
	j.lines += bytes.Count(b, []byte{'\n'})
	if j.lines >= journalCompactMin && j.lines > 2*j.live {
		if err := j.compact(); err != nil {
			j.log.Error("cannot compact the retry journal", "file", j.path, "error", err)
		}
	}
}

// compact rewrites the journal with its live lines only (its goroutine).
func (j *journal) compact() error {
	f, err := os.Open(j.path)
	if err != nil {
		return err
	}
	m := make(map[string]map[int64]retryRec)
	replayJournal(f, m)
	f.Close()
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

func formatJournal(m map[string]map[int64]retryRec) []byte {
	var b bytes.Buffer
	b.WriteString(journalHeader + "\n")
	for qid, rs := range m {
		for off, r := range rs {
			fmt.Fprintf(&b, "D %s %d %d %d %d\n", qid, off, r.attempts, r.retry, r.next.UnixMilli())
		}
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
			found = true
			g.Attempts = max(g.Attempts, rec.attempts)
			g.Retry = max(g.Retry, rec.retry)
			if rec.next.After(g.Next) {
				g.Next = rec.next
			}
		}
		if found && now.IsZero() {
			now = d.now()
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

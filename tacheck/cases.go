package tacheck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"zsched/report"
)

// kase is one check. run returns nil (pass), a *skipError, or the failure.
type kase struct {
	name string
	rule string
	run  func(c *conv) error
}

func caseNamed(name string) (kase, bool) {
	for _, c := range cases {
		if c.name == name {
			return c, true
		}
	}
	return kase{}, false
}

// cases in the order they run; docs/ta-protocol.md §10 lists them.
var cases = []kase{
	{"first-hungry", "the agent's first line is #hungry ('#' comment lines may precede it)", firstHungry},
	{"early-job", "a job line written before the agent's first #hungry (zsched feeds a new agent at once) is done once it asks", earlyJob},
	{"hungry-per-line", "every job line and every #idle is answered by exactly one #hungry, after that job's reports", hungryPerLine},
	{"overfeed", "3 job lines and #idle written in one burst are answered in order, one #hungry each", overfeed},
	{"idle-resume", "after #idle the agent answers #hungry and then takes the next job", idleResume},
	{"end-empty-line", "an empty line ends the agent (its input left open): exit 0 within the bound", endEmptyLine},
	{"end-eof", "EOF on its input (a half-close without an empty line) ends the agent: exit 0 within the bound", endEOF},
	{"end-after-work", "after jobs and #idle, the scheduler's end (empty line, half-close) makes the agent exit 0 within the bound", endAfterWork},
	{"lock", "while it delivers, the agent holds each recipient of the job locked: '~' and its PID right-aligned in 6 columns", lock},
	{"marks", "each reported recipient is marked '+', '-' or ' ' by its status word, PID columns blanked; ok2/error2 come with a d line; nothing else changes", marks},
	{"report-keys", "reports name inum/offset: the file's number without hash directories, the offset of the letter r; one per recipient, before the #hungry", reportKeys},
	{"other-recipients", "recipients of other channels and hosts in the same file get no report and are left untouched", otherRecipients},
	{"resync-missing", "a job whose control file does not exist is answered '#resync path' and #hungry", resyncMissing},
	{"resync-done", "a job whose recipients are all done is answered '#resync path', the file untouched", resyncDone},
	{"resync-locked", "a recipient locked by another live process is neither taken nor touched: '#resync path'", resyncLocked},
	{"unknown-format", "a control file with unknown '@' flag bits is refused: '#resync path', nothing locked, marked or reported", unknownFormat},
	{"partial-line", "a partial last line (no newline, then EOF) is discarded: nothing done, exit 0 within the bound", partialLine},
}

// job sends the job line for m and reads the answer up to its #hungry.
func (c *conv) job(m *msg) (answer, error) {
	c.send(c.jobLine(m.rel))
	return c.reply("job "+m.rel, false)
}

// deliver runs job m and requires every recipient reported once.
func (c *conv) deliver(m *msg) (answer, error) {
	a, err := c.job(m)
	if err != nil {
		return a, err
	}
	return a, m.checkReports(a, map[int64]bool{}, true)
}

// startFirst starts the agent and reads its first #hungry.
func (c *conv) startFirst() error {
	if err := c.start(); err != nil {
		return err
	}
	return c.first()
}

func firstHungry(c *conv) error {
	return c.startFirst()
}

func earlyJob(c *conv) error {
	m, err := c.po.message(0, mine, mine)
	if err != nil {
		return err
	}
	if err := c.start(); err != nil {
		return err
	}
	c.send(c.jobLine(m.rel))
	if err := c.first(); err != nil {
		return err
	}
	a, err := c.reply("job "+m.rel+", written before the first #hungry", false)
	if err != nil {
		return err
	}
	return m.checkReports(a, map[int64]bool{}, true)
}

// countHungry ends the agent's input and checks, once it has exited (or
// the bound ran out), that the #hungry lines it wrote were one more than
// the lines it was sent.
func (c *conv) countHungry() error {
	c.end()
	if _, err := c.waitExit(c.k.cfg.ExitBound); err != nil && !errors.Is(err, errTimeout) && !c.exited {
		return err
	}
	if want := 1 + c.answers; c.hungry != want {
		return fmt.Errorf("the agent wrote %d #hungry for %d lines (jobs and #idle); want %d, the first and one per line", c.hungry, c.answers, want)
	}
	return nil
}

func hungryPerLine(c *conv) error {
	var ms []*msg
	for _, n := range []int{1, 2, 1} {
		m, err := c.po.message(0, slices.Repeat([]int{mine}, n)...)
		if err != nil {
			return err
		}
		ms = append(ms, m)
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	for _, m := range ms {
		a, err := c.job(m)
		if err != nil {
			return err
		}
		// A report of an earlier job here means that job's #hungry came
		// before its reports (or an extra #hungry was sent).
		if err := m.checkReports(a, map[int64]bool{}, true); err != nil {
			return fmt.Errorf("between the job line and its #hungry: %w", err)
		}
	}
	c.send("#idle")
	a, err := c.reply("#idle", false)
	if err != nil {
		return err
	}
	if len(a.reports) > 0 {
		return fmt.Errorf("reports after the last job's #hungry: %v", keys(a.reports))
	}
	return c.countHungry()
}

func overfeed(c *conv) error {
	var ms []*msg
	var lines []string
	for _, n := range []int{1, 2, 1} {
		m, err := c.po.message(0, slices.Repeat([]int{mine}, n)...)
		if err != nil {
			return err
		}
		ms = append(ms, m)
		lines = append(lines, c.jobLine(m.rel))
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	c.send(append(lines, "#idle")...) // one write
	for _, m := range ms {
		a, err := c.reply("job "+m.rel+" of the burst", false)
		if err != nil {
			return err
		}
		if err := m.checkReports(a, map[int64]bool{}, true); err != nil {
			return fmt.Errorf("in the answer to the burst's job %s: %w", m.rel, err)
		}
	}
	a, err := c.reply("the burst's #idle", false)
	if err != nil {
		return err
	}
	if len(a.reports) > 0 {
		return fmt.Errorf("reports in the answer to #idle: %v", keys(a.reports))
	}
	return c.countHungry()
}

func idleResume(c *conv) error {
	m1, err := c.po.message(0, mine)
	if err != nil {
		return err
	}
	m2, err := c.po.message(1, mine)
	if err != nil {
		return err
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	for _, m := range []*msg{m1, m2} {
		c.send("#idle")
		a, err := c.reply("#idle", false)
		if err != nil {
			return err
		}
		if len(a.reports)+len(a.resyncs) > 0 {
			return fmt.Errorf("the answer to #idle holds reports or #resync")
		}
		if _, err := c.deliver(m); err != nil {
			return fmt.Errorf("after #idle: %w", err)
		}
	}
	return nil
}

// exited0 waits for the agent to exit after the end of its input and
// requires status 0.
func (c *conv) exited0() error {
	lines, err := c.waitExit(c.k.cfg.ExitBound)
	if err != nil {
		return err
	}
	for _, l := range lines {
		if k := kindOf(l); k == lineReport || k == lineResync {
			return fmt.Errorf("after the end of its input the agent wrote %q", l)
		}
	}
	if st := exitStatus(c.exit); st != "0" {
		return fmt.Errorf("the agent exited with status %s, want 0 at the end of work", st)
	}
	return nil
}

func endEmptyLine(c *conv) error {
	if err := c.startFirst(); err != nil {
		return err
	}
	c.send("")
	c.endAt = time.Now()
	return c.exited0()
}

func endEOF(c *conv) error {
	if err := c.startFirst(); err != nil {
		return err
	}
	c.closeInput("")
	return c.exited0()
}

func endAfterWork(c *conv) error {
	m, err := c.po.message(0, mine, mine)
	if err != nil {
		return err
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	if _, err := c.job(m); err != nil {
		return err
	}
	c.send("#idle")
	if _, err := c.reply("#idle", false); err != nil {
		return err
	}
	c.end()
	return c.exited0()
}

// lockPoll is how often the lock case looks at the control file.
const lockPoll = 2 * time.Millisecond

func lock(c *conv) error {
	m, err := c.po.message(0, mine, mine)
	if err != nil {
		return err
	}
	body, err := c.po.fifoBody(m)
	if err != nil {
		return err
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	c.send(c.jobLine(m.rel))
	// The FIFO has no writer, so an agent that opens the body blocks in
	// open(2) until the kit feeds it: its locks hold still to be read. A
	// reading counts when it equals the one before (an agent may write a
	// lock a byte at a time); one naming the agent ends the wait, any other
	// is judged only if it is still what the file says when the agent
	// answers or the time is up.
	pid := c.proc.Pid()
	tick := time.NewTicker(lockPoll)
	defer tick.Stop()
	timeout := time.NewTimer(c.k.cfg.Timeout)
	defer timeout.Stop()
	var seen, prev []byte
	answered := false
wait:
	for {
		select {
		case ev := <-c.events:
			l, err := c.take(ev)
			if errors.Is(err, errAside) || err == nil && kindOf(l) == lineComment {
				continue
			}
			c.hold(l, err)
			answered = true
			break wait
		case <-tick.C:
			cur, all := m.lockedLines()
			seen = nil
			if all && bytes.Equal(cur, prev) {
				seen = cur
				if m.heldBy(cur, pid) {
					break wait
				}
			}
			prev = cur
		case <-timeout.C:
			break wait
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
	var lockErr error
	if seen != nil {
		lockErr = m.checkLocked(seen, pid, c.tr.note)
	}
	// Only now may the agent have its body.
	stop := c.feedFIFO(m.body, body)
	defer stop()
	switch {
	case lockErr != nil:
		return lockErr
	case seen == nil && !answered:
		c.reply("job "+m.rel, false) // for the transcript
		return fmt.Errorf("within %s the job's recipients were not all locked, and the agent did not answer; an agent locks them before it opens the message body (which the kit feeds only once it has seen the locks)", c.k.cfg.Timeout)
	}
	a, err := c.reply("job "+m.rel, false)
	if err != nil {
		return err
	}
	if err := m.checkReports(a, map[int64]bool{}, false); err != nil {
		return err
	}
	if seen == nil {
		return skipf("the agent answered the job without opening the message body (a FIFO the kit would have fed), so its locks could not be seen while it worked")
	}
	return nil
}

// feedFIFO writes body into the FIFO at path as soon as a reader opens it
// (or at once if one is waiting), then closes it so the reader sees EOF.
// stop gives up on a reader that never came and waits for the feeder.
func (c *conv) feedFIFO(path string, body []byte) (stop func()) {
	done := make(chan struct{})
	var stopping atomic.Bool
	go func() {
		defer close(done)
		// Blocks until a reader opens the FIFO (stop plays one).
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			c.tr.note("feeding the message body: %v", err)
			return
		}
		defer f.Close()
		if stopping.Load() {
			return
		}
		c.tr.note("the message body is open for reading: the kit writes it and closes the FIFO")
		if _, err := f.Write(body); err != nil {
			c.tr.note("writing the body: %v", err)
		}
	}()
	return func() {
		stopping.Store(true)
		if r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-done
			r.Close()
		}
		<-done
	}
}

func marks(c *conv) error {
	m1, err := c.po.message(0, mine, mineSuccess, mine)
	if err != nil {
		return err
	}
	m2, err := c.po.message(0, mine)
	if err != nil {
		return err
	}
	if err := os.Remove(m2.body); err != nil {
		return err
	}
	c.tr.note("the body of %s is removed: a missing message", m2.rel)
	if err := c.startFirst(); err != nil {
		return err
	}
	a, err := c.deliver(m1)
	if err != nil {
		return err
	}
	got, err := m1.checkMarks(a.reports)
	if err != nil {
		return err
	}
	c.tr.note("marks: %s", got)
	if a, err = c.job(m2); err != nil {
		return err
	}
	if err := m2.checkReports(a, map[int64]bool{}, false); err != nil {
		return err
	}
	if got, err = m2.checkMarks(a.reports); err != nil {
		return err
	}
	c.tr.note("marks with the body missing: %s (resync %v)", got, a.resyncs)
	return nil
}

func reportKeys(c *conv) error {
	m1, err := c.po.message(2, mine, mine, mine)
	if err != nil {
		return err
	}
	m2, err := c.po.message(1, mine)
	if err != nil {
		return err
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	for _, m := range []*msg{m1, m2} {
		if _, err := c.deliver(m); err != nil {
			return err
		}
	}
	return nil
}

func otherRecipients(c *conv) error {
	m, err := c.po.message(0, mine, otherHost, otherChan, mine)
	if err != nil {
		return err
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	if _, err := c.deliver(m); err != nil {
		return err
	}
	_, _, err = m.checkOthers()
	return err
}

// resynced requires the answer to be '#resync rel' and no report.
func resynced(a answer, rel string) error {
	if len(a.reports) > 0 {
		return fmt.Errorf("reports %v for a job the agent cannot use", keys(a.reports))
	}
	if !slices.Contains(a.resyncs, rel) {
		if len(a.resyncs) > 0 {
			return fmt.Errorf("#resync %q, want the path as sent, %q", a.resyncs[0], rel)
		}
		return fmt.Errorf("no '#resync %s' for a job the agent cannot use", rel)
	}
	return nil
}

func resyncMissing(c *conv) error {
	if err := c.startFirst(); err != nil {
		return err
	}
	rel := "999999999"
	c.send(c.jobLine(rel))
	a, err := c.reply("job "+rel, false)
	if err != nil {
		return err
	}
	return resynced(a, rel)
}

func resyncDone(c *conv) error {
	m, err := c.po.message(1, mine, mine)
	if err != nil {
		return err
	}
	return resyncAfter(c, m, markAll(m, '+'))
}

func resyncLocked(c *conv) error {
	m, err := c.po.message(0, mine)
	if err != nil {
		return err
	}
	// The kit itself is the live process holding the lock.
	return resyncAfter(c, m, lockAll(m, os.Getpid()))
}

// resyncAfter feeds m, prepared so that nothing in it is the agent's to
// take (prepared is the preparation's error), and checks the agent answers
// #resync and leaves the file untouched.
func resyncAfter(c *conv, m *msg, prepared error) error {
	if prepared != nil {
		return prepared
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	a, err := c.job(m)
	if err != nil {
		return err
	}
	if err := resynced(a, m.rel); err != nil {
		return err
	}
	return m.unchanged()
}

func unknownFormat(c *conv) error {
	m, err := c.po.message(0, mine)
	if err != nil {
		return err
	}
	// Bit 0x10 is unknown to every reader of this format version.
	if err := rewriteFlags(m, "@ 0x00000017"); err != nil {
		return err
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	c.send(c.jobLine(m.rel))
	a, err := c.reply("job "+m.rel, true)
	if err != nil {
		return err
	}
	if !a.hungry {
		c.tr.note("the agent stopped after refusing the file, as ZMailer's agents do")
	}
	if err := resynced(a, m.rel); err != nil {
		return err
	}
	return m.unchanged()
}

func partialLine(c *conv) error {
	m, err := c.po.message(0, mine)
	if err != nil {
		return err
	}
	if err := c.startFirst(); err != nil {
		return err
	}
	c.closeInput(c.jobLine(m.rel))
	if err := c.exited0(); err != nil {
		return err
	}
	return m.unchanged()
}

func keys(rs []report.Line) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d/%d", r.Inum, r.Offset)
	}
	return out
}

// rewriteFlags replaces m's '@' line (same length) by line.
func rewriteFlags(m *msg, line string) error {
	b := append([]byte(nil), m.orig...)
	if !strings.HasPrefix(string(b), "@ ") || len(b) < len(line) || b[len(line)] != '\n' {
		return fmt.Errorf("kit: %s does not start with an '@' line of %d bytes", m.rel, len(line))
	}
	copy(b, line)
	return writeBack(m, b)
}

// markAll sets the status byte of each of m's own recipients.
func markAll(m *msg, st byte) error {
	b := append([]byte(nil), m.orig...)
	for _, off := range m.mine {
		b[off+1] = st
	}
	return writeBack(m, b)
}

// lockAll locks m's own recipients for pid.
func lockAll(m *msg, pid int) error {
	b := append([]byte(nil), m.orig...)
	pw := m.pidWidth()
	for _, off := range m.mine {
		b[off+1] = '~'
		if pw > 0 {
			copy(b[off+2:], fmt.Sprintf("%*d", pw, pid))
		}
	}
	return writeBack(m, b)
}

// writeBack replaces m's control file by b, which keeps m's r lines at
// their offsets (it may not parse: unknown flags).
func writeBack(m *msg, b []byte) error {
	if err := os.WriteFile(m.path, b, 0o644); err != nil {
		return err
	}
	m.orig = b
	return nil
}

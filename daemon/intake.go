package daemon

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"zsched/admission"
	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
	"zsched/mailq"
)

// The intake: the way from the queue directory into the core (DESIGN §2
// steps 1–2, §8).
//
// Names of control files come from NEW datagrams, in arrival order, and
// from the directory scan, the backstop that also reads the queue at start.
// They wait in one bounded FIFO and are read from it only while the core
// holds fewer than message_active_limit messages and recipient_active_limit
// recipients (Postfix's qmgr_message_active_limit and
// qmgr_message_recipient_limit). Whatever does not fit waits on disk:
//
//   - the scan is a resumable pass (ctlfile.Scanner) that takes names only
//     while the FIFO has room, so it holds one directory batch, never the
//     whole queue, and pauses where it is while the core is full;
//   - a NEW datagram that finds the FIFO full is dropped, and another pass
//     is started once the current one ends, so the file is still found.
//
// Files announced by NEW are thus read in arrival order; files found only
// by a pass (at start, or after an overflow) in directory order, which is
// what ZMailer and Postfix do with a queue they find on disk.
//
// A control file is read whole, never in part: a message is admitted while
// the counts are below the limits, so one message may overshoot the
// recipient limit by its own size, and a message larger than the limit is
// still read once the core has room. In return every message in core is
// complete, and the ring's preemption estimates (entries per job) are exact.
//
// Work per loop turn is bounded (readBatch files, scanStep names), so agent
// events are served between two steps and delivery starts long before a
// scan of a large queue ends. Every batch, even of one file, is read on
// other goroutines (one per CPU for a large one: fetch) and handed to the
// core in order by Run's goroutine alone, which never waits on a file: a
// FIFO (or any non-regular file) announced by NEW is refused unread and
// left where it is, a file on a disk that hangs holds up the intake but
// not agents, operators or signals.
//
// What a read can meet, and what becomes of the file:
//
//   - a name that is not a control file's ("12345.bak"): ignored;
//   - not a regular file (ctlfile.ErrNotRegular): left where it is,
//     logged (rate-limited); the scan never lists it;
//   - malformed, body missing for ctlfile.BodyWait (younger, it is a
//     transient error: its body may come after it), or larger than
//     max_control_size (ctlfile.MalformedError): moved to bad/ with its
//     body and a .why;
//   - a line locked by a live process (ctlfile.LockError): read again
//     later (admission.LockRetryAt); a lock held by a process that is not
//     one of our agents is judged stale by rule (admission.JudgeLocks)
//     and reset, its holder killed first if it is provably an earlier
//     scheduler's agent (killOrphans);
//   - any other error (EMFILE, ENFILE, EIO, EACCES, ENOMEM…): transient,
//     read again with a doubling delay (admission.ReadRetryDelay),
//     logged once when it starts and once when it ends.
//
// A file that waits (locked or erring) is listed in mailq's footer and
// answers WHY with the reason. A recipient whose host or address is longer
// than RFC 5321 allows — more than an agent may be fed, and what no server
// accepts — fails at once with a d line and a DSN (admission.RefuseOverlong).
//
// What is decided here is package admission's: the active limits (its
// Gate), the delays before a file is read again, whether a lock is stale,
// and the startup read; this file carries the decisions out on the queue.

// readBatch bounds how many control files are read between two looks at
// agent events.
const readBatch = 256

// startBatch is readBatch while the queue found at start is read: reading
// then has priority over feeding (a turn of it takes some 10–50 ms), so
// that the core soon knows the whole queue; the first job lines still go
// out after the first batch.
const startBatch = 4096

// scanStep bounds how many names one turn takes from the scan.
const scanStep = 1024

// pendingMax bounds the names waiting to be read. Reading is what keeps
// pace with delivery; a longer FIFO would only hold what the disk holds.
const pendingMax = 8192

type delayed struct {
	rel string
	at  time.Time
}

// waitState is why a file waits outside the core (in later), for mailq,
// WHY and the log.
type waitState struct {
	why      string    // for people: "locked by pid 4242, not ours, since …"
	since    time.Time // when it began to wait
	failures int       // transient read errors in a row
	lockPID  int       // the lock that keeps it waiting, logged once per pid
	next     time.Time // when it is read again
}

// fileIDs are a message's files as read (ctlfile.File.Control, .Body).
type fileIDs struct {
	control, body ctlfile.FileID
	qid           string // the message's queue id (queue.go)
}

// intake is the Daemon's reading state; only Run's goroutine touches it.
type intake struct {
	max     int      // FIFO capacity: pendingMax, smaller in tests
	fifo    []string // names to read, oldest at fifo[head]
	head    int
	known   map[string]bool // names in fifo or in later: read once
	later   []delayed       // files a live agent holds, to read again
	scan    *ctlfile.Scanner
	rescan  bool      // a name was dropped: pass again after this one
	scanAt  time.Time // when the next pass starts, while none runs
	batch   []string
	scanned int // names the current pass queued

	inflight *fetchJob // a batch being read on other goroutines
	ready    []fetched // read, waiting for room in core, in order

	// gate admits files into the core under the active limits.
	gate *admission.Gate

	// The first pass: how fast the queue found at start was read.
	initial   bool
	started   time.Time
	firstRead int
	scanEnded time.Time

	// The startup read: while on, the core's rings are capped at
	// startup_maxring.
	startup admission.Startup

	// removing holds the names whose files the remover works on
	// (remove.go): no scan reads them meanwhile, since a finished
	// message would be read as new. A name announced by NEW (or found by
	// a scan) meanwhile may be a new message under a reused inode
	// number: true, and it is read once the removal is done.
	removing map[string]bool
	// waiting is why each file in later waits.
	waiting map[string]*waitState
	// breaks holds the locks judged stale, for the next read of the file.
	breaks map[string]*ctlfile.LockError
	// ids are the identities of the files of the messages in core, as
	// read: Remove checks them before it unlinks (complete.go).
	ids map[int64]fileIDs
	// gone are files an operator killed while on disk (queue.go), by
	// name, as read: a read of one of them already under way is dropped.
	gone map[string]ctlfile.FileID

	onStep func() // tests: called after every intake step
}

func newIntake(s *config.Scheduler) intake {
	return intake{max: pendingMax, known: make(map[string]bool), gate: admission.NewGate(limits(s)),
		startup: admission.NewStartup(s.StartupMaxRing), initial: true,
		removing: make(map[string]bool), waiting: make(map[string]*waitState),
		breaks: make(map[string]*ctlfile.LockError), ids: make(map[int64]fileIDs),
		gone: make(map[string]ctlfile.FileID)}
}

// limits are the gate's limits under s.
func limits(s *config.Scheduler) admission.Limits {
	return admission.Limits{Messages: s.MessageActiveLimit, Recipients: s.RecipientActiveLimit}
}

func (in *intake) pending() int { return len(in.fifo) - in.head }

// beyond reports whether files may wait on disk beyond the core: names to
// read, files read and waiting for room, files waiting to be read again, or
// a pass (or one owed) that may find more. Otherwise every control file
// known is in core or being removed, and the census has nothing to count.
func (in *intake) beyond() bool {
	return in.pending() > 0 || len(in.ready) > 0 || in.inflight != nil || len(in.later) > 0 ||
		in.scan != nil || in.rescan
}

func (in *intake) push(rel string) {
	in.known[rel] = true
	in.fifo = append(in.fifo, rel)
}

func (in *intake) pop() string {
	rel := in.fifo[in.head]
	in.fifo[in.head] = ""
	in.head++
	if in.head == len(in.fifo) {
		in.fifo, in.head = in.fifo[:0], 0
	} else if in.head >= 1024 && in.head*2 >= len(in.fifo) {
		n := copy(in.fifo, in.fifo[in.head:])
		clear(in.fifo[n:])
		in.fifo, in.head = in.fifo[:n], 0
	}
	delete(in.known, rel)
	return rel
}

// startScan begins a pass over the queue unless one runs.
func (d *Daemon) startScan(now time.Time) {
	in := &d.in
	if in.scan != nil {
		return
	}
	if in.initial && in.started.IsZero() {
		in.started = now
		in.startup.Begin(now)
	}
	in.scan = d.spool.NewScanner()
	in.rescan = false
	in.scanned = 0
}

// scanSome takes names from the pass in progress while the FIFO has room.
func (d *Daemon) scanSome(now time.Time) {
	in := &d.in
	room := in.max - in.pending()
	if in.scan == nil || room <= 0 {
		return
	}
	names, done, err := in.scan.Next(in.batch[:0], min(room, scanStep))
	for _, rel := range names {
		if in.known[rel] {
			continue
		}
		if _, ok := in.removing[rel]; ok {
			in.removing[rel] = true // the old file, or a new one: look after
			continue
		}
		if inum, ok := inumOf(rel); ok && d.core.Has(inum) {
			continue
		}
		in.push(rel)
		in.scanned++
	}
	clear(names)
	in.batch = names[:0]
	if err != nil {
		d.log.Error("scanning the queue", "error", err)
	}
	if !done {
		return
	}
	in.scan = nil
	if in.scanned > 0 {
		d.log.Debug("scan found files", "new", in.scanned)
	}
	// Messages that left the core without completing (dropped after a
	// resync storm, their file gone) leave their identities behind.
	for inum := range in.ids {
		if !d.core.Has(inum) {
			delete(in.ids, inum)
		}
	}
	if in.initial && in.scanEnded.IsZero() {
		in.scanEnded = now
	}
	scanEvery := d.cfg.Scheduler.ScanInterval.D()
	if scanEvery <= 0 {
		scanEvery = 10 * time.Second
	}
	in.scanAt = now.Add(scanEvery)
	if in.rescan {
		in.scanAt = now
	}
}

// enqueueRead queues a file announced by NEW (or written by the daemon
// itself) to be read. With the FIFO full it is left to the scan.
func (d *Daemon) enqueueRead(rel string) {
	if !ctlfile.IsControlPath(rel) {
		// Outside the queue, or not a control file's name ("12345.tmp").
		if ok, n := d.noise.allow("notify:"+rel, d.now()); ok {
			d.log.Warn("notify names no control file; ignored", "path", rel, "times", n+1)
		}
		return
	}
	in := &d.in
	if _, ok := in.removing[rel]; ok {
		in.removing[rel] = true // read it once its old files are gone
		return
	}
	if in.known[rel] {
		return
	}
	if in.pending() >= in.max {
		in.rescan = true
		return
	}
	in.push(rel)
}

// intakeTick starts a pass when it is time and re-queues files whose live
// lock delay has passed.
func (d *Daemon) intakeTick(now time.Time) {
	in := &d.in
	if in.scan == nil && !now.Before(in.scanAt) {
		d.startScan(now)
	}
	keep := in.later[:0]
	for _, l := range in.later {
		if now.Before(l.at) {
			keep = append(keep, l)
			continue
		}
		delete(in.known, l.rel)
		d.enqueueRead(l.rel)
	}
	clear(in.later[len(keep):])
	in.later = keep
	d.sweepDue(now)
}

// room reports whether the core may take another message. Messages that
// left the core unnoticed (reconciled by the gate) leave their identities
// behind: forgotten here.
func (d *Daemon) room(now time.Time) bool {
	return d.in.gate.Room(now, d.core, func(inum int64) { delete(d.in.ids, inum) })
}

// intakeStep does one turn of bounded intake work: names from the scan,
// then files into the core while it has room. The caller applies the
// core's actions afterwards.
func (d *Daemon) intakeStep() {
	now := d.now()
	in := &d.in
	d.scanSome(now)
	// A batch read on other goroutines since the last turn joins the
	// files already read, after them: arrival order is kept.
	// Run's loop wakes when it is read (fetchDone); until then the loop
	// serves agents and operators rather than wait.
	if in.inflight != nil && in.inflight.finished() {
		if len(in.ready) == 0 {
			in.ready = in.inflight.out // not copied: a batch is large
		} else {
			in.ready = append(in.ready, in.inflight.out...)
		}
		in.inflight = nil
	}
	// Start the next batch before handing this one to the core, so that
	// reading overlaps placing. As many files as can still be messages in
	// core, a batch at most; the recipient limit is known only once they
	// are read, and what does not fit waits in ready, already read (at
	// most two batches).
	if in.inflight == nil && in.pending() > 0 && len(in.ready) <= startBatch && d.room(now) {
		most := readBatch
		if in.initial {
			most = startBatch
		}
		n := min(most, in.pending(), d.cfg.Scheduler.MessageActiveLimit-d.core.Messages()-len(in.ready))
		batch := make([]fetched, 0, max(n, 0)) // n < 0: a reload lowered the limit
		for range n {
			rel := in.pop()
			if inum, ok := inumOf(rel); ok && d.core.Has(inum) {
				continue
			}
			in.known[rel] = true // until admitted
			batch = append(batch, fetched{rel: rel, brk: in.breaks[rel]})
			delete(in.breaks, rel)
		}
		if len(batch) > 0 {
			// The limit may have changed with a reload.
			d.spool.SetMaxControlSize(int64(d.cfg.Scheduler.MaxControlSize))
			in.inflight = d.startFetch(batch)
		}
	}
	for n := 1; len(in.ready) > 0 && d.room(now); n++ {
		r := in.ready[0]
		in.ready[0] = fetched{}
		in.ready = in.ready[1:]
		d.admit(now, r)
		if n%256 == 0 {
			// A turn at start places thousands of messages: operators
			// and the first job lines do not wait for all of them.
			d.apply()
			d.serveWaiting()
		}
		if n%admitClock == 0 {
			now = d.now()
		}
	}
	if len(in.ready) == 0 {
		in.ready = nil // a large batch must not pin its array
	}
	// Names freed room for more of the pass.
	d.scanSome(now)
	if in.initial && !in.scanEnded.IsZero() && in.pending() == 0 && in.inflight == nil && len(in.ready) == 0 {
		d.in.initial = false
		secs := max(d.now().Sub(d.in.started).Seconds(), 1e-6)
		st := &StartupRead{Files: d.in.firstRead, Seconds: secs,
			FilesPerSecond: int(float64(d.in.firstRead) / secs), JobsDispatched: d.core.Latency().Count()}
		d.stats.StartupRead = st
		d.log.Info("queue read at start", "files", st.Files,
			"seconds", st.Seconds, "files_per_second", st.FilesPerSecond,
			"jobs_dispatched", st.JobsDispatched)
	}
	d.startupCheck(now)
	if d.in.onStep != nil {
		d.in.onStep()
	}
}

// intakeBusy reports whether intake work is ready now: the loop must not
// sleep.
func (d *Daemon) intakeBusy() bool {
	in := &d.in
	if in.scan != nil && in.pending() < in.max {
		return true
	}
	if in.pending() == 0 && len(in.ready) == 0 {
		return false
	}
	return !in.gate.Full(d.core)
}

// intakeIdle reports whether nothing is known to wait for reading: with
// -drain the queue is then empty once the core is.
func (d *Daemon) intakeIdle() bool {
	return d.in.pending() == 0 && d.in.inflight == nil && len(d.in.ready) == 0 && len(d.in.later) == 0 && d.in.scan == nil
}

// intakeWake returns the earlier of wake (zero: none) and the intake's
// next time: a pass, or a delayed file; never zero.
func (d *Daemon) intakeWake(wake time.Time) time.Time {
	in := &d.in
	if wake.IsZero() {
		// A pass paused on a full FIFO resumes on events, not on time.
		wake = d.now().Add(time.Minute)
	}
	if in.scan == nil && in.scanAt.Before(wake) {
		wake = in.scanAt
	}
	if in.pending() > 0 || len(in.ready) > 0 || in.inflight != nil {
		// Held back by a count that may be stale: look again.
		if at := in.gate.Wake(); !at.IsZero() && at.Before(wake) {
			wake = at
		}
	}
	for _, l := range in.later {
		if l.at.Before(wake) {
			wake = l.at
		}
	}
	if at := d.debris.at; !at.IsZero() && at.Before(wake) {
		wake = at // the periodic sweep (sweep.go)
	}
	if at := in.startup.Wake(); !at.IsZero() && at.Before(wake) {
		wake = at
	}
	return wake
}

// startupCheck ends the startup read (admission.Startup) when one of its
// ends is reached: the core's rings open to their maxring.
func (d *Daemon) startupCheck(now time.Time) {
	in := &d.in
	why := in.startup.Check(now, !in.initial, in.gate.Full(d.core))
	if why == "" {
		return
	}
	d.core.SetRingCap(now, in.startup.RingCap())
	st := &StartupEnd{Reason: why, FilesRead: in.firstRead, Seconds: now.Sub(in.started).Seconds(),
		JobsDispatched: d.core.Latency().Count()}
	d.stats.StartupEnd = st
	d.log.Info("startup read over: delivery opens to the configured limits", "reason", st.Reason,
		"files_read", st.FilesRead, "seconds", st.Seconds,
		"jobs_dispatched", st.JobsDispatched)
}

// settled lowers the recipient count for an outcome that ends a recipient.
func (d *Daemon) settled(o core.Outcome) {
	if o.Final() {
		d.in.gate.Settled(o.Inum)
	}
}

// left releases what a message that left the core still counted.
func (d *Daemon) left(inum int64) { d.in.gate.Left(inum) }

// fetched is a control file read from the queue, or why it could not be.
type fetched struct {
	rel string
	brk *ctlfile.LockError // locks judged stale: read breaking them
	f   *ctlfile.File
	err error
	// a is f's arrival, made beside the loop with the read (made says
	// so); the loop adds to it what is loop state (holds, the retry
	// journal), then refuses overlong addresses, as when it made it.
	a    core.Arrival
	made bool
}

// parallelFetch is the smallest batch worth reading on other goroutines.
const parallelFetch = 32

// fetchJob is a batch of control files being read and parsed on one
// goroutine per CPU: reading is system calls and parsing, independent per
// file, and touches no scheduling state (Spool's methods may run on any
// goroutine). Run's goroutine hands the results to the core, in order.
type fetchJob struct {
	out  []fetched
	wg   sync.WaitGroup
	done chan struct{} // closed once every file of the batch is read
}

func (d *Daemon) startFetch(batch []fetched) *fetchJob {
	j := &fetchJob{out: batch, done: make(chan struct{})}
	workers := max(1, min(runtime.GOMAXPROCS(0), len(batch)/parallelFetch))
	for w := range workers {
		j.wg.Add(1)
		go func() {
			asHelper()
			defer j.wg.Done()
			for i := w; i < len(j.out); i += workers {
				o := &j.out[i]
				if o.brk != nil {
					o.f, o.err = d.spool.ReadBreaking(o.rel, o.brk)
				} else {
					o.f, o.err = d.spool.Read(o.rel)
				}
				if o.err == nil && (len(o.f.ETRNs) == 0 || o.f.ID != "") {
					o.a = arrival(o.rel, o.f)
					o.made = true
				}
			}
		}()
	}
	go func() {
		asHelper()
		j.wg.Wait()
		close(j.done)
	}()
	return j
}

// finished reports whether every file of the batch is read.
func (j *fetchJob) finished() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// fetchDone is closed when the batch being read is ready; nil when none is
// being read, which Run's select never picks.
func (d *Daemon) fetchDone() <-chan struct{} {
	if d.in.inflight == nil {
		return nil
	}
	return d.in.inflight.done
}

// admitClock is how many files intakeStep admits on one clock read: a few
// µs each, so a message's arrival time is late by tens of µs at most,
// and the loop reads the clock once per 16 messages rather than once each.
// It divides 256 (intakeStep applies the core's actions every 256 files,
// which hands the core a newer time): the clock is read again right after.
const admitClock = 16

// admit hands a file read from the queue to the core at now. A malformed
// file is moved aside with the reason; nothing is deleted.
func (d *Daemon) admit(now time.Time, r fetched) {
	rel, f, err := r.rel, r.f, r.err
	delete(d.in.known, rel)
	if d.in.initial {
		d.in.firstRead++
	}
	var le *ctlfile.LockError
	var me *ctlfile.MalformedError
	switch {
	case err == nil:
	case errors.Is(err, ctlfile.ErrNotFound):
		d.doneWaiting(rel, "")
		return
	case errors.As(err, &le):
		d.locked(now, rel, le)
		return
	case errors.As(err, &me):
		d.doneWaiting(rel, "")
		d.log.Error("bad control file moved aside", "msg", rel, "error", err)
		if qerr := d.spool.Quarantine(rel, me.Control, err); qerr != nil {
			d.log.Error("cannot quarantine control file", "msg", rel, "error", qerr)
		}
		return
	case errors.Is(err, ctlfile.ErrNotRegular), errors.Is(err, ctlfile.ErrBadPath):
		d.doneWaiting(rel, "")
		if ok, n := d.noise.allow("file:"+rel, now); ok {
			d.log.Warn("not a control file; left where it is", "path", rel, "error", err, "times", n+1)
		}
		return
	default:
		d.readFailed(now, rel, err)
		return
	}
	d.doneWaiting(rel, "read")
	if id, ok := d.in.gone[rel]; ok {
		delete(d.in.gone, rel)
		if id == f.Control {
			return // killed by the operator while it was read
		}
	}
	if len(f.ETRNs) > 0 && f.ID == "" {
		d.etrnFile(rel, f)
		return
	}
	a := r.a
	if !r.made {
		a = arrival(rel, f)
	}
	a.Held = d.msgHeld(a.QID)
	d.restoreRetry(&a, a.QID, f.Arrival)
	admission.RefuseOverlong(&a)
	if len(a.Groups) == 0 && len(a.Refused) == 0 {
		// Nothing pending: a message completed before a restart.
		d.finishFiles(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum, Diags: hasPendingDiags(f), Bounce: f.IsBounce()},
			f.Files(rel))
		return
	}
	if err := d.core.Arrive(now, a); err != nil {
		if !errors.Is(err, core.ErrDuplicate) {
			d.log.Error("cannot schedule message", "msg", a.QID, "error", err)
		}
		return
	}
	n := len(a.Refused)
	for _, g := range a.Groups {
		n += len(g.Rcpts)
	}
	d.in.gate.Admit(a.Inum, n)
	d.in.ids[a.Inum] = fileIDs{control: f.Control, body: f.Body, qid: a.QID}
}

// wait puts rel in later until at, for the reason why.
func (d *Daemon) wait(now time.Time, rel string, at time.Time, why string) *waitState {
	in := &d.in
	w := in.waiting[rel]
	if w == nil {
		w = &waitState{since: now}
		in.waiting[rel] = w
	}
	w.why, w.next = why, at
	in.known[rel] = true
	in.later = append(in.later, delayed{rel: rel, at: at})
	return w
}

// doneWaiting forgets why rel waited; how is how the wait ended, logged
// after transient errors ("": nothing to say).
func (d *Daemon) doneWaiting(rel, how string) {
	w := d.in.waiting[rel]
	if w == nil {
		return
	}
	delete(d.in.waiting, rel)
	delete(d.in.breaks, rel)
	if w.failures > 0 && how != "" {
		d.log.Info("control file read after transient errors", "msg", rel, "failures", w.failures,
			"since", w.since.UTC().Format(time.RFC3339))
	}
}

// readFailed schedules another read of rel after a transient error, with a
// delay that doubles with each failure; the first failure is logged.
func (d *Daemon) readFailed(now time.Time, rel string, err error) {
	failures := 1
	if w := d.in.waiting[rel]; w != nil {
		failures = w.failures + 1
	}
	delay := admission.ReadRetryDelay(failures)
	at := now.Add(delay)
	w := d.wait(now, rel, at, fmt.Sprintf("read error (%d in a row): %v", failures, err))
	w.failures = failures
	if failures == 1 {
		d.log.Warn("cannot read control file; it is read again later (transient error)",
			"msg", rel, "error", err, "retry_in", delay.String())
	} else {
		d.log.Debug("cannot read control file", "msg", rel, "error", err, "failures", failures, "retry_in", delay.String())
	}
}

// locked handles a file with lines locked by live processes: judged stale
// (a process that is not one of ours, by rule: admission.JudgeLocks), it
// is read again at once, breaking those locks — once the holders killed
// as an earlier scheduler's agents are gone (killOrphans); otherwise later
// (admission.LockRetryAt).
func (d *Daemon) locked(now time.Time, rel string, le *ctlfile.LockError) {
	v := admission.JudgeLocks(now, d.operator.started, d.locksOf(le), d.ownsPID(), d.lockLimits)
	if v.Stale {
		// Before a reset lets its recipients go out again; if it killed
		// one, the reset waits for its end (orphansWaited).
		if !d.killOrphans(now, rel, le, v.Reason) {
			d.breakLocks(rel, le, v.Reason)
		}
		return
	}
	at := admission.LockRetryAt(now, v)
	since := le.Changed.UTC().Format(time.RFC3339)
	why := fmt.Sprintf("locked by pid %d (one of our agents) since %s", v.PID, since)
	if !v.Ours {
		why = fmt.Sprintf("locked by pid %d, not ours, since %s; stale at %s", v.PID, since, v.StaleAt.UTC().Format(time.RFC3339))
	}
	prev := 0
	if w := d.in.waiting[rel]; w != nil {
		prev = w.lockPID
	}
	w := d.wait(now, rel, at, why)
	if !v.Ours && prev != v.PID {
		d.log.Warn("control file locked by a live process that is not one of our agents; waiting for the lock to turn stale",
			"msg", rel, "pid", v.PID, "since", since, "stale_at", v.StaleAt.UTC().Format(time.RFC3339))
	} else {
		d.log.Debug("control file locked by a live process; reading it later", "msg", rel, "pid", v.PID)
	}
	w.lockPID = v.PID
}

// breakLocks has rel read again at once, resetting its locks judged stale
// for reason.
func (d *Daemon) breakLocks(rel string, le *ctlfile.LockError, reason string) {
	for _, l := range le.Locks {
		d.log.Warn("lock held by a live process that is not one of our agents judged stale; resetting it",
			"msg", rel, "pid", l.PID, "offset", l.Offset, "since", le.Changed.UTC().Format(time.RFC3339), "reason", reason)
	}
	d.doneWaiting(rel, "")
	d.in.breaks[rel] = le
	d.in.push(rel)
}

// locksOf is what admission.JudgeLocks needs of a read's live locks, with
// when each process started (procStart) and whether it has the control
// file open (hasFileOpen).
func (d *Daemon) locksOf(le *ctlfile.LockError) admission.Locks {
	started, hasOpen := d.procStarted, d.procHasOpen
	if started == nil {
		started = procStart
	}
	if hasOpen == nil {
		hasOpen = hasFileOpen
	}
	ls := admission.Locks{Locks: make([]admission.Lock, len(le.Locks)), Changed: le.Changed, Arrival: le.Arrival}
	seen := map[int]admission.FileOpen{} // an agent locks many lines: its descriptors are read once
	for i, l := range le.Locks {
		o, ok := seen[l.PID]
		if !ok {
			o = hasOpen(l.PID, le.Control)
			seen[l.PID] = o
		}
		ls.Locks[i] = admission.Lock{PID: l.PID, Channel: l.Channel, Host: l.Host, Started: started(l.PID), FileOpen: o}
	}
	return ls
}

// ownsPID is the check admission.JudgeLocks makes: whether a PID is one of our
// agents'. The agents' process groups are to join it (issue 16, item 4).
func (d *Daemon) ownsPID() func(pid int) bool {
	if d.ownsLock != nil {
		return d.ownsLock
	}
	return func(pid int) bool {
		for _, p := range d.procs {
			if p.Pid() == pid {
				return true
			}
		}
		return false
	}
}

// lockLimits are admission.JudgeLocks' limits for a recipient: its clause's
// jobtimeout, and expiry + expiry2 (0: none).
func (d *Daemon) lockLimits(channel, host string) (time.Duration, time.Duration) {
	c := &d.cfg.Defaults
	if i, ok := d.cfg.Match(channel, host); ok {
		c = &d.cfg.Clauses[i]
	}
	expiry := time.Duration(0)
	if c.Expiry > 0 {
		expiry = c.Expiry.D() + c.Expiry2.D()
	}
	return c.JobTimeout.D(), expiry
}

// waitingLines is mailq's footer: every file known to the scheduler and
// not in core, with why it waits — none is invisible.
func (d *Daemon) waitingLines(now time.Time) []string {
	if len(d.in.waiting) == 0 {
		return nil
	}
	rels := slices.Sorted(maps.Keys(d.in.waiting))
	rels = rels[:min(len(rels), mailq.MaxWaiting)]
	ws := make([]mailq.Waiting, len(rels))
	for i, rel := range rels {
		ws[i] = d.in.waiting[rel].view(rel)
	}
	return mailq.WaitingFooter(now, ws, len(d.in.waiting))
}

// view is w as mailq shows it.
func (w *waitState) view(rel string) mailq.Waiting {
	return mailq.Waiting{Name: rel, Why: w.why, Since: w.since, Next: w.next}
}

// whyWaiting is WHY for a file that waits outside the core: nil if id
// names none. id is a path under transport/, a base name or an inode
// number, as for a message in core.
func (d *Daemon) whyWaiting(now time.Time, id string) []string {
	for _, rel := range slices.Sorted(maps.Keys(d.in.waiting)) {
		if rel != id && path.Base(rel) != id && strings.TrimSuffix(path.Base(rel), "-etrn") != id {
			continue
		}
		return mailq.WhyWaiting(now, d.in.waiting[rel].view(rel))
	}
	return nil
}

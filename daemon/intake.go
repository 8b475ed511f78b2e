package daemon

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
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
// scan of a large queue ends. A large batch is read on one goroutine per
// CPU (fetch) and handed to the core in order by Run's goroutine alone.

// liveLockDelay is how long a file with a live agent's lock waits before it
// is read again (ZMailer: 32 s).
const liveLockDelay = 32 * time.Second

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

// reconcileEvery is how often, at most, the recipient count is checked
// against the core while the limit holds files back.
const reconcileEvery = time.Second

type delayed struct {
	rel string
	at  time.Time
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

	// Recipients in core by message, as counted at admission and lowered
	// by each final outcome: the core counts messages, not recipients.
	rcpts      map[int64]int
	total      int
	reconciled time.Time

	// The first pass: how fast the queue found at start was read.
	initial   bool
	started   time.Time
	firstRead int
	scanEnded time.Time

	// The startup read (startupConfig): while on, the core runs under
	// startup_maxring; it ends at startupEnd at the latest.
	startup    bool
	startupEnd time.Time

	onStep func() // tests: called after every intake step
}

func newIntake() intake {
	return intake{max: pendingMax, known: make(map[string]bool), rcpts: make(map[int64]int), initial: true}
}

func (in *intake) pending() int { return len(in.fifo) - in.head }

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
		in.startupEnd = now.Add(startupMax)
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
	if strings.HasPrefix(rel, "/") || strings.Contains(rel, "..") {
		d.log.Warn("notify names a path outside the queue", "path", rel)
		return
	}
	in := &d.in
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
}

// room reports whether the core may take another message.
func (d *Daemon) room(now time.Time) bool {
	s := &d.cfg.Scheduler
	if d.core.Messages() >= s.MessageActiveLimit {
		return false
	}
	if d.in.total < s.RecipientActiveLimit {
		return true
	}
	// Messages can leave the core without a Complete (a resync storm, an
	// operator's kill, a vanished file); their recipients are released
	// here, at most once per reconcileEvery while the limit holds.
	if now.Sub(d.in.reconciled) < reconcileEvery {
		return false
	}
	d.in.reconciled = now
	for inum, n := range d.in.rcpts {
		if !d.core.Has(inum) {
			d.in.total -= n
			delete(d.in.rcpts, inum)
		}
	}
	return d.in.total < s.RecipientActiveLimit
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
		in.ready = append(in.ready, in.inflight.out...)
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
		var batch []string
		for range n {
			rel := in.pop()
			if inum, ok := inumOf(rel); ok && d.core.Has(inum) {
				continue
			}
			in.known[rel] = true // until admitted
			batch = append(batch, rel)
		}
		if len(batch) >= parallelFetch {
			in.inflight = d.startFetch(batch)
		} else {
			for _, rel := range batch {
				f, err := d.spool.Read(rel)
				in.ready = append(in.ready, fetched{rel: rel, f: f, err: err})
			}
		}
	}
	for n := 1; len(in.ready) > 0 && d.room(now); n++ {
		r := in.ready[0]
		in.ready[0] = fetched{}
		in.ready = in.ready[1:]
		d.admit(r)
		if n%256 == 0 {
			// A turn at start places thousands of messages: operators
			// and the first job lines do not wait for all of them.
			d.apply()
			d.serveWaiting()
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
		d.log.Info("queue read at start", "files", d.in.firstRead,
			"seconds", secs, "files_per_second", int(float64(d.in.firstRead)/secs),
			"jobs_dispatched", d.core.Latency().Count())
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
	s := &d.cfg.Scheduler
	return d.core.Messages() < s.MessageActiveLimit && in.total < s.RecipientActiveLimit
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
	if in.total >= d.cfg.Scheduler.RecipientActiveLimit && (in.pending() > 0 || len(in.ready) > 0 || in.inflight != nil) {
		// Held back by a count that may be stale: look again.
		if at := in.reconciled.Add(reconcileEvery); at.Before(wake) {
			wake = at
		}
	}
	for _, l := range in.later {
		if l.at.Before(wake) {
			wake = l.at
		}
	}
	if in.startup && !in.startupEnd.IsZero() && in.startupEnd.Before(wake) {
		wake = in.startupEnd
	}
	return wake
}

// The startup read. A scheduler that starts on a large queue first has to
// read it: until a message is in core nothing schedules it, not even its
// expiry or the destination's other recipients. Reading costs CPU (some
// 25 µs a file), and so does delivery (some 55 µs a recipient across the
// scheduler and its agents): at full delivery speed the scan gets half the
// machine and a queue of 100 000 files takes three times as long to read.
// So while the queue found at start is read, the read has priority:
// delivery starts at once, with the first batch, but every ring runs at
// most startup_maxring agents (default 2; 0 turns this off). The startup
// read ends, and delivery opens to the configured limits for good, at the
// first of:
//
//   - the first pass over the queue is in core (the "queue read at start"
//     log line);
//   - the core is full (message_active_limit or recipient_active_limit):
//     the rest of the queue is then read only as delivery frees room, so
//     holding delivery back would slow the read too — on a queue larger
//     than the limits, the startup read is the first core-full of it;
//   - startupMax after the start, for a slow disk.
//
// The limit is applied as the core's configuration (each clause's maxring
// lowered), so a reload during the startup read keeps it, and the end is
// an ordinary reconfiguration back to the file's values: windows and
// everything learned are kept, nothing else changes.

// startupMax bounds the startup read: past it delivery opens whatever the
// read's progress.
const startupMax = 30 * time.Second

// startupConfig returns cfg as the core runs it during the startup read:
// each clause's maxring lowered to startup_maxring. Without a limit, cfg
// itself.
func startupConfig(cfg *config.Config) *config.Config {
	n := cfg.Scheduler.StartupMaxRing
	if n <= 0 {
		return cfg
	}
	c := *cfg
	c.Clauses = slices.Clone(cfg.Clauses)
	for i := range c.Clauses {
		c.Clauses[i].MaxRing = min(c.Clauses[i].MaxRing, n)
	}
	return &c
}

// coreConfig is the configuration the core runs now: cfg, limited during
// the startup read.
func (d *Daemon) coreConfig(cfg *config.Config) *config.Config {
	if d.in.startup {
		return startupConfig(cfg)
	}
	return cfg
}

// startupCheck ends the startup read when one of its ends is reached.
func (d *Daemon) startupCheck(now time.Time) {
	in := &d.in
	if !in.startup {
		return
	}
	s := &d.cfg.Scheduler
	switch {
	case !in.initial:
		d.endStartup(now, "queue read")
	case d.core.Messages() >= s.MessageActiveLimit || in.total >= s.RecipientActiveLimit:
		d.endStartup(now, "core full")
	case !in.startupEnd.IsZero() && !now.Before(in.startupEnd):
		d.endStartup(now, "time limit")
	}
}

// endStartup opens delivery to the configured limits.
func (d *Daemon) endStartup(now time.Time, why string) {
	d.in.startup = false
	// Not an operator's reload: the core's reload lines would mislead.
	d.coreLog.mute = true
	err := d.core.Reconfigure(now, d.cfg)
	d.coreLog.mute = false
	if err != nil {
		// The same clauses route the same destinations: cannot happen.
		d.log.Error("cannot lift the startup limit", "error", err)
		return
	}
	d.log.Info("startup read over: delivery opens to the configured limits", "reason", why,
		"files_read", d.in.firstRead, "seconds", now.Sub(d.in.started).Seconds(),
		"jobs_dispatched", d.core.Latency().Count())
}

// mutable is the core's logger: the daemon mutes its informational lines
// while it reconfigures the core itself.
type mutable struct {
	hclog.Logger
	mute bool
}

func (m *mutable) Info(msg string, args ...any) {
	if !m.mute {
		m.Logger.Info(msg, args...)
	}
}

// settled lowers the recipient count for an outcome that ends a recipient.
func (d *Daemon) settled(o core.Outcome) {
	if !o.Final() {
		return
	}
	if n, ok := d.in.rcpts[o.Inum]; ok && n > 0 {
		d.in.rcpts[o.Inum] = n - 1
		d.in.total--
	}
}

// left releases what a message that left the core still counted.
func (d *Daemon) left(inum int64) {
	if n, ok := d.in.rcpts[inum]; ok {
		d.in.total -= n
		delete(d.in.rcpts, inum)
	}
}

// fetched is a control file read from the queue, or why it could not be.
type fetched struct {
	rel string
	f   *ctlfile.File
	err error
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

func (d *Daemon) startFetch(rels []string) *fetchJob {
	j := &fetchJob{out: make([]fetched, len(rels)), done: make(chan struct{})}
	for i, rel := range rels {
		j.out[i].rel = rel
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), len(rels)/parallelFetch))
	for w := range workers {
		j.wg.Add(1)
		go func() {
			defer j.wg.Done()
			for i := w; i < len(j.out); i += workers {
				j.out[i].f, j.out[i].err = d.spool.Read(j.out[i].rel)
			}
		}()
	}
	go func() {
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

// admit hands a file read from the queue to the core. A malformed file is
// moved aside with the reason; nothing is deleted.
func (d *Daemon) admit(r fetched) {
	rel, f, err := r.rel, r.f, r.err
	delete(d.in.known, rel)
	if d.in.initial {
		d.in.firstRead++
	}
	switch {
	case err == nil:
	case errors.Is(err, ctlfile.ErrNotFound):
		return
	case errors.Is(err, ctlfile.ErrLiveLock):
		d.log.Debug("control file locked by a live agent; reading it later", "msg", rel)
		d.in.known[rel] = true
		d.in.later = append(d.in.later, delayed{rel: rel, at: d.now().Add(liveLockDelay)})
		return
	default:
		d.log.Error("bad control file moved aside", "msg", rel, "error", err)
		if qerr := d.spool.Quarantine(rel, err); qerr != nil {
			d.log.Error("cannot quarantine control file", "msg", rel, "error", qerr)
		}
		return
	}
	if len(f.Turn) > 0 && f.ID == "" {
		d.turn(rel, f)
		return
	}
	a := arrival(rel, f)
	if len(a.Groups) == 0 {
		// Nothing pending: a message completed before a restart.
		d.finish(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum, Diags: hasPendingDiags(f), Bounce: f.IsBounce()})
		return
	}
	if err := d.core.Arrive(d.now(), a); err != nil {
		if !errors.Is(err, core.ErrDuplicate) {
			d.log.Error("cannot schedule message", "msg", rel, "error", err)
		}
		return
	}
	n := 0
	for _, g := range a.Groups {
		n += len(g.Rcpts)
	}
	d.in.rcpts[a.Inum] = n
	d.in.total += n
}

package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/admission"
	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
)

// Issue 16's spool-side containment, end to end through the daemon. The
// tests that need real agents share one build (TestContainment).

// logBuffer is an hclog output the test reads back; safe for the
// remover's goroutines.
type logBuffer struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func capture(t testing.TB, d *Daemon) *logBuffer {
	lb := &logBuffer{t: t}
	d.log = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: lb})
	return lb
}

// TestRemovalReadsANameAnnouncedMeanwhile (issue 16, item 1): a completed
// message's name is kept from the scan until the remover is done with it;
// a new message announced under that name meanwhile — its body got the
// inode just freed, as a DSN queued at that moment does — is read once the
// removal is taken back, not dropped (run -drain then left it queued).
func TestRemovalReadsANameAnnouncedMeanwhile(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 0, 1, false)
	t.Cleanup(d.close)
	rm := newRemover(d.spool, d.log, d.now, d.noise)
	d.rm = rm
	t.Cleanup(func() { rm.close(true) })
	rel, err := d.spool.Enqueue(&ctlfile.Message{Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "a.test", User: "u@a.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := d.spool.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	d.in.ids[f.Inum] = fileIDs{control: f.Control, body: f.Body, qid: f.QueueID()}
	d.finish(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum})
	<-rm.done // removed; Run's loop has not taken the news yet
	// The freed name is a new message's now, announced by NEW.
	if _, err := d.spool.Enqueue(&ctlfile.Message{Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "b.test", User: "v@b.test"}}}); err != nil {
		t.Fatal(err)
	}
	writeAs(t, d.spool, rel, "v@b.test")
	d.enqueueRead(rel)
	ackRemovals(d, rm)
	if d.in.pending() != 1 {
		t.Fatalf("the message announced under %s while its predecessor was removed is not queued for reading (%d queued)", rel, d.in.pending())
	}
	step(d)
	if d.core.Messages() != 1 {
		t.Fatalf("core holds %d messages, want the new one", d.core.Messages())
	}
}

// ackRemovals is what Run's loop does when the remover says it is done.
func ackRemovals(d *Daemon, rm *remover) { d.removed(rm.take()) }

// writeAs writes, under rel, a message to user: control file and body, as
// a router does.
func writeAs(t *testing.T, s *ctlfile.Spool, rel, user string) {
	t.Helper()
	name := path.Base(rel)
	ctl := fmt.Sprintf("@ 0x00000007\ni %s\no 0\nl <%s.new>\ns smtp example.org s@example.org 0\nr           smtp b.test %s 0\nm\n\n", name, name, user)
	if err := os.WriteFile(filepath.Join(s.QueueDir(), filepath.FromSlash(rel)), []byte("\nbody\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.TransportDir(), filepath.FromSlash(rel)), []byte(ctl), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTransientReadErrorIsRetried (issue 16, item 2): a control file that
// cannot be read for want of descriptors (EMFILE) is good mail: not
// quarantined, shown as waiting, and read again after a delay.
func TestTransientReadErrorIsRetried(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	lb := capture(t, d)
	now := time.Now()
	d.now = func() time.Time { return now }
	d.startScan(now)
	d.scanSome(now) // the name, before the descriptors run out
	if d.in.pending() != 1 {
		t.Fatalf("%d names queued, want 1", d.in.pending())
	}
	release := exhaustDescriptors(t)
	d.intakeStep() // the batch is read on another goroutine
	<-d.fetchDone()
	release()
	d.intakeStep()
	if ents, _ := os.ReadDir(d.spool.BadDir()); len(ents) > 0 {
		t.Fatalf("a file that could not be opened (EMFILE) was quarantined: %d files in bad/", len(ents))
	}
	if d.core.Messages() != 0 || len(d.in.later) != 1 {
		t.Fatalf("core %d messages, %d waiting: want the file waiting to be read again", d.core.Messages(), len(d.in.later))
	}
	if footer := strings.Join(d.threadReport(now, false), "\n"); !strings.Contains(footer, "waiting: read error") ||
		!strings.Contains(footer, "too many open files") {
		t.Errorf("mailq does not show the waiting file:\n%s", footer)
	}
	if n := lb.count("cannot read control file"); n != 1 {
		t.Errorf("%d log lines for the failed read, want 1", n)
	}
	now = now.Add(admission.ReadRetryMin)
	d.intakeTick(now)
	step(d)
	if d.core.Messages() != 1 {
		t.Fatalf("after the retry the core holds %d messages, want 1", d.core.Messages())
	}
	if n := lb.count("control file read after transient errors"); n != 1 {
		t.Errorf("%d log lines for the recovery, want 1", n)
	}
	if len(d.waitingLines(now)) != 0 {
		t.Errorf("still listed as waiting: %q", d.waitingLines(now))
	}
}

// exhaustDescriptors lowers the process's descriptor limit to what is open
// and fills it; release gives both back.
func exhaustDescriptors(t *testing.T) (release func()) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(len(ents) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fds []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fds = append(fds, fd)
	}
	return func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMalformedQuarantinedWithBody (issue 16, item 2): a malformed control
// file goes to bad/ with its body, and the .why says where both are.
func TestMalformedQuarantinedWithBody(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 0, 1, false)
	t.Cleanup(d.close)
	tr, q := d.spool.TransportDir(), d.spool.QueueDir()
	if err := os.WriteFile(filepath.Join(tr, "555"), []byte("this is no control file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(q, "555"), []byte("Subject: x\n\nthe body\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.enqueueRead("555")
	step(d)
	bad := d.spool.BadDir()
	for _, p := range []string{filepath.Join(tr, "555"), filepath.Join(q, "555")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left in place: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(bad, "555.body")); err != nil || !bytes.Contains(b, []byte("the body")) {
		t.Errorf("bad/555.body: %q, %v", b, err)
	}
	why, err := os.ReadFile(filepath.Join(bad, "555.why"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"file: transport/555", "moved to: bad/555", "body: queue/555 moved to bad/555.body", "reason: ctlfile: "} {
		if !bytes.Contains(why, []byte(want)) {
			t.Errorf("bad/555.why lacks %q:\n%s", want, why)
		}
	}
}

// TestForeignLockVisibleThenStale (issue 16, item 3): a line locked by a
// live process that is not one of our agents, since after the scheduler
// started, keeps its file waiting — shown by mailq's footer and WHY — until
// the lock is older than the clause's jobtimeout; then the lock is reset
// and the message scheduled.
func TestForeignLockVisibleThenStale(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	h, err := ctlfile.Open(filepath.Join(d.spool.TransportDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getpid() // alive, and not an agent of this daemon
	if ok, err := h.Lock(0, me); !ok || err != nil {
		t.Fatal(ok, err)
	}
	h.Close()
	lockedAt := time.Now()
	now := lockedAt
	d.now = func() time.Time { return now }
	d.startScan(now)
	step(d)
	if d.core.Messages() != 0 {
		t.Fatal("a live lock was ignored")
	}
	want := fmt.Sprintf("locked by pid %d, not ours, since", me)
	why, err := d.why(now, path.Base(rel))
	if err != nil || len(why) != 1 || !strings.Contains(why[0], want) {
		t.Fatalf("WHY %s: %q, %v; want %q", rel, why, err, want)
	}
	if footer := strings.Join(d.threadReport(now, false), "\n"); !strings.Contains(footer, "Waiting to be read: 1") || !strings.Contains(footer, want) {
		t.Errorf("mailq's footer:\n%s", footer)
	}
	// The clause's jobtimeout (10m by default) later: stale.
	for i := 0; d.core.Messages() == 0; i++ {
		if i == 30 {
			t.Fatalf("not read after jobtimeout: %q", d.waitingLines(now))
		}
		now = now.Add(time.Minute)
		d.intakeTick(now)
		step(d)
	}
	if now.Sub(lockedAt) < 10*time.Minute {
		t.Errorf("read %s after the lock, before jobtimeout", now.Sub(lockedAt))
	}
	f, err := ctlfile.Open(filepath.Join(d.spool.TransportDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.File.Rcpts[0].Status != ctlfile.Pending {
		t.Errorf("the stale lock is still on disk: %v", f.File.Rcpts[0].Status)
	}
}

// TestUnremovableBodyLoggedOnce (issue 16, item 17): a completed message
// whose body cannot be removed is logged once, not at every scan.
func TestUnremovableBodyLoggedOnce(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 0, 1, false)
	t.Cleanup(d.close)
	lb := capture(t, d)
	rel, _ := queueMarked(t, d, "", ctlfile.Done) // completed: nothing pending
	body := filepath.Join(d.spool.QueueDir(), filepath.FromSlash(rel))
	if err := os.Remove(body); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(body, "x"), 0o755); err != nil { // no unlink removes this
		t.Fatal(err)
	}
	for range 4 {
		d.startScan(d.now())
		for i := 0; i < 5 && !d.intakeIdle(); i++ {
			step(d)
		}
	}
	if n := lb.count("cannot remove completed message"); n != 1 {
		t.Errorf("%d log lines for one body that cannot be removed over 4 scans, want 1", n)
	}
}

// TestRemoverLogsFailuresAtASlowRate (issue 16, item 17): a removal that
// fails again and again is logged once, then once an hour with the count.
func TestRemoverLogsFailuresAtASlowRate(t *testing.T) {
	s := &ctlfile.Spool{Root: t.TempDir()}
	lb := &logBuffer{t: t}
	now := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newRemover(s, hclog.New(&hclog.LoggerOptions{Output: lb}), clock, newRateLog(rateEvery))
	r.rm = func(ctlfile.Files) error { return fmt.Errorf("ctlfile: remove 12: %w", syscall.EPERM) }
	removeOnce := func() {
		r.remove(ctlfile.Files{Rel: "12"})
		for r.pending > 0 {
			<-r.done
			r.take()
		}
	}
	for range 10 {
		removeOnce()
	}
	if n := lb.count("cannot remove completed message"); n != 1 {
		t.Fatalf("%d lines for 10 failures within the hour, want 1", n)
	}
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	removeOnce()
	if n := lb.count("cannot remove completed message"); n != 2 || lb.count("times=10") != 1 {
		t.Fatalf("after an hour: %d lines, want 2, the second with times=10", n)
	}
	r.close(true)
}

// TestNotifiedNonControlNameIgnored (issue 16, item 18): a NEW naming
// "12345.bak" — a valid control file under a name that is not a control
// file's — is not read, not delivered, and left where it is.
func TestNotifiedNonControlNameIgnored(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{".bak", ".tmp"} {
		from := filepath.Join(d.spool.TransportDir(), filepath.FromSlash(rel))
		if err := os.Link(from, from+suffix); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(d.spool.TransportDir(), filepath.FromSlash(rel))); err != nil {
		t.Fatal(err)
	}
	d.enqueueRead(rel + ".bak")
	d.enqueueRead(rel + ".tmp")
	d.startScan(d.now())
	for i := 0; i < 5 && !d.intakeIdle(); i++ {
		step(d)
	}
	if d.core.Messages() != 0 {
		t.Fatalf("core holds %d messages read from names that are not control files'", d.core.Messages())
	}
	for _, suffix := range []string{".bak", ".tmp"} {
		if _, err := os.Stat(filepath.Join(d.spool.TransportDir(), filepath.FromSlash(rel)+suffix)); err != nil {
			t.Errorf("%s%s: %v", rel, suffix, err)
		}
	}
}

// TestPeriodicSweepRemovesOrphanBodies (issue 16, item 1): a body without
// its control file is left while young (a router between its two files)
// and removed by the periodic sweep once debrisAge old; the loop wakes for
// the sweep.
func TestPeriodicSweepRemovesOrphanBodies(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	var rel string
	if err := d.spool.Scan(func(r string) { rel = r }); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d.spool.TransportDir(), filepath.FromSlash(rel))); err != nil {
		t.Fatal(err)
	}
	body := filepath.Join(d.spool.QueueDir(), filepath.FromSlash(rel))
	now := time.Now()
	d.now = func() time.Time { return now }
	d.startSweep(now) // as Run does
	d.waitSweep()
	if _, err := os.Stat(body); err != nil {
		t.Fatalf("a young body was swept: %v", err)
	}
	if wake := d.intakeWake(now.Add(24 * time.Hour)); wake.After(now.Add(debrisEvery)) {
		t.Errorf("the loop wakes at %v, after the next sweep at %v", wake, now.Add(debrisEvery))
	}
	now = now.Add(debrisEvery)
	d.intakeTick(now)
	d.waitSweep()
	if _, err := os.Stat(body); err != nil {
		t.Fatalf("swept after %s, younger than %s: %v", debrisEvery, debrisAge, err)
	}
	now = now.Add(debrisEvery + time.Second)
	d.intakeTick(now)
	d.waitSweep()
	if _, err := os.Stat(body); !os.IsNotExist(err) {
		t.Fatalf("an orphan body older than %s survived the sweep: %v", debrisAge, err)
	}
}

// containDaemon writes a configuration whose smtp clause runs the sink
// (logging each delivery to deliveries), with extra [scheduler] keys, and
// returns a daemon on it.
// prepare, when set, is given the spool before the daemon starts.
func containDaemon(t *testing.T, sink, extra string, drain bool, prepare func(*ctlfile.Spool)) (d *Daemon, deliveries string) {
	t.Helper()
	dir := t.TempDir()
	deliveries = filepath.Join(dir, "deliveries.log")
	cfg, err := config.Parse(filepath.Join(dir, "scheduler.toml"), []byte(fmt.Sprintf(`[scheduler]
postoffice = %q
scaninterval = "1s"
log_level = "debug"
shutdown_timeout = "5s"
%s

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp", "-log", %q]
interval = "1s"
retries = [1]
`, filepath.Join(dir, "po"), extra, sink, deliveries)))
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		s := &ctlfile.Spool{Root: cfg.Scheduler.Postoffice}
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		prepare(s)
		s.Close()
	}
	d, err = New(cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}}), Options{Drain: drain})
	if err != nil {
		t.Fatal(err)
	}
	return d, deliveries
}

// drain runs d (made with Drain) until it returns, failing the test if
// that takes more than a generous guard; unblock, when set, is called then
// so that a loop blocked on a file can end.
func drain(t *testing.T, d *Daemon, unblock func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second): // failure guard
		if unblock != nil {
			unblock()
		}
		cancel()
		<-done
		t.Fatal("the queue did not drain in 60s")
	}
}

// TestContainment runs the items that need real agents.
func TestContainment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real agents")
	}
	agents := bins.AgentsFor(t)
	sink := agents["sink"]
	t.Run("foreign lock from before the start", func(t *testing.T) { t.Parallel(); testForeignLockBeforeStart(t, sink) })
	t.Run("FIFO announced by NEW", func(t *testing.T) { t.Parallel(); testNotifiedFIFO(t, sink) })
	t.Run("over-long host", func(t *testing.T) { t.Parallel(); testOverlongHost(t, sink) })
	t.Run("control file over the size limit", func(t *testing.T) { t.Parallel(); testOversized(t, sink) })
}

// testForeignLockBeforeStart (issue 16, item 3): a line locked by a live
// process that is not one of our agents, since before the scheduler
// started (a PID reused after a reboot: a process that started after the
// lock), is stale: the message is delivered and run -drain ends.
func testForeignLockBeforeStart(t *testing.T, sink string) {
	// Locked before the scheduler starts.
	d, deliveries := containDaemon(t, sink, "", true, func(s *ctlfile.Spool) {
		rel, err := s.Enqueue(&ctlfile.Message{Sender: "s@example.org",
			Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "a.test", User: "u@a.test"}}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := ctlfile.Open(filepath.Join(s.TransportDir(), rel))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := h.Lock(0, os.Getpid()); !ok || err != nil {
			t.Fatal(ok, err)
		}
		h.Close()
	})
	// The lock's PID (this test's) taken for a process started after it.
	d.procStarted = func(int) time.Time { return time.Now().Add(time.Hour) }
	drain(t, d, nil)
	if got := readDeliveredUsers(t, deliveries); got["u@a.test"] != 1 {
		t.Fatalf("deliveries %v, want u@a.test once", got)
	}
}

// testNotifiedFIFO (issue 16, item 5): a FIFO announced by NEW does not
// block the loop: it is left alone, the rest of the queue drains.
func testNotifiedFIFO(t *testing.T, sink string) {
	d, deliveries := containDaemon(t, sink, "", true, nil)
	fifo := filepath.Join(d.spool.TransportDir(), "4242")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := d.spool.Enqueue(&ctlfile.Message{Sender: "s@example.org",
		Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "a.test", User: "u@a.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"4242", rel} {
		if err := ctlfile.NotifyScheduler(d.cfg.Scheduler.NotifySocket, r); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, d, func() {
		// Let a reader blocked on the FIFO go.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	if got := readDeliveredUsers(t, deliveries); got["u@a.test"] != 1 {
		t.Fatalf("deliveries %v, want u@a.test once", got)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was not left where it was: %v", err)
	}
}

// testOverlongHost (issue 16, item 16): a recipient whose host is longer
// than RFC 5321 allows (1 MB: more than an agent can read as a job line)
// fails at intake with a d line and a DSN; the message's other recipient
// is delivered and the queue drains.
func testOverlongHost(t *testing.T, sink string) {
	d, deliveries := containDaemon(t, sink, "", true, nil)
	huge := strings.Repeat("a", 1<<20) + ".test"
	if _, err := d.spool.Enqueue(&ctlfile.Message{Sender: "s@example.org",
		Rcpts: []ctlfile.Address{
			{Channel: "smtp", Host: "ok.test", User: "u@ok.test"},
			{Channel: "smtp", Host: huge, User: "v@" + huge},
		}}); err != nil {
		t.Fatal(err)
	}
	drain(t, d, nil)
	got := readDeliveredUsers(t, deliveries)
	if got["u@ok.test"] != 1 || got["s@example.org"] != 1 || len(got) != 2 {
		t.Fatalf("deliveries %d: want u@ok.test and the DSN to s@example.org, once each", len(got))
	}
}

// testOversized (issue 16, item 7): a control file larger than
// max_control_size (default 64 MiB) is quarantined, not read into core;
// the rest of the queue drains.
func testOversized(t *testing.T, sink string) {
	d, deliveries := containDaemon(t, sink, "", true, nil)
	rel, err := d.spool.Enqueue(&ctlfile.Message{Sender: "s@example.org",
		Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "big.test", User: "big@big.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	// A valid control file, its header block padded past the limit.
	p := filepath.Join(d.spool.TransportDir(), filepath.FromSlash(rel))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("X-Pad: "+strings.Repeat("x", 1000)+"\n"), 1024)
	for n := 0; n <= ctlfile.DefaultMaxControlSize; n += len(block) {
		if _, err := f.Write(block); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if _, err := d.spool.Enqueue(&ctlfile.Message{Sender: "s@example.org",
		Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "a.test", User: "u@a.test"}}}); err != nil {
		t.Fatal(err)
	}
	drain(t, d, nil)
	if got := readDeliveredUsers(t, deliveries); got["u@a.test"] != 1 || got["big@big.test"] != 0 {
		t.Fatalf("deliveries %v, want u@a.test only", got)
	}
	why, err := os.ReadFile(filepath.Join(d.spool.BadDir(), path.Base(rel)+".why"))
	if err != nil || !bytes.Contains(why, []byte("control file too large")) {
		t.Fatalf("bad/%s.why: %q, %v", path.Base(rel), why, err)
	}
}

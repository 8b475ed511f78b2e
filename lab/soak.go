package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"zsched/control"
	"zsched/ctlfile"
	"zsched/daemon"
)

// Soak runs issue 16's hostile battery against a live scheduler (a
// separate process, so that it can be stopped with SIGSTOP and starved of
// descriptors) for Duration, then drains the queue with well-behaved agents
// and counts what became of every recipient the router writers queued:
// delivered once, lost, duplicated, stranded (still queued, and WHY knows
// nothing of it), waiting (still queued with a reason), quarantined.
//
// The battery:
//   - router writers in ZMailer's layout (router/rfc822.c, as
//     ../shared/tools/zmailer-mkmsg.py writes it): the body to
//     queue/.tmp…, renamed to queue/<its inode>, the control file to
//     transport/.<inode>, renamed to transport/<inode>; half announced
//     with a NEW datagram, half left to the scan; one message in 40 the
//     other way round, its body renamed into queue/ up to 3 s after its
//     control file (a writer that does not keep ZMailer's order);
//   - agents (lab/soakagent) that die at start, fork children that outlive
//     them, crash mid-job, hang, and spew lines that are not protocol; a
//     channel whose command is /bin/false;
//   - hostile files: malformed control files, huge ones, a FIFO announced by
//     NEW, valid messages under names a router never writes (123.tmp,
//     123.bak: decoys, which must not be delivered);
//   - operator commands: kill, hold and release (destinations and
//     messages), flush (with globs that backtrack exponentially in a naive
//     matcher), ETRN, mailq;
//   - SIGSTOP and SIGCONT of the scheduler, and descriptor pressure: the
//     scheduler runs with 1024 descriptors, and idle connections to its
//     metrics listener and control socket are opened by the thousand;
//   - with SIGKILL, the scheduler killed every 40–70 s and started again
//     (its agents, and their children, left to end on their own).
type Soak struct {
	Duration  time.Duration // the battery
	Drain     time.Duration // at most this long for the final drain
	Rate      int           // messages per second, all writers together
	Writers   int           // router-style writer goroutines
	Seed      uint64
	Feed      string    // the clauses' feed ("thread", "message"); "" the default
	SIGKILL   bool      // kill the scheduler now and then during the battery (it is started again)
	Scheduler string    // the scheduler program
	Agent     string    // the lab/soakagent program
	Dir       string    // work directory: the postoffice, logs, configuration; kept
	Progress  io.Writer // a line every 15 s; nil for none
}

// SoakResult is what a soak found.
type SoakResult struct {
	Messages, Recipients int // queued by the router writers
	Killed               int // of them, killed by the operator (not counted as lost)
	soakCounts
	OddQueued, OddDelivered  int // decoy recipients under names that are not control files
	Malformed, Huge, FIFOs   int
	Commands                 map[string]int // operator commands sent, by kind
	Stops, Pressures         int
	SIGKILLs                 int   // sent during the battery (each a restart)
	LateBodies               int   // messages whose body came after their control file
	Restarts                 int   // the scheduler died during the battery and was started again
	AgentStarts              int64 // agents the scheduler started (its counter; since the last restart); -1 unknown
	Leftover                 int   // agent processes alive after the scheduler stopped
	OrphanBodies             int   // bodies in queue/ without a control file, after the stop
	BadFiles                 int   // files in bad/ at the end (quarantined), .why notes aside
	MaxControl               time.Duration
	Samples                  []string // a few undelivered messages: what WHY says, or where they went
	DrainTime                time.Duration
	Drained                  bool // every recipient was settled before the drain's limit
	SchedulerExit, StopSlack string
}

// soakCounts is the fate of the writers' recipients.
type soakCounts struct {
	Delivered   int // delivered at least once
	Duplicated  int // delivered more than once
	Extra       int // deliveries beyond the first
	Lost        int // never delivered, control file gone (not killed)
	Stranded    int // never delivered, control file queued, the scheduler knows nothing of it
	Waiting     int // never delivered, control file queued, WHY gives a reason
	Quarantined int // never delivered, moved to bad/
	Unanswered  int // never delivered, queued, and WHY got no answer
}

// soakMsg is one message a writer queued.
type soakMsg struct {
	name   string // under transport/ (its body's inode, reused once it is gone)
	users  []string
	killed bool
}

// msgFate is what became of a message with recipients never delivered.
type msgFate int

const (
	fateGone msgFate = iota
	fateQuarantined
	fateWaiting
	fateStranded
	fateUnanswered
)

// tally counts each message's recipients from the deliveries (user →
// times delivered); fate is asked once per message that has recipients
// never delivered and was not killed.
func tally(msgs []*soakMsg, deliveries map[string]int, fate func(*soakMsg) msgFate) soakCounts {
	var c soakCounts
	for _, m := range msgs {
		missing := 0
		for _, u := range m.users {
			switch n := deliveries[u]; {
			case n == 0:
				if !m.killed {
					missing++
				}
			default:
				c.Delivered++
				if n > 1 {
					c.Duplicated++
					c.Extra += n - 1
				}
			}
		}
		if missing == 0 {
			continue
		}
		switch fate(m) {
		case fateGone:
			c.Lost += missing
		case fateQuarantined:
			c.Quarantined += missing
		case fateWaiting:
			c.Waiting += missing
		case fateStranded:
			c.Stranded += missing
		case fateUnanswered:
			c.Unanswered += missing
		}
	}
	return c
}

// readDeliveries parses soakagent's log: "inum/offset user" per delivery.
func readDeliveries(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]int{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	n := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, user, ok := strings.Cut(sc.Text(), " "); ok {
			n[user]++
		}
	}
	return n, sc.Err()
}

// soakRun is one soak in progress.
type soakRun struct {
	s       Soak
	po      string
	cfgPath string
	logPath string // deliveries
	ctlPath string
	notify  string
	metrics string // host:port

	mu      sync.Mutex
	msgs    []*soakMsg
	odd     map[string]bool
	res     SoakResult
	sched   *proc
	battery bool // the battery runs: a dead scheduler is restarted
	maxCtl  time.Duration
	held    []string       // the RELEASE lines of holds not yet released ("RELEASE THREAD smtp/h", "RELEASE MSG 123")
	late    sync.WaitGroup // bodies still to be renamed into queue/ (writeLate)
}

// hosts: ordinary ones, and a few 59-character ones that make a naive glob
// matcher backtrack.
func soakHosts() (normal, long []string) {
	for i := range 100 {
		normal = append(normal, fmt.Sprintf("h%03d.soak.test", i))
	}
	for i := range 3 {
		long = append(long, strings.Repeat("a", 52)+fmt.Sprintf("%02d.test", i))
	}
	return normal, long
}

// RunSoak runs the soak and returns its counts. The scheduler and every
// process the soak started are stopped when it returns.
func RunSoak(ctx context.Context, s Soak) (SoakResult, error) {
	r := &soakRun{s: s, odd: map[string]bool{}}
	r.res.Commands = map[string]int{}
	if err := r.setup(); err != nil {
		return r.res, err
	}
	if err := r.startScheduler(); err != nil {
		return r.res, err
	}
	defer r.stopScheduler()
	if err := r.waitControl(30 * time.Second); err != nil {
		return r.res, err
	}
	r.mu.Lock()
	r.battery = true
	r.mu.Unlock()
	go r.watchScheduler()

	bctx, cancel := context.WithTimeout(ctx, s.Duration)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range s.Writers {
		wg.Go(func() { r.writer(bctx, i) })
	}
	for i, f := range []func(context.Context, *rand.Rand){r.hostileFiles, r.operator, r.stopper, r.pressure, r.prober, r.killer} {
		rng := rand.New(rand.NewPCG(s.Seed, uint64(i+1)))
		wg.Go(func() { f(bctx, rng) })
	}
	wg.Go(func() { r.progress(bctx, start) })
	<-bctx.Done()
	cancel()
	wg.Wait()
	r.late.Wait()
	r.mu.Lock()
	r.battery = false
	r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return r.res, err
	}
	r.drain(ctx)
	r.stopScheduler() // before the counts are returned: it counts leftovers
	r.res.OrphanBodies = orphanBodies(r.po)
	return r.res, nil
}

// orphanBodies counts message bodies in queue/ that no control file in
// transport/ or bad/ names: debris of a message whose control file went
// first (or was lost).
func orphanBodies(po string) int {
	ents, err := os.ReadDir(filepath.Join(po, "queue"))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if strings.TrimLeft(name, "0123456789") != "" {
			continue
		}
		_, errT := os.Lstat(filepath.Join(po, "transport", name))
		_, errB := os.Lstat(filepath.Join(po, "bad", name))
		if errT != nil && errB != nil {
			n++
		}
	}
	return n
}

func (r *soakRun) logf(format string, args ...any) {
	if r.s.Progress != nil {
		fmt.Fprintf(r.s.Progress, format+"\n", args...)
	}
}

func (r *soakRun) setup() error {
	// A second soak in the same directory would count the first one's
	// deliveries and files as its own (duplicates, orphans).
	for _, name := range []string{"po", "delivered.log"} {
		if _, err := os.Lstat(filepath.Join(r.s.Dir, name)); err == nil {
			return fmt.Errorf("soak: work directory %s holds an earlier soak's %s: give a new one", r.s.Dir, name)
		}
	}
	r.po = filepath.Join(r.s.Dir, "po")
	for _, d := range []string{"queue", "transport", "bad"} {
		if err := os.MkdirAll(filepath.Join(r.po, d), 0o755); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	r.cfgPath = filepath.Join(r.s.Dir, "scheduler.toml")
	r.logPath = filepath.Join(r.s.Dir, "delivered.log")
	r.ctlPath = filepath.Join(r.s.Dir, "ctl.sock")
	r.notify = filepath.Join(r.po, "transport", ".scheduler.notify")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	r.metrics = ln.Addr().String()
	ln.Close()
	return r.writeConfig(false)
}

// writeConfig writes the scheduler's configuration: the battery's, or with
// safe the final drain's, where every channel delivers.
func (r *soakRun) writeConfig(safe bool) error {
	array := func(words ...string) string {
		for i, w := range words {
			words[i] = strconv.Quote(w)
		}
		return "[" + strings.Join(words, ", ") + "]"
	}
	agent := func(ch string) string {
		argv := []string{r.s.Agent, "-c", ch, "-log", r.logPath}
		if safe {
			argv = append(argv, "-safe")
		}
		return array(argv...)
	}
	dead := array("/bin/false")
	if safe {
		dead = agent("dead")
	}
	feed := ""
	if r.s.Feed != "" {
		feed = fmt.Sprintf("feed = %q\n", r.s.Feed)
	}
	cfg := fmt.Sprintf(`# written by lab soak
[scheduler]
postoffice = %q
hash = 0
scaninterval = "2s"
control_socket = %q
metrics_listen = %q
log_level = "info"
shutdown_timeout = "3s"

[defaults]
interval = "2s"
retries = [1, 1, 2, 3]
jobtimeout = "5s"
maxring = 8
expiry = "0"
%s
[[clause]]
select = "smtp/*"
command = %s

[[clause]]
select = "dead/*"
command = %s
`, r.po, r.ctlPath, r.metrics, feed, agent("smtp"), dead)
	return os.WriteFile(r.cfgPath, []byte(cfg), 0o644)
}

// proc is one scheduler process; done is closed when it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (r *soakRun) startScheduler() error {
	f, err := os.OpenFile(filepath.Join(r.s.Dir, "scheduler.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	// 1024 descriptors, as a default systemd service has: pressure on
	// them is part of the battery.
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n 1024 && exec "$0" run -config "$1"`, r.s.Scheduler, r.cfgPath)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("lab: scheduler: %w", err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	r.mu.Lock()
	r.sched = p
	r.mu.Unlock()
	return nil
}

// watchScheduler starts the scheduler again if it dies during the battery.
func (r *soakRun) watchScheduler() {
	for {
		r.mu.Lock()
		p := r.sched
		r.mu.Unlock()
		if p == nil {
			return
		}
		<-p.done
		r.mu.Lock()
		battery := r.battery
		if battery {
			r.res.Restarts++
		}
		r.mu.Unlock()
		if !battery {
			return
		}
		r.logf("soak: the scheduler exited (%v); starting it again", p.err)
		if err := r.startScheduler(); err != nil {
			r.logf("soak: %v", err)
			return
		}
	}
}

func (r *soakRun) stopScheduler() {
	r.mu.Lock()
	p := r.sched
	r.sched = nil
	r.mu.Unlock()
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		r.res.StopSlack = "did not stop within 30s of SIGTERM; killed"
		p.cmd.Process.Kill()
		<-p.done
	}
	r.res.SchedulerExit = fmt.Sprint(p.err)
	r.res.Leftover = r.killLeftovers()
}

// killLeftovers counts and ends the soak agents (and their forked
// children) still running once the scheduler is gone.
func (r *soakRun) killLeftovers() int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == r.s.Agent {
			n++
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return n
}

// client is a control connection that dials again after an error.
type client struct {
	path    string
	timeout time.Duration
	c       *control.Client
	gone    bool // fate: the scheduler stopped answering
}

func (c *client) do(cmd string) (control.Reply, error) {
	if c.c == nil {
		cl, err := control.Dial(c.path, c.timeout)
		if err != nil {
			return control.Reply{}, err
		}
		c.c = cl
	}
	rep, err := c.c.Do(cmd)
	if err != nil {
		c.c.Close()
		c.c = nil
	}
	return rep, err
}

func (c *client) close() {
	if c.c != nil {
		c.c.Close()
	}
}

func (r *soakRun) waitControl(limit time.Duration) error {
	c := &client{path: r.ctlPath, timeout: 5 * time.Second}
	defer c.close()
	deadline := time.Now().Add(limit)
	for {
		_, err := c.do(control.VerbShowCounters)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab: the scheduler's control socket: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// every runs f at intervals drawn from [lo, hi) until ctx ends.
func every(ctx context.Context, rng *rand.Rand, lo, hi time.Duration, f func()) {
	for {
		d := lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		f()
	}
}

// --- router writers ---

// writeZMailer queues a message as ZMailer's router does and returns its
// control file's name: the body's inode number, or that with suffix (the
// decoys). rcpts are "channel host user".
func writeZMailer(po, tmpTag string, rcpts [][3]string, suffix string) (string, error) {
	name, _, err := writeOrdered(po, tmpTag, rcpts, suffix, true)
	return name, err
}

// writeOrdered is writeZMailer; with bodyFirst false, it writes the
// control file while the body is still under its temporary name (which
// keeps the inode, the control file's name, from reuse), and returns the
// rename that puts the body in place, for the caller to do later.
func writeOrdered(po, tmpTag string, rcpts [][3]string, suffix string, bodyFirst bool) (string, func() error, error) {
	const sender = "soak@example.org"
	var to []string
	for _, rc := range rcpts {
		to = append(to, rc[2])
	}
	headers := fmt.Sprintf("From: %s\nTo: %s\nSubject: soak\n", sender, strings.Join(to, ", "))
	env := fmt.Sprintf("from <%s>\nto <%s>\nenv-end\n", sender, rcpts[0][2])
	head := env + headers + "\n"
	tmp := filepath.Join(po, "queue", ".tmp"+tmpTag)
	if err := os.WriteFile(tmp, []byte(head+"A soak body.\n.leading dot line\n"), 0o644); err != nil {
		os.Remove(tmp)
		return "", nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(tmp, &st); err != nil {
		os.Remove(tmp)
		return "", nil, err
	}
	ino := strconv.FormatUint(st.Ino, 10)
	final := filepath.Join(po, "queue", ino)
	placeBody := func() error { return os.Rename(tmp, final) }
	body := final // what to remove should the control file fail
	if bodyFirst {
		if err := placeBody(); err != nil {
			os.Remove(tmp)
			return "", nil, err
		}
		placeBody = nil
	} else {
		body = tmp // until placeBody
	}
	msgid := "<" + ino + ".soak@example.org>"
	var b strings.Builder
	fmt.Fprintf(&b, "@ 0x00000007\ni %s\no %d\nl %s\ne %s\ns smtp example.org %s 0\n", ino, len(head), msgid, sender, sender)
	for _, rc := range rcpts {
		fmt.Fprintf(&b, "r %s%s %s %s 0\n", strings.Repeat(" ", 10), rc[0], rc[1], rc[2])
	}
	fmt.Fprintf(&b, "m\n%sMessage-Id: %s\n\n", headers, msgid)
	name := ino + suffix
	dot := filepath.Join(po, "transport", "."+name)
	if err := os.WriteFile(dot, []byte(b.String()), 0o644); err != nil {
		os.Remove(dot)
		os.Remove(body)
		return "", nil, err
	}
	if err := os.Rename(dot, filepath.Join(po, "transport", name)); err != nil {
		os.Remove(dot)
		os.Remove(body)
		return "", nil, err
	}
	return name, placeBody, nil
}

// writeLate queues a message with its control file first and its body
// renamed into queue/ after delay (in the background: r.late): the order
// ZMailer's router never uses, which a scheduler must survive all the same.
func (r *soakRun) writeLate(tmpTag string, rcpts [][3]string, delay time.Duration) (string, error) {
	name, placeBody, err := writeOrdered(r.po, tmpTag, rcpts, "", false)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.res.LateBodies++
	r.mu.Unlock()
	r.late.Go(func() {
		time.Sleep(delay)
		if err := placeBody(); err != nil {
			r.logf("soak: late body: %v", err)
		}
	})
	return name, nil
}

func (r *soakRun) writer(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(r.s.Seed, uint64(1000+id)))
	normal, long := soakHosts()
	tick := time.NewTicker(time.Duration(r.s.Writers) * time.Second / time.Duration(max(r.s.Rate, 1)))
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var rcpts [][3]string
		var users []string
		for k := range 1 + rng.IntN(3) {
			ch, host := "smtp", normal[rng.IntN(len(normal))]
			switch x := rng.IntN(100); {
			case x < 3:
				ch = "dead"
			case x < 5:
				host = long[rng.IntN(len(long))]
			}
			u := fmt.Sprintf("w%dm%dr%d@%s", id, seq, k, host)
			rcpts = append(rcpts, [3]string{ch, host, u})
			users = append(users, u)
		}
		var name string
		var err error
		if rng.IntN(40) == 0 {
			name, err = r.writeLate(fmt.Sprintf("%d-%d", id, seq), rcpts, time.Duration(rng.IntN(3000))*time.Millisecond)
		} else {
			name, err = writeZMailer(r.po, fmt.Sprintf("%d-%d", id, seq), rcpts, "")
		}
		if err != nil {
			r.logf("soak: writer %d: %v", id, err)
			continue
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, &soakMsg{name: name, users: users})
		r.res.Messages++
		r.res.Recipients += len(users)
		r.mu.Unlock()
		if rng.IntN(2) == 0 {
			ctlfile.NotifyScheduler(r.notify, name) // a stopped scheduler's scan finds it
		}
	}
}

// --- hostile files ---

func (r *soakRun) hostileFiles(ctx context.Context, rng *rand.Rand) {
	seq := 0
	every(ctx, rng, 2*time.Second, 6*time.Second, func() {
		seq++
		tr := filepath.Join(r.po, "transport")
		switch x := rng.IntN(10); {
		case x < 4: // a valid message under a name that is not a control file's
			suffix := []string{".tmp", ".bak", ".new", "~"}[rng.IntN(4)]
			host := fmt.Sprintf("h%03d.soak.test", rng.IntN(100))
			u := fmt.Sprintf("odd%d@%s", seq, host)
			name, err := writeZMailer(r.po, fmt.Sprintf("odd-%d", seq), [][3]string{{"smtp", host, u}}, suffix)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.odd[u] = true
			r.res.OddQueued++
			r.mu.Unlock()
			ctlfile.NotifyScheduler(r.notify, name)
		case x < 7: // malformed
			junk := [][]byte{
				[]byte("this is not a control file\n"),
				[]byte("@ 0x00000007\ni 1\no 99999999\nr          smtp\n"),
				bytes.Repeat([]byte{0, 0xff, '\n'}, 1000),
			}[rng.IntN(3)]
			if name, err := writeRaw(r.po, fmt.Sprintf("bad-%d", seq), junk, 0); err == nil {
				r.mu.Lock()
				r.res.Malformed++
				r.mu.Unlock()
				ctlfile.NotifyScheduler(r.notify, name)
			}
		case x < 9: // a FIFO announced by NEW
			tmp := filepath.Join(tr, fmt.Sprintf(".fifo-%d", seq))
			if err := syscall.Mkfifo(tmp, 0o644); err != nil {
				return
			}
			var st syscall.Stat_t
			if syscall.Stat(tmp, &st) != nil {
				os.Remove(tmp)
				return
			}
			name := strconv.FormatUint(st.Ino, 10)
			p := filepath.Join(tr, name)
			if os.Rename(tmp, p) != nil {
				os.Remove(tmp)
				return
			}
			r.mu.Lock()
			r.res.FIFOs++
			r.mu.Unlock()
			ctlfile.NotifyScheduler(r.notify, name)
			// A writer turns up a few seconds later: a reader blocked in
			// open gets a line and EOF. Then the FIFO goes, wherever the
			// scheduler moved it.
			go func() {
				time.Sleep(3 * time.Second)
				if fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					syscall.Write(fd, []byte("not a control file\n"))
					syscall.Close(fd)
				}
				time.Sleep(2 * time.Second)
				for _, q := range []string{p, filepath.Join(r.po, "bad", name)} {
					if fi, err := os.Lstat(q); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
						os.Remove(q)
					}
				}
			}()
		default: // huge, at most two a run: 96 MiB (sparse)
			r.mu.Lock()
			ok := r.res.Huge < 2
			if ok {
				r.res.Huge++
			}
			r.mu.Unlock()
			if !ok {
				return
			}
			if name, err := writeRaw(r.po, fmt.Sprintf("huge-%d", seq), []byte("@ 0x00000007\n"), 96<<20); err == nil {
				ctlfile.NotifyScheduler(r.notify, name)
			}
		}
	})
}

// writeRaw writes data as a control file (with a body beside it), in the
// router's layout, extended (sparse) to size if that is larger, and returns
// its name.
func writeRaw(po, tag string, data []byte, size int64) (string, error) {
	tmp := filepath.Join(po, "queue", ".tmp"+tag)
	if err := os.WriteFile(tmp, []byte("from <x@y>\n\nbody\n"), 0o644); err != nil {
		return "", err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(tmp, &st); err != nil {
		os.Remove(tmp)
		return "", err
	}
	name := strconv.FormatUint(st.Ino, 10)
	if err := os.Rename(tmp, filepath.Join(po, "queue", name)); err != nil {
		os.Remove(tmp)
		return "", err
	}
	dot := filepath.Join(po, "transport", "."+name)
	err := os.WriteFile(dot, data, 0o644)
	if err == nil && size > int64(len(data)) {
		err = os.Truncate(dot, size)
	}
	if err != nil {
		os.Remove(dot)
		return "", err
	}
	return name, os.Rename(dot, filepath.Join(po, "transport", name))
}

// --- the operator ---

// nastyGlobs backtrack exponentially in a naive matcher against the long
// hosts; the last one is issue 16's (85 s for one 60-character host), sent
// once a run.
var nastyGlobs = []string{
	"smtp/*a*a*a*a*a*a*c",
	"*/*a*a*a*a*a*a*a*c",
	"smtp/{*a,*b}*a*a*a*a*a*c",
	"smtp/*a*a*a*a*a*a*a*a*c",
}

func (r *soakRun) operator(ctx context.Context, rng *rand.Rand) {
	c := &client{path: r.ctlPath, timeout: 2 * time.Minute}
	defer c.close()
	normal, _ := soakHosts()
	type release struct {
		at  time.Time
		cmd string
	}
	var releases []release
	sentIssueGlob := false
	count := func(kind string) {
		r.mu.Lock()
		r.res.Commands[kind]++
		r.mu.Unlock()
	}
	every(ctx, rng, 300*time.Millisecond, time.Second, func() {
		now := time.Now()
		for len(releases) > 0 && now.After(releases[0].at) {
			// Unanswered (the scheduler killed meanwhile), it may not have
			// been done: the hold stays on the drain's list.
			if _, err := c.do(releases[0].cmd); err == nil {
				r.unheld(releases[0].cmd)
			}
			releases = releases[1:]
			count("release")
		}
		hold := func(verb, undo, what string) {
			// A hold answered OK is kept across a kill; one unanswered
			// may have been kept too: both are released later.
			if rep, err := c.do(verb + " " + what); err != nil || rep.OK {
				undo += " " + what
				r.mu.Lock()
				r.held = append(r.held, undo)
				r.mu.Unlock()
				releases = append(releases, release{now.Add(time.Duration(5+rng.IntN(10)) * time.Second), undo})
				sort.Slice(releases, func(i, j int) bool { return releases[i].at.Before(releases[j].at) })
			}
		}
		switch x := rng.IntN(100); {
		case x < 8:
			m := r.randomMsg(rng)
			if m == nil {
				return
			}
			count("kill")
			if rep, err := c.do(control.VerbKillMsg + " " + m.name); err == nil && rep.OK {
				r.killed(m.name)
			}
		case x < 18:
			count("hold thread")
			hold(control.VerbHoldThread, control.VerbReleaseThread, "smtp/"+normal[rng.IntN(len(normal))])
		case x < 23:
			if m := r.randomMsg(rng); m != nil {
				count("hold msg")
				hold(control.VerbHoldMsg, control.VerbReleaseMsg, m.name)
			}
		case x < 38:
			count("flush")
			c.do(strings.TrimSpace(control.VerbFlush + " " + []string{"", "smtp/h0*.soak.test", "smtp/{h001,h002,h01?}.soak.test", "dead"}[rng.IntN(4)]))
		case x < 46:
			g := nastyGlobs[rng.IntN(len(nastyGlobs)-1)]
			if !sentIssueGlob && rng.IntN(4) == 0 {
				g, sentIssueGlob = nastyGlobs[len(nastyGlobs)-1], true
			}
			count("flush nasty glob")
			c.do(control.VerbFlush + " " + g)
		case x < 56:
			count("etrn")
			c.do(control.VerbETRN + " " + []string{normal[rng.IntN(len(normal))], "@soak.test"}[rng.IntN(2)])
		default:
			count("mailq")
			c.do([]string{control.VerbShowThreads, control.VerbShowJSON, control.VerbShowQshape + " 10"}[rng.IntN(3)])
		}
	})
	for _, rel := range releases {
		if _, err := c.do(rel.cmd); err == nil {
			r.unheld(rel.cmd)
		}
	}
}

func (r *soakRun) randomMsg(rng *rand.Rand) *soakMsg {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.msgs) == 0 {
		return nil
	}
	// Recent ones: most likely still queued.
	n := min(len(r.msgs), 200)
	return r.msgs[len(r.msgs)-1-rng.IntN(n)]
}

// killed marks every message that had the name as killed: the name may
// have passed to a newer message (inode reuse), and a kill must never be
// counted as a loss.
func (r *soakRun) killed(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		if m.name == name && !m.killed {
			m.killed = true
			r.res.Killed++
		}
	}
}

func (r *soakRun) unheld(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, h := range r.held {
		if h == what {
			r.held = append(r.held[:i], r.held[i+1:]...)
			return
		}
	}
}

// --- signals and descriptors ---

func (r *soakRun) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sched != nil {
		r.sched.cmd.Process.Signal(sig)
	}
}

func (r *soakRun) stopper(ctx context.Context, rng *rand.Rand) {
	defer r.signal(syscall.SIGCONT)
	every(ctx, rng, 20*time.Second, 35*time.Second, func() {
		r.signal(syscall.SIGSTOP)
		r.mu.Lock()
		r.res.Stops++
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(3000+rng.IntN(4000)) * time.Millisecond):
		}
		r.signal(syscall.SIGCONT)
	})
}

func (r *soakRun) pressure(ctx context.Context, rng *rand.Rand) {
	every(ctx, rng, 25*time.Second, 45*time.Second, func() {
		var conns []net.Conn
		for range 1100 {
			c, err := net.DialTimeout("tcp", r.metrics, time.Second)
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		for range 200 {
			c, err := net.DialTimeout("unix", r.ctlPath, time.Second)
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		r.mu.Lock()
		r.res.Pressures++
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(8 * time.Second):
		}
		for _, c := range conns {
			c.Close()
		}
	})
}

// killer sends the scheduler SIGKILL every 40–70 s, when the soak has
// SIGKILL; watchScheduler starts it again.
func (r *soakRun) killer(ctx context.Context, rng *rand.Rand) {
	if !r.s.SIGKILL {
		return
	}
	every(ctx, rng, 40*time.Second, 70*time.Second, func() {
		r.signal(syscall.SIGKILL)
		r.mu.Lock()
		r.res.SIGKILLs++
		r.mu.Unlock()
	})
}

// prober times a cheap control command every second: the longest wait is
// how long the scheduler's loop was unavailable (a SIGSTOP counts too).
func (r *soakRun) prober(ctx context.Context, rng *rand.Rand) {
	c := &client{path: r.ctlPath, timeout: 10 * time.Minute}
	defer c.close()
	every(ctx, rng, time.Second, time.Second, func() {
		t0 := time.Now()
		c.do(control.VerbShowCounters)
		r.mu.Lock()
		r.maxCtl = max(r.maxCtl, time.Since(t0))
		r.res.MaxControl = r.maxCtl
		r.mu.Unlock()
	})
}

func (r *soakRun) progress(ctx context.Context, start time.Time) {
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		d, _ := readDeliveries(r.logPath)
		r.mu.Lock()
		r.logf("soak: %3.0fs: %d messages (%d recipients) queued, %d deliveries, control wait max %v, restarts %d",
			time.Since(start).Seconds(), r.res.Messages, r.res.Recipients, len(d), r.maxCtl.Round(time.Millisecond), r.res.Restarts)
		r.mu.Unlock()
	}
}

// --- the final drain and the count ---

func (r *soakRun) drain(ctx context.Context) {
	start := time.Now()
	r.signal(syscall.SIGCONT)
	c := &client{path: r.ctlPath, timeout: 30 * time.Second}
	defer c.close()
	r.mu.Lock()
	held := append([]string(nil), r.held...)
	r.mu.Unlock()
	for _, h := range held {
		c.do(h)
	}
	if err := r.writeConfig(true); err != nil {
		r.logf("soak: %v", err)
	}
	if rep, err := c.do(control.VerbReload); err != nil || !rep.OK {
		r.logf("soak: RELOAD: %v %s; sending SIGHUP", err, rep.Text)
		r.signal(syscall.SIGHUP)
	}
	r.logf("soak: battery over; draining with well-behaved agents (at most %v)", r.s.Drain)
	r.mu.Lock()
	msgs := append([]*soakMsg(nil), r.msgs...)
	r.mu.Unlock()
	remaining := func(d map[string]int) int {
		n := 0
		for _, m := range msgs {
			for _, u := range m.users {
				if d[u] == 0 && !m.killed {
					n++
				}
			}
		}
		return n
	}
	last, lastChange := -1, time.Now()
	for {
		c.do(control.VerbFlush)
		d, _ := readDeliveries(r.logPath)
		left := remaining(d)
		if left == 0 {
			r.res.Drained = true
			break
		}
		if left != last {
			last, lastChange = left, time.Now()
		}
		if time.Since(start) > r.s.Drain || time.Since(lastChange) > time.Minute || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	r.res.DrainTime = time.Since(start)
	r.res.AgentStarts = -1
	if rep, err := c.do(control.VerbShowJSON); err == nil && rep.OK {
		var q daemon.Queue
		if json.Unmarshal([]byte(strings.Join(rep.Lines, "\n")), &q) == nil {
			r.res.AgentStarts = q.Counters.Spawned
		}
	}
	d, _ := readDeliveries(r.logPath)
	why := &client{path: r.ctlPath, timeout: 10 * time.Second}
	defer why.close()
	r.res.soakCounts = tally(msgs, d, func(m *soakMsg) msgFate { return r.fate(why, m) })
	for u := range r.odd {
		if d[u] > 0 {
			r.res.OddDelivered++
		}
	}
	if ents, err := os.ReadDir(filepath.Join(r.po, "bad")); err == nil {
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".why") {
				r.res.BadFiles++
			}
		}
	}
}

// fate finds where a message with undelivered recipients went: still
// queued (its control file names one of its recipients: a name can pass to
// a newer message), in bad/, or gone.
func (r *soakRun) fate(c *client, m *soakMsg) msgFate {
	holds := func(p string) bool {
		b, err := os.ReadFile(p)
		return err == nil && bytes.Contains(b, []byte(" "+m.users[0]+" "))
	}
	sample := func(s string) {
		if len(r.res.Samples) < 8 {
			r.res.Samples = append(r.res.Samples, m.name+": "+s)
		}
	}
	switch {
	case holds(filepath.Join(r.po, "transport", m.name)):
		if c.gone {
			return fateUnanswered
		}
		rep, err := c.do(control.VerbWhy + " " + m.name)
		if err != nil {
			c.gone = true // one timeout is enough: do not wait for each message
		}
		switch {
		case err != nil:
			sample(err.Error())
			return fateUnanswered
		case rep.OK:
			if len(rep.Lines) > 1 {
				sample(strings.Join(strings.Fields(strings.ReplaceAll(rep.Lines[1], "\t", " ")), " "))
			}
			return fateWaiting
		}
		sample("WHY: " + rep.Text)
		return fateStranded
	case holds(filepath.Join(r.po, "bad", m.name)):
		sample("quarantined: " + strings.Join(m.users, " "))
		return fateQuarantined
	}
	sample("lost: " + strings.Join(m.users, " "))
	return fateGone
}

// Report prints a soak's counts.
func (res SoakResult) Report(w io.Writer, s Soak) {
	feed := s.Feed
	if feed == "" {
		feed = "thread (the default)"
	}
	fmt.Fprintf(w, "soak: %v of the battery, seed %d, feed %s; work directory %s\n", s.Duration, s.Seed, feed, s.Dir)
	fmt.Fprintf(w, "queued by the router writers: %d messages, %d recipients (%d messages killed by the operator; %d with the body after the control file)\n",
		res.Messages, res.Recipients, res.Killed, res.LateBodies)
	fmt.Fprintf(w, "hostile files: %d decoys (123.tmp, .bak…), %d malformed, %d huge, %d FIFOs; %d files in bad/\n",
		res.OddQueued, res.Malformed, res.Huge, res.FIFOs, res.BadFiles)
	var cmds []string
	for k, n := range res.Commands {
		cmds = append(cmds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(cmds)
	fmt.Fprintf(w, "operator: %s; SIGSTOP %d×; SIGKILL %d×; descriptor pressure %d×\n", strings.Join(cmds, ", "), res.Stops, res.SIGKILLs, res.Pressures)
	drained := "everything settled"
	if !res.Drained {
		drained = "stopped at its limit or after a minute without progress"
	}
	starts := "unknown (no answer)"
	if res.AgentStarts >= 0 {
		starts = strconv.FormatInt(res.AgentStarts, 10)
	}
	fmt.Fprintf(w, "final drain: %v (%s); agents started %s; scheduler restarts %d; longest control wait %v\n",
		res.DrainTime.Round(time.Second), drained, starts, res.Restarts, res.MaxControl.Round(time.Millisecond))
	fmt.Fprintf(w, "delivered:   %d recipients\n", res.Delivered)
	fmt.Fprintf(w, "lost:        %d\n", res.Lost)
	fmt.Fprintf(w, "duplicated:  %d (%d extra deliveries)\n", res.Duplicated, res.Extra)
	fmt.Fprintf(w, "stranded:    %d (queued, unknown to the scheduler)\n", res.Stranded)
	fmt.Fprintf(w, "waiting:     %d (queued with a reason)\n", res.Waiting)
	fmt.Fprintf(w, "quarantined: %d (good mail moved to bad/)\n", res.Quarantined)
	if res.Unanswered > 0 {
		fmt.Fprintf(w, "unanswered:  %d (queued; the scheduler did not answer WHY)\n", res.Unanswered)
	}
	for _, l := range res.Samples {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintf(w, "decoys delivered: %d of %d\n", res.OddDelivered, res.OddQueued)
	fmt.Fprintf(w, "agent processes left after the scheduler stopped: %d; orphan bodies in queue/: %d\n", res.Leftover, res.OrphanBodies)
	if res.StopSlack != "" {
		fmt.Fprintf(w, "scheduler: %s\n", res.StopSlack)
	}
}

package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// MaxLine is the longest line an agent may write, without its "\n".
const MaxLine = 64 << 10

// DefaultDrain is Spec.Drain when it is zero.
const DefaultDrain = 2 * time.Second

// writeChunk bounds one write to the agent so Backlog shrinks as it drains.
const writeChunk = 64 << 10

// readChunk is the size of one read from the agent.
const readChunk = 32 << 10

var (
	// ErrStdio is returned by Start for a Stdio value it does not know.
	ErrStdio = errors.New("unknown stdio mode")
	// ErrNoArgv is returned by Start for an empty Spec.Argv.
	ErrNoArgv = errors.New("empty argv")
	// ErrOutputHeld is an Exited event's Err when the process exited
	// cleanly but something it left behind (a descendant) kept its output
	// open, silent, for Spec.Drain: the output was abandoned.
	ErrOutputHeld = errors.New("agent: output held open after exit")
)

// Spec says how to start one agent.
type Spec struct {
	// Argv[0] is the program path: absolute, or relative to Dir. There is
	// no PATH search; the caller resolves bare names (ZMailer prefixes
	// $MAILBIN/ta/).
	Argv []string
	// Env is exactly the environment the child gets (the caller adds PATH
	// and TZ); nil means an empty environment, never the scheduler's.
	Env []string
	// Dir is the working directory (postoffice/transport); "" = ours.
	Dir   string
	Stdio Stdio
	// UID and GID are -1 for unchanged. When either is >= 0 the child
	// runs with SysProcAttr.Credential (setgroups, setgid, then setuid).
	UID, GID int
	// Nice is added to the scheduler's own niceness for the agent, like
	// ZMailer's nice(); 0 = unchanged. It is applied with setpriority
	// right after the start, so the agent runs at our priority for an
	// instant (it cannot be done between fork and exec with os/exec), and
	// each thread that exists at that moment is adjusted; threads it
	// creates later inherit the new value.
	Nice int
	// Drain bounds how long, after the process and its group are gone, its
	// output is still read while nothing arrives (a process that left the
	// group holding it open); 0 = DefaultDrain.
	Drain time.Duration
}

// EventKind is what happened to an agent.
type EventKind uint8

const (
	// Line is one complete line from the agent's output, without its "\n";
	// a trailing "\r" is kept as it is.
	Line EventKind = iota + 1
	// TooLong is a line that exceeded MaxLine. Event.Line holds its first
	// bytes, for the log; the rest of the line is discarded and the next
	// line is delivered normally. The daemon kills such an agent.
	TooLong
	// Exited is the last event of an agent: the process has been reaped,
	// no process of its group is left, and all of its output has been
	// delivered.
	Exited
	// Stderr is one line of the agent's stderr when it has a stream of its
	// own (Pipes), without its "\n"; a line over MaxLine is cut to its
	// first bytes. It is the agent's own words, not protocol.
	Stderr
	// Synced answers Sync: every line the agent had written before the
	// call has been sent before it.
	Synced
	// Lingering says the agent's process has exited while other processes
	// of its group still run (a child it forked to deliver): Exited waits
	// for them. Event.Line holds how many there were. At most one per
	// agent.
	Lingering
)

func (k EventKind) String() string {
	switch k {
	case Line:
		return "line"
	case TooLong:
		return "toolong"
	case Exited:
		return "exited"
	case Stderr:
		return "stderr"
	case Synced:
		return "synced"
	case Lingering:
		return "lingering"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing an agent did.
type Event struct {
	ID   int // the caller's id for this agent
	Kind EventKind
	Line string
	// Err, for Exited: the wait error (an *exec.ExitError for a non-zero
	// exit or a signal) or else an output error (ErrOutputHeld, a read
	// error); nil for a clean exit.
	Err error
	// Partial, for Exited: bytes of an unterminated last line, dropped
	// (ZMailer logs "Lost N bytes").
	Partial int
}

// Proc is a running agent.
type Proc struct {
	id     int
	pid    int
	cmd    *exec.Cmd
	w      *wiring
	drain  time.Duration
	events chan<- Event
	log    hclog.Logger

	exited     atomic.Bool   // the process has been reaped
	writerDone chan struct{} // closed when the writer goroutine has returned
	done       chan struct{} // closed after the Exited event was sent

	// smu orders Sync against the output reader's deadlines.
	smu        sync.Mutex
	syncing    bool // a Sync is pending: the reader owes a Synced event
	readerDone bool // the output reader has returned: no Synced will come

	mu      sync.Mutex
	cond    sync.Cond // on mu: wakes the writer
	queued  []byte    // backlog the writer has not taken yet
	backlog int       // bytes queued or being written, not yet written
	ending  bool      // End called: the writer finishes the input and returns
	stopped bool      // Kill called, write failed or process gone: writes dropped
	killed  bool
	// reaped, under mu: the group is empty and the agent is being reaped,
	// so its pid (the group id) may be recycled: no signal any more.
	reaped bool
	timer  *time.Timer
}

// Start starts the agent. Every Line/TooLong event of this agent is sent on
// events before its single Exited event, which is sent exactly once, after
// the process has been reaped and all of its output has been read. Events are
// sent in order per agent. The events channel is shared by all agents;
// Start's goroutines block on it (the daemon drains it). An error means no
// process is running and no event will be sent.
func Start(id int, spec Spec, events chan<- Event, log hclog.Logger) (*Proc, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("agent: %w", ErrNoArgv)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	w, err := newWiring(spec.Stdio)
	if err != nil {
		return nil, err
	}
	env := spec.Env
	if env == nil {
		env = []string{} // nil would mean the scheduler's environment
	}
	// A Cmd literal, not exec.Command: no PATH lookup, and a relative
	// Argv[0] is resolved by execve after the chdir to Dir.
	cmd := &exec.Cmd{
		Path:        spec.Argv[0],
		Args:        spec.Argv,
		Env:         env,
		Dir:         spec.Dir,
		Stdin:       w.child[0],
		Stdout:      w.child[1],
		Stderr:      w.child[2],
		SysProcAttr: sysProcAttr(spec, w.ctty),
	}
	err = cmd.Start()
	w.closeChild()
	if err != nil {
		w.closeParent()
		return nil, fmt.Errorf("agent: start %s: %w", spec.Argv[0], err)
	}
	p := &Proc{
		id:         id,
		pid:        cmd.Process.Pid,
		cmd:        cmd,
		w:          w,
		drain:      spec.Drain,
		events:     events,
		log:        log.With("agent", id, "pid", cmd.Process.Pid),
		writerDone: make(chan struct{}),
		done:       make(chan struct{}),
	}
	if p.drain <= 0 {
		p.drain = DefaultDrain
	}
	p.cond.L = &p.mu
	if spec.Nice != 0 {
		p.renice(spec.Nice)
	}
	p.log.Debug("agent started", "argv", strings.Join(spec.Argv, " "), "stdio", spec.Stdio)

	split := splitter{max: MaxLine}
	var readErr error
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		readErr = p.readOut(&split)
	}()
	errDone := make(chan struct{})
	if w.stderr != nil {
		go func() {
			defer close(errDone)
			p.readStderr(w.stderr)
		}()
	} else {
		close(errDone)
	}
	go p.write()
	go p.monitor(outDone, errDone, &split, &readErr)
	return p, nil
}

func sysProcAttr(spec Spec, ctty bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{}
	if ctty {
		a.Setsid = true
		a.Setctty = true
		a.Ctty = 0 // the child's fd 0, the tty
	} else {
		a.Setpgid = true
	}
	if spec.UID >= 0 || spec.GID >= 0 {
		c := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
		if spec.UID >= 0 {
			c.Uid = uint32(spec.UID)
		}
		if spec.GID >= 0 {
			c.Gid = uint32(spec.GID)
		}
		// Dropping supplementary groups needs privilege; without it
		// setgroups would fail the start even when the ids are our own.
		c.NoSetGroups = os.Geteuid() != 0
		a.Credential = c
	}
	return a
}

// renice adds n to our niceness for every thread the agent has now.
func (p *Proc) renice(n int) {
	// The raw syscall returns 20 - nice.
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		p.log.Warn("nice not applied", "error", err)
		return
	}
	target := min(max(20-prio+n, -20), 19)
	tids := []int{p.pid}
	if ents, err := os.ReadDir("/proc/" + strconv.Itoa(p.pid) + "/task"); err == nil {
		tids = tids[:0]
		for _, e := range ents {
			if tid, err := strconv.Atoi(e.Name()); err == nil {
				tids = append(tids, tid)
			}
		}
	}
	for _, tid := range tids {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, target); err != nil {
			p.log.Warn("nice not applied", "tid", tid, "nice", target, "error", err)
		}
	}
}

// Pid returns the agent's process id.
func (p *Proc) Pid() int { return p.pid }

// ID returns the caller's id for the agent.
func (p *Proc) ID() int { return p.id }

// Done is closed once the Exited event has been sent.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Write queues lines (each given WITHOUT "\n"; Write adds it) and never
// blocks: a writer goroutine drains the backlog to the child's stdin; if the
// child stops reading, the backlog grows (see Backlog) — the scheduler must
// never block on a full pipe. Writes after End or Kill, or once the agent's
// input is gone, are dropped. A line containing "\n" would desynchronise the
// protocol and is dropped with a warning. In PTY mode the terminal cuts input
// lines at 4095 bytes.
func (p *Proc) Write(lines ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.ending {
		p.log.Debug("write dropped: input closed", "lines", len(lines))
		return
	}
	for _, l := range lines {
		if strings.IndexByte(l, '\n') >= 0 {
			p.log.Warn("write dropped: line contains a newline", "line", l)
			continue
		}
		if p.w.eot != nil && len(l) > ptyMaxInput {
			p.log.Warn("line longer than a terminal passes", "bytes", len(l), "max", ptyMaxInput)
		}
		p.queued = append(p.queued, l...)
		p.queued = append(p.queued, '\n')
		p.backlog += len(l) + 1
	}
	p.cond.Signal()
}

// Backlog returns the bytes queued for the agent and not yet written.
func (p *Proc) Backlog() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.backlog
}

// End asks the agent to finish: it queues an empty line and, once the
// backlog has been written, closes the agent's input (shutdown(SHUT_WR) on a
// socketpair, close on a pipe, EOT on a pty, which cannot half-close). Output
// is still read until the agent exits. Idempotent.
func (p *Proc) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ending || p.stopped {
		return
	}
	p.queued = append(p.queued, '\n')
	p.queued = append(p.queued, p.w.eot...)
	p.backlog += 1 + len(p.w.eot)
	p.ending = true
	p.cond.Signal()
}

// CloseInput is End without the empty line: once the backlog is written it
// writes partial, which must not contain "\n", unterminated, then gives the
// agent EOF on its input (a pty gets EOT twice after a partial line, the
// first only ending the read). The scheduler always uses End; the
// conformance kit (tacheck) uses this to check that an agent takes a plain
// half-close, and a partial last line, as the end of work. Idempotent, and
// a no-op after End or Kill.
func (p *Proc) CloseInput(partial string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ending || p.stopped || strings.IndexByte(partial, '\n') >= 0 {
		return
	}
	n := len(p.queued)
	p.queued = append(p.queued, partial...)
	if partial != "" {
		p.queued = append(p.queued, p.w.eot...)
	}
	p.queued = append(p.queued, p.w.eot...)
	p.backlog += len(p.queued) - n
	p.ending = true
	p.cond.Signal()
}

// Kill terminates the agent and every process of its group: its backlog is
// dropped and its input closed, then SIGTERM to the group, then SIGKILL to
// what is left of it after grace (at once if grace <= 0). Idempotent; never
// blocks. The Exited event follows as usual, once the group is empty.
func (p *Proc) Kill(grace time.Duration) {
	p.mu.Lock()
	if p.killed || p.reaped {
		p.mu.Unlock()
		return
	}
	p.killed = true
	p.stopLocked()
	sig := syscall.SIGTERM
	if grace <= 0 {
		sig = syscall.SIGKILL
	} else {
		p.timer = time.AfterFunc(grace, p.graceExpired)
	}
	// Under mu, so the agent cannot be reaped in between: the group id is
	// still held by its unreaped leader, and a signal error means
	// something.
	p.signalGroup(sig)
	p.mu.Unlock()
	p.log.Debug("agent killed", "signal", sig, "grace", grace)
	// Unblock a writer stuck on an agent that does not read.
	p.w.in.SetWriteDeadline(time.Now())
}

func (p *Proc) graceExpired() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return
	}
	p.log.Debug("grace expired, sending SIGKILL")
	p.signalGroup(syscall.SIGKILL)
}

// signalGroup sends sig to every process of the agent's group. Called with
// mu held and reaped false.
func (p *Proc) signalGroup(sig syscall.Signal) {
	if err := unix.Kill(-p.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		p.log.Warn("signal failed", "signal", sig, "error", err)
	}
}

// stopLocked drops the backlog and tells the writer to close the input and
// return.
func (p *Proc) stopLocked() {
	p.stopped = true
	p.queued = nil
	p.backlog = 0
	p.cond.Signal()
}

// write is the writer goroutine: it owns the writing end of the agent's
// input, drains the backlog into it and, at End, Kill or exit, closes it.
func (p *Proc) write() {
	defer close(p.writerDone)
	var chunk []byte
	for {
		p.mu.Lock()
		for len(p.queued) == 0 && !p.ending && !p.stopped {
			p.cond.Wait()
		}
		if p.stopped || len(p.queued) == 0 {
			p.mu.Unlock()
			break // stopped, or ending with everything written
		}
		// Double buffering: the writer takes the queue and hands back
		// its written buffer for reuse.
		chunk, p.queued = p.queued, chunk[:0]
		p.mu.Unlock()

		for off := 0; off < len(chunk); {
			n, err := p.w.in.Write(chunk[off:min(len(chunk), off+writeChunk)])
			off += n
			p.mu.Lock()
			if !p.stopped {
				p.backlog -= n
			}
			if err != nil {
				if !p.stopped {
					p.log.Debug("agent input failed", "error", err)
				}
				p.stopLocked()
			}
			stopped := p.stopped
			p.mu.Unlock()
			if stopped {
				break
			}
		}
		if cap(chunk) > 1<<20 {
			chunk = nil // a burst must not pin its memory
		}
	}
	if p.w.closeInput != nil {
		if err := p.w.closeInput(); err != nil && !p.exited.Load() {
			p.log.Debug("closing agent input", "error", err)
		}
	}
}

// emit sends one output line as an event.
func (p *Proc) emit(line string, tooLong bool) {
	if tooLong {
		p.events <- Event{ID: p.id, Kind: TooLong, Line: line}
		return
	}
	p.events <- Event{ID: p.id, Kind: Line, Line: line}
}

// Sync asks the output reader to take everything the agent has written so
// far without waiting for more, and to send a Synced event after the lines
// it read. The caller learns that nothing the agent wrote before the call is
// still unread: the scheduler calls it before it judges an agent silent, so
// that its own stall (a SIGSTOP, a long turn) is not taken for the agent's.
// It returns false when no Synced will come: the reader has finished, and
// every line it read is already on the channel. Several calls before the
// Synced event get one. Never blocks.
func (p *Proc) Sync() bool {
	p.smu.Lock()
	defer p.smu.Unlock()
	if p.readerDone {
		return false
	}
	if !p.syncing {
		p.syncing = true
		// A deadline in the past wakes a reader blocked in Read, and fails
		// its next Read at once.
		p.w.out.SetReadDeadline(time.Unix(1, 0))
	}
	return true
}

// readOut reads the protocol stream and emits its lines until its end. It
// returns nil at a normal end, ErrOutputHeld if the output stayed open and
// silent for p.drain after the process exited, or the read error. It
// answers Sync requests (Synced), one at its end too if one is pending.
func (p *Proc) readOut(split *splitter) (err error) {
	e := p.w.out
	defer func() {
		p.smu.Lock()
		owed := p.syncing
		p.syncing, p.readerDone = false, true
		p.smu.Unlock()
		if owed {
			p.events <- Event{ID: p.id, Kind: Synced}
		}
	}()
	buf := make([]byte, readChunk)
	for {
		p.smu.Lock()
		if p.exited.Load() && !p.syncing {
			// Reset before every read: time spent blocked on the events
			// channel must not count against the agent.
			e.SetReadDeadline(time.Now().Add(p.drain))
		}
		p.smu.Unlock()
		n, err := e.Read(buf)
		split.split(buf[:n], p.emit)
		switch {
		case err == nil:
		case p.w.eof(err):
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			p.smu.Lock()
			owed := p.syncing
			if owed {
				p.syncing = false
				e.SetReadDeadline(time.Time{})
			}
			p.smu.Unlock()
			if !owed {
				return ErrOutputHeld
			}
			// The deadline failed the read before it looked: read what is
			// there now, without waiting, then answer.
			end, err := p.readAvailable(e, buf, split)
			p.events <- Event{ID: p.id, Kind: Synced}
			if end {
				return err
			}
		default:
			return fmt.Errorf("agent: read: %w", err)
		}
	}
}

// readAvailable reads from e what can be read without waiting. end reports
// the end of the stream, with the read error if it was not a normal end.
func (p *Proc) readAvailable(e endpoint, buf []byte, split *splitter) (end bool, err error) {
	rc, err := e.SyscallConn()
	if err != nil {
		return true, fmt.Errorf("agent: read: %w", err)
	}
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true // never wait: only what is there now
		}); err != nil {
			return true, fmt.Errorf("agent: read: %w", err)
		}
		switch {
		case rerr == nil && n > 0:
			split.split(buf[:n], p.emit)
		case rerr == nil:
			return true, nil // EOF
		case errors.Is(rerr, unix.EAGAIN):
			return false, nil
		case errors.Is(rerr, unix.EINTR):
		case p.w.eof(rerr):
			return true, nil
		default:
			return true, fmt.Errorf("agent: read: %w", rerr)
		}
	}
}

// read splits everything from e into lines for emit until the end of the
// output. It returns nil at a normal end, ErrOutputHeld if the output stayed
// open and silent for p.drain after the process exited, or the read error.
func (p *Proc) read(e endpoint, split *splitter, emit func(string, bool)) error {
	buf := make([]byte, readChunk)
	for {
		if p.exited.Load() {
			e.SetReadDeadline(time.Now().Add(p.drain))
		}
		n, err := e.Read(buf)
		split.split(buf[:n], emit)
		switch {
		case err == nil:
		case p.w.eof(err):
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			return ErrOutputHeld
		default:
			return fmt.Errorf("agent: read: %w", err)
		}
	}
}

// readStderr sends the agent's stderr (Pipes mode) as Stderr events, line
// by line.
func (p *Proc) readStderr(e endpoint) {
	split := splitter{max: MaxLine}
	err := p.read(e, &split, func(line string, _ bool) {
		p.events <- Event{ID: p.id, Kind: Stderr, Line: line}
	})
	if n := split.pending(); n > 0 {
		p.log.Debug("agent stderr: lost unterminated line", "bytes", n)
	}
	if err != nil {
		p.log.Debug("agent stderr", "error", err)
	}
}

// monitor waits for the agent's process to exit, then for its process
// group to empty, reaps it, waits for the writer and the readers to finish,
// releases the descriptors and sends Exited.
func (p *Proc) monitor(outDone, errDone <-chan struct{}, split *splitter, readErr *error) {
	p.waitLeader()
	// The agent is gone: nothing more is written to it, whoever else holds
	// its input.
	p.mu.Lock()
	p.stopLocked()
	p.mu.Unlock()
	p.w.in.SetWriteDeadline(time.Now())
	if ms := members(p.pid); len(ms) > 0 {
		p.log.Debug("agent exited; processes of its group still run", "processes", len(ms))
		p.events <- Event{ID: p.id, Kind: Lingering, Line: strconv.Itoa(len(ms))}
		p.waitGroup(ms)
	}
	p.mu.Lock()
	p.reaped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	err := p.cmd.Wait()
	p.exited.Store(true)
	<-p.writerDone

	// Readers blocked now get the drain deadline; later reads set their own.
	p.smu.Lock()
	if !p.syncing {
		p.w.out.SetReadDeadline(time.Now().Add(p.drain))
	}
	p.smu.Unlock()
	if p.w.stderr != nil {
		p.w.stderr.SetReadDeadline(time.Now().Add(p.drain))
	}
	<-outDone
	<-errDone
	p.w.closeParent()

	partial := split.pending()
	if err == nil {
		err = *readErr
	}
	p.log.Debug("agent exited", "status", statusOf(err), "lost_bytes", partial)
	p.events <- Event{ID: p.id, Kind: Exited, Err: err, Partial: partial}
	close(p.done)
}

func statusOf(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

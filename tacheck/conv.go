package tacheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/agent"
	"zsched/report"
)

// skipError is a case that could not observe what it checks.
type skipError struct{ why string }

func (e *skipError) Error() string { return "skipped: " + e.why }

func skipf(format string, args ...any) error {
	return &skipError{why: fmt.Sprintf(format, args...)}
}

var (
	errExited = errors.New("the agent exited")
	// errAside is take's answer for an event that is neither a line of the
	// protocol stream nor the agent's exit: stderr text, a lingering group.
	errAside   = errors.New("not a protocol line")
	errTimeout = errors.New("no answer")
)

// drain bounds how long the output of an exited agent is read while a
// descendant keeps it open; the kit's agents are short-lived.
const drain = 500 * time.Millisecond

// conv is one scripted conversation: one agent process over one stdio mode,
// in its own throw-away postoffice.
type conv struct {
	ctx    context.Context
	k      *kit
	mode   agent.Stdio
	po     *postoffice
	proc   *agent.Proc
	events chan agent.Event
	tr     transcript

	exited  bool
	exit    agent.Event
	exitAt  time.Time
	endAt   time.Time // when the kit ended the agent's input
	hungry  int       // #hungry lines seen
	answers int       // lines sent that each owe a #hungry (jobs, #idle)
	held    []taken   // lines taken from events but not yet consumed
}

func newConv(ctx context.Context, k *kit, mode agent.Stdio, dir string) *conv {
	c := &conv{ctx: ctx, k: k, mode: mode, events: make(chan agent.Event, 64)}
	c.po = newPostoffice(dir, k.cfg.Channel, k.cfg.Host)
	return c
}

// setup creates the postoffice; messages are added by the case before it
// starts the agent.
func (c *conv) setup() error {
	if err := c.po.init(); err != nil {
		return fmt.Errorf("kit: %w", err)
	}
	return nil
}

// start starts the agent as the daemon would: argv and environment from the
// command with $channel and $host substituted, PATH and TZ from ours,
// working directory postoffice/transport.
func (c *conv) start() error {
	argv, env := c.k.cmd.Expand(c.k.cfg.Channel, c.k.cfg.Host)
	env = append(env, "PATH="+os.Getenv("PATH"))
	if tz, ok := os.LookupEnv("TZ"); ok {
		env = append(env, "TZ="+tz)
	}
	log := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "ta-check", Level: hclog.Off})
	log.RegisterSink(stderrSink{c})
	c.tr.start()
	shown := make([]string, len(env))
	for i, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			e = "PATH=$PATH" // ours, and long
		}
		shown[i] = e
	}
	c.tr.note("argv=%s env=%s stdio=%s cwd=postoffice/transport", quoteList(argv), quoteList(shown), c.mode)
	p, err := agent.Start(1, agent.Spec{
		Argv:  argv,
		Env:   env,
		Dir:   c.po.transport,
		Stdio: c.mode,
		UID:   -1,
		GID:   -1,
		Drain: drain,
	}, c.events, log)
	if err != nil {
		return fmt.Errorf("cannot start the agent: %w", err)
	}
	c.proc = p
	c.tr.note("agent pid %d", p.Pid())
	return nil
}

// stderrSink puts the agent's stderr (pipes mode; package agent logs it)
// into the transcript.
type stderrSink struct{ c *conv }

func (s stderrSink) Accept(_ string, _ hclog.Level, msg string, args ...any) {
	if msg != "agent stderr" {
		return
	}
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "line" {
			if l, ok := args[i+1].(string); ok {
				s.c.tr.add("ERR", l)
			}
		}
	}
}

// send writes lines to the agent, each with "\n"; job lines and #idle are
// owed a #hungry.
func (c *conv) send(lines ...string) {
	for _, l := range lines {
		c.tr.add("S> ", l+"\n")
		if l != "" {
			c.answers++
		}
	}
	c.proc.Write(lines...)
}

// jobLine is the line the scheduler writes for a job.
func (c *conv) jobLine(rel string) string {
	if c.k.hostBound {
		return rel
	}
	return rel + "\t" + c.k.cfg.Host
}

// end ends the agent's work as the scheduler does: an empty line, then a
// half-close (EOT on a pty).
func (c *conv) end() {
	c.tr.add("S> ", "\n")
	c.tr.note("half-close")
	c.endAt = time.Now()
	c.proc.End()
}

// closeInput closes the agent's input after partial (no newline).
func (c *conv) closeInput(partial string) {
	if partial != "" {
		c.tr.add("S> ", partial)
	}
	c.tr.note("half-close")
	c.endAt = time.Now()
	c.proc.CloseInput(partial)
}

// next returns the agent's next line within d. Its errors: errExited
// (wrapped, with the exit status), errTimeout, a line over the limit, or
// the context's.
func (c *conv) next(d time.Duration) (string, error) {
	if len(c.held) > 0 {
		t := c.held[0]
		c.held = c.held[1:]
		return t.line, t.err
	}
	if c.exited {
		return "", c.exitErr()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev := <-c.events:
			l, err := c.take(ev)
			if errors.Is(err, errAside) {
				continue
			}
			return l, err
		case <-timer.C:
			c.tr.note("no line within %s", d.Round(time.Millisecond))
			return "", errTimeout
		case <-c.ctx.Done():
			return "", c.ctx.Err()
		}
	}
}

// take records one event from the agent and returns it as next does.
func (c *conv) take(ev agent.Event) (string, error) {
	switch ev.Kind {
	case agent.Line:
		c.tr.add("TA>", ev.Line)
		if ev.Line == "#hungry" {
			c.hungry++
		}
		return ev.Line, nil
	case agent.TooLong:
		c.tr.add("TA>", ev.Line+"…")
		return "", fmt.Errorf("a line over %d bytes (it begins %q)", agent.MaxLine, ev.Line)
	case agent.Stderr:
		// Its own stream (pipes mode): it may come before the stdout
		// lines written earlier, so it is neither an answer nor the end.
		c.tr.add("TA2>", ev.Line)
		return "", errAside
	case agent.Lingering:
		c.tr.note("the agent exited; %s processes of its group still run", ev.Line)
		return "", errAside
	}
	c.exited, c.exit, c.exitAt = true, ev, time.Now()
	c.noteExit()
	return "", c.exitErr()
}

// hold gives a taken line back to the next call of next.
func (c *conv) hold(line string, err error) {
	c.held = append(c.held, taken{line, err})
}

type taken struct {
	line string
	err  error
}

func (c *conv) noteExit() {
	s := "exit status " + exitStatus(c.exit)
	if !c.endAt.IsZero() {
		s += fmt.Sprintf(", %s after the end of its input", c.exitAt.Sub(c.endAt).Round(time.Millisecond))
	}
	if c.exit.Partial > 0 {
		s += fmt.Sprintf("; its output ended in a partial line of %d bytes", c.exit.Partial)
	}
	c.tr.note("%s", s)
}

func (c *conv) exitErr() error {
	return fmt.Errorf("%w (status %s)", errExited, exitStatus(c.exit))
}

// exitStatus formats an Exited event's status: "0", "1", "signal: killed"…
func exitStatus(ev agent.Event) string {
	var ee *exec.ExitError
	switch {
	case ev.Err == nil:
		return "0"
	case errors.As(ev.Err, &ee) && ee.Exited():
		return strconv.Itoa(ee.ExitCode())
	}
	return ev.Err.Error()
}

// first reads up to the first #hungry: only '#' comment lines may come
// before it.
func (c *conv) first() error {
	for {
		l, err := c.next(c.k.cfg.Timeout)
		if errors.Is(err, errTimeout) {
			return fmt.Errorf("waiting for the first #hungry: %w within %s", err, c.k.cfg.Timeout)
		}
		if err != nil {
			return fmt.Errorf("waiting for the first #hungry: %w", err)
		}
		switch kindOf(l) {
		case lineHungry:
			return nil
		case lineComment:
			continue
		}
		return fmt.Errorf("%q came before the first #hungry", l)
	}
}

// answer is what the agent wrote in reply to one line, up to the #hungry
// that answers it.
type answer struct {
	reports []report.Line
	resyncs []string
	hungry  bool // ended by #hungry; false when the agent exited first
}

// reply reads the agent's answer to the line just sent: reports, #resync
// and comments up to the next #hungry. A misformed line fails at once. If
// allowExit, an exit ends the answer without an error.
func (c *conv) reply(what string, allowExit bool) (answer, error) {
	var a answer
	deadline := time.Now().Add(c.k.cfg.Timeout)
	for {
		l, err := c.next(max(time.Until(deadline), 0))
		if errors.Is(err, errExited) && allowExit {
			return a, nil
		}
		if errors.Is(err, errTimeout) {
			return a, fmt.Errorf("waiting for the answer to %s: %w within %s", what, err, c.k.cfg.Timeout)
		}
		if err != nil {
			return a, fmt.Errorf("waiting for the answer to %s: %w", what, err)
		}
		switch kindOf(l) {
		case lineHungry:
			a.hungry = true
			return a, nil
		case lineResync:
			a.resyncs = append(a.resyncs, strings.TrimSpace(l[len("#resync "):]))
		case lineComment:
		default:
			r, err := report.Parse(l)
			if err != nil {
				return a, fmt.Errorf("in the answer to %s, a misformed line %q: %w", what, l, err)
			}
			_, rest, _ := strings.Cut(l, "\t")
			notary, _, _ := strings.Cut(rest, "\t")
			if n := strings.Count(notary, "\x01"); n > 5 {
				return a, fmt.Errorf("in the answer to %s, a notary of %d fields (at most 6): %q", what, n+1, l)
			}
			a.reports = append(a.reports, r)
		}
	}
}

// waitExit reads the agent's remaining output until it exits, for at most
// d, and returns the lines it wrote meanwhile.
func (c *conv) waitExit(d time.Duration) ([]string, error) {
	var lines []string
	deadline := time.Now().Add(d)
	for !c.exited {
		l, err := c.next(max(time.Until(deadline), 0))
		if errors.Is(err, errExited) {
			break
		}
		if errors.Is(err, errTimeout) {
			return lines, fmt.Errorf("the agent did not exit within %s of the end of its input", d)
		}
		if err != nil {
			return lines, err
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// close makes sure the agent is gone: its input is ended if the case did
// not, then it is killed if it lingers; every event is drained.
func (c *conv) close() {
	if c.proc == nil {
		return
	}
	if !c.exited {
		if c.endAt.IsZero() {
			c.end()
		}
		if _, err := c.waitExit(c.k.cfg.ExitBound); err != nil && !c.exited {
			c.tr.note("killing the agent: %v", err)
			c.proc.Kill(0)
		}
	}
	for !c.exited {
		c.take(<-c.events)
	}
}

// dumpFiles lists the r and d lines of every control file the case made,
// before and after, into the transcript.
func (c *conv) dumpFiles() {
	for _, m := range c.po.msgs {
		after, err := os.ReadFile(m.path)
		if err != nil {
			c.tr.note("control file %s: %v", m.rel, err)
			continue
		}
		c.tr.note("control file %s before (%d bytes):", m.rel, len(m.orig))
		for _, l := range listing(m.orig) {
			c.tr.note("  %s", l)
		}
		c.tr.note("after (%d bytes):", len(after))
		for _, l := range listing(after) {
			c.tr.note("  %s", l)
		}
	}
}

type lineKind uint8

const (
	lineReport lineKind = iota
	lineHungry
	lineResync
	lineComment
)

// kindOf classifies an agent's line exactly as the scheduler's core does.
func kindOf(l string) lineKind {
	switch {
	case l == "#hungry":
		return lineHungry
	case strings.HasPrefix(l, "#resync "):
		return lineResync
	case strings.HasPrefix(l, "#") || l == "":
		return lineComment
	}
	return lineReport
}

// transcript is a conversation's record. The agent's stderr arrives from
// package agent's goroutine, hence the mutex.
type transcript struct {
	mu  sync.Mutex
	t0  time.Time
	out []string
}

// start sets the transcript's time zero: the agent's start.
func (t *transcript) start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.t0 = time.Now()
}

func (t *transcript) add(dir, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sec := 0.0
	if !t.t0.IsZero() {
		sec = time.Since(t.t0).Seconds()
	}
	t.out = append(t.out, fmt.Sprintf("%7.3f %s %s", sec, dir, escape(text)))
}

func (t *transcript) note(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sec := 0.0
	if !t.t0.IsZero() {
		sec = time.Since(t.t0).Seconds()
	}
	t.out = append(t.out, fmt.Sprintf("%7.3f ## %s", sec, fmt.Sprintf(format, args...)))
}

func (t *transcript) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.out...)
}

// escape shows a line as Go (and Python) escapes: \t, \r, \n, \x01.
func escape(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func quoteList(ws []string) string {
	q := make([]string, len(ws))
	for i, w := range ws {
		q[i] = strconv.Quote(w)
	}
	return "[" + strings.Join(q, " ") + "]"
}

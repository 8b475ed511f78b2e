package tacheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"zsched/agent"
	"zsched/config"
)

// Version is the protocol version the kit checks (docs/ta-protocol.md).
const Version = "1.0"

// Defaults for Config fields left zero.
const (
	DefaultChannel   = "smtp"
	DefaultHost      = "dest.test"
	DefaultTimeout   = 5 * time.Second
	DefaultExitBound = 5 * time.Second
)

// ErrConfig is wrapped by Run's errors about its Config.
var ErrConfig = errors.New("tacheck: bad configuration")

// Config says which agent to check and how.
type Config struct {
	// Command is the agent's command line as a clause's command: leading
	// NAME=value words are its environment, the first other word the
	// program (looked up in PATH like the daemon does), and "$channel",
	// "$host", "${channel}", "${host}" are substituted. A standalone
	// "$host" makes the agent host-bound: job lines then carry no host.
	Command []string
	Channel string        // channel of the test recipients; default DefaultChannel
	Host    string        // host of the test recipients; default DefaultHost
	Modes   []agent.Stdio // stdio modes to run each case over; default all three
	Cases   []string      // case names to run; default all (see Cases)
	// Timeout bounds each wait for an answer (the first #hungry, a job's
	// reports and #hungry); default DefaultTimeout.
	Timeout time.Duration
	// ExitBound bounds the time from the end of work to the agent's exit;
	// default DefaultExitBound.
	ExitBound time.Duration
	// Dir is where the throw-away postoffices are made (and removed). The
	// default is /dev/shm when it is a writable directory, since the kit
	// enqueues with fsync and tmpfs makes that free, else os.TempDir().
	Dir string
	// OnResult, when set, is called with each result as soon as its case
	// has run (Run also returns them all).
	OnResult func(Result)
}

// Verdict is a case's outcome.
type Verdict uint8

const (
	Pass Verdict = iota + 1
	Fail
	// Skip: the agent's behaviour could not be observed (see the case's
	// note); it is not a failure.
	Skip
)

func (v Verdict) String() string {
	switch v {
	case Pass:
		return "PASS"
	case Fail:
		return "FAIL"
	case Skip:
		return "SKIP"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Result is one case run over one stdio mode.
type Result struct {
	Case    string
	Rule    string // what the case checks, one line
	Stdio   agent.Stdio
	Verdict Verdict
	Why     string // for Fail and Skip: what was wrong or unobservable
	// Transcript is the conversation, one entry per line: seconds since the
	// agent was started, then "S> " (kit to agent), "TA>" (agent to kit),
	// "ERR" (the agent's stderr, pipes mode) or "## " (the kit's notes,
	// control file listings among them). Lines are Go-escaped.
	Transcript []string
	Elapsed    time.Duration
}

// Case describes one check.
type Case struct {
	Name string
	Rule string
}

// Cases returns every case in the order Run runs them.
func Cases() []Case {
	out := make([]Case, len(cases))
	for i, c := range cases {
		out[i] = Case{Name: c.name, Rule: c.rule}
	}
	return out
}

// Run runs the selected cases over the selected stdio modes, one agent
// process per case and mode, one after the other, and returns every
// result. Its error is about the configuration (nothing ran) or ctx.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	k, err := newKit(cfg)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, c := range k.cases {
		for _, m := range k.cfg.Modes {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			r := k.run(ctx, c, m)
			out = append(out, r)
			if k.cfg.OnResult != nil {
				k.cfg.OnResult(r)
			}
		}
	}
	return out, ctx.Err()
}

// kit is a validated Config.
type kit struct {
	cfg       Config
	cmd       config.Command
	hostBound bool
	cases     []kase
}

func newKit(cfg Config) (*kit, error) {
	if len(cfg.Command) == 0 {
		return nil, fmt.Errorf("%w: no agent command", ErrConfig)
	}
	cmd, err := config.CommandFromWords(cfg.Command)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	// Resolve the program now, against our working directory and PATH,
	// as the daemon does: the agent runs in the postoffice's transport/.
	prog, err := exec.LookPath(cmd.Argv[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if prog, err = filepath.Abs(prog); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	cmd.Argv[0] = prog
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if cfg.Host == "" {
		cfg.Host = DefaultHost
	}
	cfg.Host = strings.ToLower(cfg.Host)
	if strings.ContainsAny(cfg.Channel+cfg.Host, " \t\n") {
		return nil, fmt.Errorf("%w: channel and host must be single words", ErrConfig)
	}
	if len(cfg.Modes) == 0 {
		cfg.Modes = []agent.Stdio{agent.Socketpair, agent.Pipes, agent.PTY}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ExitBound <= 0 {
		cfg.ExitBound = DefaultExitBound
	}
	if cfg.Dir == "" {
		cfg.Dir = defaultDir()
	}
	k := &kit{cfg: cfg, cmd: cmd, hostBound: cmd.HostBound()}
	if len(cfg.Cases) == 0 {
		k.cases = cases
	} else {
		for _, name := range cfg.Cases {
			c, ok := caseNamed(name)
			if !ok {
				return nil, fmt.Errorf("%w: unknown case %q", ErrConfig, name)
			}
			k.cases = append(k.cases, c)
		}
	}
	return k, nil
}

func defaultDir() string {
	const shm = "/dev/shm"
	if fi, err := os.Stat(shm); err == nil && fi.IsDir() && unix.Access(shm, unix.W_OK) == nil {
		return shm
	}
	return os.TempDir()
}

// ParseModes reads "socketpair", "pipes", "pty", "all", or a comma list.
func ParseModes(s string) ([]agent.Stdio, error) {
	if s == "all" || s == "" {
		return []agent.Stdio{agent.Socketpair, agent.Pipes, agent.PTY}, nil
	}
	var out []agent.Stdio
	for _, w := range strings.Split(s, ",") {
		m, err := config.ParseStdio(strings.TrimSpace(w))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		out = append(out, agent.Stdio(m))
	}
	return out, nil
}

// run runs one case over one mode in a new postoffice.
func (k *kit) run(ctx context.Context, c kase, mode agent.Stdio) Result {
	start := time.Now()
	res := Result{Case: c.name, Rule: c.rule, Stdio: mode}
	dir, err := os.MkdirTemp(k.cfg.Dir, "ta-check-")
	if err != nil {
		res.Verdict, res.Why = Fail, "kit: "+err.Error()
		return res
	}
	defer os.RemoveAll(dir)
	cv := newConv(ctx, k, mode, dir)
	err = cv.setup()
	if err == nil {
		err = c.run(cv)
	}
	cv.close()
	var skip *skipError
	switch {
	case err == nil:
		res.Verdict = Pass
	case errors.As(err, &skip):
		res.Verdict, res.Why = Skip, skip.why
	default:
		res.Verdict, res.Why = Fail, err.Error()
	}
	cv.dumpFiles()
	res.Transcript = cv.tr.lines()
	res.Elapsed = time.Since(start)
	return res
}

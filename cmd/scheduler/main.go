// Command scheduler is zsched: a mail-queue scheduler in ZMailer's line,
// with Postfix's concurrency feedback. It is installed as zsched, with
// scheduler (ZMailer's name) beside it; both run the same program.
//
//	scheduler run [-config FILE] [-drain] [-create]  run the scheduler in the foreground
//	scheduler init [-config FILE]                    make the postoffice
//	scheduler enqueue [-config FILE] RCPT...         queue a message (router stand-in)
//	scheduler check [FILE]                           validate a configuration on this host
//	scheduler mailq|qshape|why|etrn|reload|queue|cat|kill|hold|release|flush ...
//	                                                 operator commands on the running scheduler
//	scheduler help [COMMAND] | version
//
// Exit status: 0 done, 1 failed, 2 usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/config/preflight"
	"zsched/ctlfile"
	"zsched/daemon"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// version is set at link time (-ldflags "-X main.version=1.2.3"); without
// it the module version or "devel" is shown. The commit comes from the
// build's VCS stamp (debug.ReadBuildInfo); Go does not stamp a build made
// in a git worktree, so the Makefile also sets commit at link time, which
// is used only when the stamp is missing.
var version, commit = "", ""

// Where the configuration is looked for when neither -config nor
// $ZSCHED_CONFIG names it.
const (
	localConfig  = "scheduler.toml"
	systemConfig = "/etc/zsched/scheduler.toml"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) error
	// operator: it works on the running scheduler's control socket.
	operator bool
}

// commands in the order usage lists them; operator.go adds the operator commands.
func commands() []command {
	cmds := []command{
		{"run", "run the scheduler in the foreground (-drain: exit when the queue is empty)", cmdRun, false},
		{"init", "make the postoffice (queue/, transport/) the configuration names", cmdInit, false},
		{"enqueue", "write a message into the queue and notify the scheduler", cmdEnqueue, false},
		{"check", "validate a configuration, and what it needs from this host", cmdCheck, false},
		{"ta-check", "check a transport agent against the TA protocol (-- AGENT ARGS...)",
			func(args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return cmdTACheck(args, stdout, stderr)
			}, false},
		{"simulate", "replay a traffic trace against configurations on a fake clock",
			func(args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return cmdSimulate(args, stdout, stderr)
			}, false},
		{"version", "print the version, commit and Go version", cmdVersion, false},
		{"help", "print the usage of every command, or of one", nil, false},
	}
	for _, name := range operatorOrder {
		cmds = append(cmds, command{name, operatorCommands[name].summary,
			func(args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return cmdOperator(name, args, stdout, stderr)
			}, true})
	}
	return append(cmds, queueCommands()...) // queue.go: queue, cat, kill, hold, release, flush
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: scheduler COMMAND [flags] [args]     (installed as zsched too)

commands:
`)
	for _, c := range commands() {
		if !c.operator {
			fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, "\noperator commands (on the running scheduler's control socket):\n")
	for _, c := range commands() {
		if c.operator {
			fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, `
"scheduler help COMMAND" or "scheduler COMMAND -h" prints a command's flags.
Every command takes -config FILE; without it, $ZSCHED_CONFIG, else
./%s if present, else %s.
Exit status: 0 done, 1 failed, 2 usage.
`, localConfig, systemConfig)
}

// usageError is the caller's mistake: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// errReported is a failure already explained on stderr: exit 1, nothing more.
var errReported = errors.New("failed")

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	name, args := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	if name == "help" {
		return help(args, stdout, stderr)
	}
	c, ok := findCommand(name)
	if !ok {
		fmt.Fprintf(stderr, "scheduler: unknown command %q (scheduler help lists them)\n", name)
		return 2
	}
	wantHelp := helpRequested(args)
	if wantHelp {
		stderr = stdout // asked for: the usage is the output
	}
	err := c.run(args, stdin, stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		if wantHelp {
			return 0
		}
		return 2
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "scheduler:", err)
		return 2
	case isFlagError(err):
		return 2 // the flag package has said what and printed the usage
	case errors.Is(err, errReported):
		return 1
	}
	fmt.Fprintln(stderr, "scheduler:", err)
	return 1
}

// help prints the usage of every command, or of one.
func help(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		usage(stdout)
		return 0
	case 1:
	default:
		fmt.Fprintln(stderr, "scheduler: help takes one command")
		return 2
	}
	if args[0] == "help" {
		usage(stdout)
		return 0
	}
	if _, ok := findCommand(args[0]); !ok {
		fmt.Fprintf(stderr, "scheduler: help: unknown command %q (scheduler help lists them)\n", args[0])
		return 2
	}
	return run([]string{args[0], "-h"}, nil, stdout, stdout)
}

// helpRequested reports whether args ask for the usage (before a "--").
func helpRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// isFlagError reports an error of flag.FlagSet.Parse, which has printed
// its message and the usage already.
func isFlagError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"flag provided but not defined", "flag needs an argument", "invalid value", "invalid boolean", "bad flag syntax"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// newFlags returns a command's flag set and its -config flag.
func newFlags(name, synopsis string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("scheduler "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: scheduler %s %s\n\n", name, synopsis)
		if c, ok := findCommand(name); ok && c.summary != "" {
			fmt.Fprintf(fs.Output(), "%s.\n\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
		}
		fs.PrintDefaults()
	}
	return fs, fs.String("config", "", "configuration `file` (default: $ZSCHED_CONFIG, else ./"+localConfig+
		" if present, else "+systemConfig+")")
}

// configPath is the configuration every command uses: -config, else
// $ZSCHED_CONFIG, else ./scheduler.toml if it exists, else
// /etc/zsched/scheduler.toml. A daemon and the operator commands run from
// anywhere thus find the same file, and through it the same sockets.
func configPath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if p := os.Getenv("ZSCHED_CONFIG"); p != "" {
		return p
	}
	if _, err := os.Stat(localConfig); err == nil {
		return localConfig
	}
	return systemConfig
}

// loadConfig loads the configuration flagValue names (see configPath),
// saying where it looked when there is none.
func loadConfig(flagValue string) (*config.Config, error) {
	path := configPath(flagValue)
	cfg, err := config.Load(path)
	if err != nil && errors.Is(err, fs.ErrNotExist) && flagValue == "" && os.Getenv("ZSCHED_CONFIG") == "" {
		return nil, fmt.Errorf("no configuration: ./%s is absent and %s: %w (give -config FILE or set ZSCHED_CONFIG)",
			localConfig, systemConfig, syscall.ENOENT)
	}
	return cfg, err
}

func cmdVersion(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: scheduler version\n\nPrints the version, the commit it was built from, and the Go version.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("version takes no arguments")
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// versionLine is "zsched VERSION (commit REV[+dirty] TIME) goX.Y OS/ARCH",
// from the link-time version and the build's VCS stamp.
func versionLine() string {
	v, rev, when, dirty := version, "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if rev == "" {
		rev = commit
	}
	c := "unknown commit"
	if rev != "" {
		c = "commit " + rev
		if dirty {
			c += "+dirty"
		}
		if when != "" {
			c += " " + when
		}
	}
	return fmt.Sprintf("zsched %s (%s) %s %s/%s", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newLogger(cfg *config.Config, w io.Writer) hclog.Logger {
	opts := &hclog.LoggerOptions{
		Name:       "zsched",
		Level:      hclog.LevelFromString(cfg.Scheduler.LogLevel),
		JSONFormat: cfg.Scheduler.LogFormat == "json",
		Output:     w,
		TimeFormat: logTimeFormat,
	}
	if b, ok := w.(*logBuffer); ok && !opts.JSONFormat {
		// The buffer writes each line's time (logBuffer.stamp): hclog
		// neither reads the clock nor formats it.
		b.stamp = true
		opts.DisableTime = true
		opts.TimeFn = func() time.Time { return time.Time{} }
	}
	return rfc3339Logger{hclog.New(opts)}
}

func cmdRun(args []string, _ io.Reader, _, stderr io.Writer) error {
	fs, path := newFlags("run", "[-config FILE] [-drain] [-create]", stderr)
	drain := fs.Bool("drain", false, "exit 0 once the queue is empty and no agent is busy")
	create := fs.Bool("create", false, "make the postoffice if it does not exist (as scheduler init)")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to `file`")
	tracePath := fs.String("trace", "", "write a Go execution trace of the run to `file` (go tool trace): where the goroutines wait and the CPUs idle")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on `addr`, a loopback address (e.g. 127.0.0.1:6060)")
	statsPath := fs.String("stats", "", "write the run's figures (startup read, drain, the scheduler's own CPU and memory when it drained) to `file` as JSON at exit (the bench reads them)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("run: unexpected argument %q", fs.Arg(0))
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *tracePath != "" {
		f, err := os.Create(*tracePath)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return fmt.Errorf("run: -trace: %w", err)
		}
		defer trace.Stop()
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if *create {
		if _, err := makePostoffice(cfg); err != nil {
			return err
		}
	}
	res := preflight.Check(cfg, preflight.Options{})
	if len(res.Errors) > 0 {
		fmt.Fprintf(stderr, "scheduler: run: %s cannot run on this host:\n", cfg.File)
		for _, e := range res.Errors {
			fmt.Fprintln(stderr, " ", e)
		}
		if errors.Is(res.Err(), preflight.ErrNoPostoffice) {
			fmt.Fprintln(stderr, "  (scheduler init, or run -create, makes the postoffice)")
		}
		return errReported
	}
	logOut := newLogBuffer(stderr)
	defer logOut.Flush()
	log := newLogger(cfg, logOut)
	for _, w := range res.Warnings {
		log.Warn("check", "problem", w.Error())
	}
	if *pprofAddr != "" {
		if _, _, err := servePprof(*pprofAddr, log); err != nil {
			return err
		}
	}
	var self daemon.ProcessUsage
	opt := daemon.Options{Drain: *drain, Notify: sdNotifier(log)}
	if _, set := os.LookupEnv("GOGC"); !set {
		opt.GCHeadroom = daemon.DefaultGCHeadroom // the operator's GOGC stands
	}
	if *statsPath != "" {
		// The agents still run: what the process used so far is its own.
		opt.OnDrained = func() { self.CPUSeconds, self.PeakRSSKiB = procUsage(os.Getpid()) }
	}
	d, err := daemon.New(cfg, log, opt)
	if err != nil {
		return err
	}
	if *statsPath != "" {
		defer func() {
			if err := daemon.WriteStatsFile(*statsPath, daemon.StatsFile{RunStats: d.Stats(), Self: self}); err != nil {
				log.Error("cannot write the run's figures", "error", err)
			}
		}()
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer func() { signal.Stop(sigs); close(sigs) }()
	go func() {
		stops := 0
		for sig := range sigs {
			switch {
			case sig == syscall.SIGHUP:
				d.Reload()
			case stops == 0:
				stops++
				cancel(fmt.Errorf("signal %v", sig))
			default:
				d.Hurry() // a second TERM: do not wait for the agents
			}
		}
	}()
	started := time.Now()
	log.Info("scheduler starting", "config", cfg.File, "postoffice", cfg.Scheduler.Postoffice,
		"clauses", len(cfg.Clauses), "maxta", cfg.Scheduler.MaxTA, "pid", os.Getpid(), "version", versionLine())
	err = d.Run(ctx)
	if err != nil {
		log.Error("stopped", "error", err, "uptime", time.Since(started).Round(time.Second).String())
		return errReported
	}
	log.Info("stopped", "uptime", time.Since(started).Round(time.Second).String())
	return nil
}

// sdNotifier tells systemd the daemon's states when it runs under
// Type=notify ($NOTIFY_SOCKET), and is a no-op otherwise.
func sdNotifier(log hclog.Logger) func(string) {
	return func(state string) {
		if _, err := sd.SdNotify(false, state); err != nil {
			log.Warn("sd_notify", "state", state, "error", err)
		}
	}
}

// makePostoffice creates the postoffice's directories; it reports whether
// it made any.
func makePostoffice(cfg *config.Config) (bool, error) {
	po := cfg.Scheduler.Postoffice
	fresh := false
	for _, d := range []string{"queue", "transport"} {
		if _, err := os.Stat(filepath.Join(po, d)); errors.Is(err, fs.ErrNotExist) {
			fresh = true
		}
	}
	spool := &ctlfile.Spool{Root: po, Hash: cfg.Scheduler.Hash}
	if err := spool.Init(); err != nil {
		return false, err
	}
	return fresh, nil
}

func cmdInit(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs, path := newFlags("init", "[-config FILE]", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("init: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	// The postoffice first, whatever else check finds: programs and users
	// may well come after it.
	fresh, err := makePostoffice(cfg)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if fresh {
		fmt.Fprintf(stdout, "made postoffice %s (queue/, transport/, bad/, state/)\n", cfg.Scheduler.Postoffice)
	} else {
		fmt.Fprintf(stdout, "postoffice %s exists already\n", cfg.Scheduler.Postoffice)
	}
	return reportCheck(cfg.File, preflight.Check(cfg, preflight.Options{}), stdout, stderr)
}

func cmdCheck(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs, path := newFlags("check", "[-config FILE | FILE]", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
	case 1:
		*path = fs.Arg(0)
	default:
		return usagef("check takes one file")
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	r := preflight.Check(cfg, preflight.Options{Operator: true})
	if err := reportCheck(cfg.File, r, stdout, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok: postoffice %s, %d clauses\n", cfg.File, cfg.Scheduler.Postoffice, len(cfg.Clauses))
	for _, c := range cfg.Clauses {
		fmt.Fprintf(stdout, "  line %d: %s -> %s (maxring %d, maxthr %d, overfeed %d, interval %s)\n",
			c.Line, c.Select, c.Command.String(), c.MaxRing, c.MaxThr, c.Overfeed, c.Interval)
	}
	return nil
}

// reportCheck prints preflight's warnings and errors; errors fail.
func reportCheck(file string, r preflight.Result, stdout, stderr io.Writer) error {
	for _, w := range r.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if len(r.Errors) == 0 {
		return nil
	}
	for _, e := range r.Errors {
		fmt.Fprintln(stderr, e)
	}
	if errors.Is(r.Err(), preflight.ErrNoPostoffice) {
		fmt.Fprintln(stderr, "(scheduler init, or run -create, makes the postoffice)")
	}
	fmt.Fprintf(stderr, "%s: %d problems\n", file, len(r.Errors))
	return errReported
}

// Command scheduler is zsched: a mail-queue scheduler in ZMailer's line,
// with Postfix's concurrency feedback. Subcommands:
//
//	scheduler run [-config FILE] [-drain]     run the scheduler in the foreground
//	scheduler enqueue [-config FILE] RCPT...  queue a message (router stand-in)
//	scheduler check FILE                      validate a configuration file
//	scheduler mailq|qshape|why|etrn|flush|hold|release|kill|reload ...
//	                                          operator commands on the running scheduler
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/ctlfile"
	"zsched/daemon"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: scheduler COMMAND [flags] [args]

commands:
  run      run the scheduler in the foreground (-drain: exit when the queue is empty)
  enqueue  write a message into the queue and notify the scheduler
  check    validate a configuration file and print the effective clauses
  ta-check check a transport agent against the TA protocol (-- AGENT ARGS...)
  bench    generate a queue and time its drain with the sink agent

operator commands (on the running scheduler's control socket):
`)
	opsUsage(w)
	fmt.Fprint(w, `
Every command takes -config FILE (default $ZSCHED_CONFIG, else ./scheduler.toml).
`)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, args := args[0], args[1:]
	var err error
	switch cmd {
	case "run":
		err = cmdRun(args, stderr)
	case "enqueue":
		err = cmdEnqueue(args, stdin, stdout, stderr)
	case "check":
		err = cmdCheck(args, stdout, stderr)
	case "ta-check":
		err = cmdTACheck(args, stdout, stderr)
	case "bench":
		err = cmdBench(args, stdout, stderr)
	case "simulate":
		err = cmdSimulate(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "mailq", "qshape", "why", "etrn", "flush", "hold", "release", "kill", "reload":
		err = cmdOps(cmd, args, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "scheduler: unknown command %q\n", cmd)
		usage(stderr)
		return 2
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintln(stderr, "scheduler:", err)
		return 1
	}
	return 0
}

func defaultConfig() string {
	if p := os.Getenv("ZSCHED_CONFIG"); p != "" {
		return p
	}
	return "scheduler.toml"
}

func flags(name string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("scheduler "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs, fs.String("config", defaultConfig(), "configuration `file`")
}

func newLogger(cfg *config.Config, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "zsched",
		Level:      hclog.LevelFromString(cfg.Scheduler.LogLevel),
		JSONFormat: cfg.Scheduler.LogFormat == "json",
		Output:     w,
	})
}

func cmdRun(args []string, stderr io.Writer) error {
	fs, path := flags("run", stderr)
	drain := fs.Bool("drain", false, "exit 0 once the queue is empty and no agent is busy")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile to `file`")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on `addr`, a loopback address (e.g. 127.0.0.1:6060)")
	if err := fs.Parse(args); err != nil {
		return err
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
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	logOut := newLogBuffer(stderr)
	defer logOut.Flush()
	log := newLogger(cfg, logOut)
	if *pprofAddr != "" {
		if _, _, err := servePprof(*pprofAddr, log); err != nil {
			return err
		}
	}
	d, err := daemon.New(cfg, log, daemon.Options{Drain: *drain})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer func() { signal.Stop(hup); close(hup) }()
	go func() {
		for range hup {
			d.Reload()
		}
	}()
	log.Info("scheduler starting", "config", cfg.File, "postoffice", cfg.Scheduler.Postoffice,
		"clauses", len(cfg.Clauses), "maxta", cfg.Scheduler.MaxTA, "pid", os.Getpid())
	return d.Run(ctx)
}

func cmdCheck(args []string, stdout, stderr io.Writer) error {
	fs, path := flags("check", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		*path = fs.Arg(0)
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok: postoffice %s, %d clauses\n", *path, cfg.Scheduler.Postoffice, len(cfg.Clauses))
	for _, c := range cfg.Clauses {
		fmt.Fprintf(stdout, "  line %d: %s -> %s (maxring %d, maxthr %d, overfeed %d, interval %s)\n",
			c.Line, c.Select, c.Command.String(), c.MaxRing, c.MaxThr, c.Overfeed, c.Interval)
	}
	return nil
}

func cmdEnqueue(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs, path := flags("enqueue", stderr)
	channel := fs.String("channel", "smtp", "channel for recipients given as plain addresses")
	from := fs.String("from", "", "envelope sender (empty: <>)")
	subject := fs.String("subject", "zsched test message", "Subject header")
	bodyFile := fs.String("body", "", "body `file` (\"-\": standard input; default: a one-line body)")
	notify := fs.String("notify", "", "DSN NOTIFY for every recipient, e.g. SUCCESS,FAILURE")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: scheduler enqueue [flags] RCPT...\n\nRCPT is channel/host/address, or an address (channel from -channel, host = its domain).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("enqueue: no recipients")
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	m := &ctlfile.Message{Sender: *from}
	var to []string
	for _, r := range fs.Args() {
		a, err := parseRcpt(r, *channel)
		if err != nil {
			return err
		}
		a.Notify = *notify
		m.Rcpts = append(m.Rcpts, a)
		to = append(to, a.User)
	}
	fromHdr := *from
	if fromHdr == "" {
		fromHdr = "MAILER-DAEMON"
	}
	m.Header = []byte(fmt.Sprintf("From: %s\nTo: %s\nSubject: %s\n", fromHdr, strings.Join(to, ", "), *subject))
	switch *bodyFile {
	case "":
		m.Body = []byte("This message was queued by scheduler enqueue.\n")
	case "-":
		if m.Body, err = io.ReadAll(stdin); err != nil {
			return fmt.Errorf("enqueue: body: %w", err)
		}
	default:
		if m.Body, err = os.ReadFile(*bodyFile); err != nil {
			return fmt.Errorf("enqueue: body: %w", err)
		}
	}
	spool := &ctlfile.Spool{Root: cfg.Scheduler.Postoffice, Hash: cfg.Scheduler.Hash}
	if err := spool.Init(); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	rel, err := spool.Enqueue(m)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	fmt.Fprintln(stdout, rel)
	if err := ctlfile.NotifyScheduler(cfg.Scheduler.NotifySocket, rel); err != nil {
		// Not running: its scan finds the file when it starts.
		fmt.Fprintf(stderr, "scheduler: enqueue: %s queued; the scheduler is not running\n", rel)
	}
	return nil
}

// parseRcpt reads "channel/host/address" or "address".
func parseRcpt(s, channel string) (ctlfile.Address, error) {
	if f := strings.SplitN(s, "/", 3); len(f) == 3 {
		if f[0] == "" || f[1] == "" || f[2] == "" {
			return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: empty channel, host or address", s)
		}
		return ctlfile.Address{Channel: f[0], Host: strings.ToLower(f[1]), User: f[2]}, nil
	}
	at := strings.LastIndexByte(s, '@')
	if at <= 0 || at == len(s)-1 {
		return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: want user@domain or channel/host/address", s)
	}
	return ctlfile.Address{Channel: channel, Host: strings.ToLower(s[at+1:]), User: s}, nil
}

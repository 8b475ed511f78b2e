package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	"zsched/tacheck"
)

// errChecksFailed makes ta-check exit 1 when the agent failed a case.
var errChecksFailed = errors.New("ta-check: the agent does not conform")

// cmdTACheck runs the conformance kit against an agent command:
//
//	scheduler ta-check [-stdio socketpair|pipes|pty|all] [-channel C] [-host H]
//	    [-case a,b] [-timeout D] [-exit D] [-transcript] -- AGENT ARGS...
func cmdTACheck(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler ta-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stdio := fs.String("stdio", "all", "stdio `modes`: socketpair, pipes, pty, all, or a comma list")
	channel := fs.String("channel", tacheck.DefaultChannel, "`channel` of the test recipients (give it to the agent, e.g. -c '$channel')")
	host := fs.String("host", tacheck.DefaultHost, "`host` of the test recipients")
	only := fs.String("case", "", "run only these comma-separated `cases` (default all; -list names them)")
	timeout := fs.Duration("timeout", tacheck.DefaultTimeout, "bound on each wait for an answer")
	exitBound := fs.Duration("exit", tacheck.DefaultExitBound, "bound on the agent's exit after the end of its input")
	transcript := fs.Bool("transcript", false, "print every case's transcript, not only the failures'")
	list := fs.Bool("list", false, "list the cases and exit")
	dir := fs.String("dir", "", "`directory` for the throw-away postoffices (default /dev/shm if writable, else $TMPDIR)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: scheduler ta-check [flags] -- AGENT ARGS...

Checks a transport agent against the zsched TA protocol %s (docs/ta-protocol.md).
AGENT ARGS is a clause command: leading NAME=value words are the environment,
$channel and $host are substituted, a standalone $host makes it host-bound.
Exit status: 0 every case passed (or was skipped), 1 a case failed, 2 usage.

`, tacheck.Version)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *list {
		for _, c := range tacheck.Cases() {
			fmt.Fprintf(stdout, "%-17s %s\n", c.Name, c.Rule)
		}
		return nil
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usagef("ta-check: no agent command (after --)")
	}
	modes, err := tacheck.ParseModes(*stdio)
	if err != nil {
		return usageError{err}
	}
	cfg := tacheck.Config{
		Command:   fs.Args(),
		Channel:   *channel,
		Host:      *host,
		Modes:     modes,
		Timeout:   *timeout,
		ExitBound: *exitBound,
		Dir:       *dir,
	}
	if *only != "" {
		cfg.Cases = strings.Split(*only, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pass, fail, skip int
	startFailed := ""
	cfg.OnResult = func(r tacheck.Result) {
		if pass+fail+skip == 0 && r.Verdict == tacheck.Fail && strings.HasPrefix(r.Why, "waiting for the first #hungry:") {
			// An agent that never gets to its first #hungry fails every
			// case the same way: one report, not one per case.
			startFailed = r.Why
			cancel()
		}
		fmt.Fprintf(stdout, "%s  %-10s  %-16s  ", r.Verdict, r.Stdio, r.Case)
		switch r.Verdict {
		case tacheck.Pass:
			pass++
			fmt.Fprintln(stdout, r.Rule)
		case tacheck.Fail:
			fail++
			fmt.Fprintln(stdout, r.Why)
			fmt.Fprintf(stdout, "      rule: %s\n", r.Rule)
		default:
			skip++
			fmt.Fprintln(stdout, r.Why)
		}
		if *transcript || r.Verdict == tacheck.Fail {
			for _, l := range r.Transcript {
				fmt.Fprintf(stdout, "      %s\n", l)
			}
		}
	}
	fmt.Fprintf(stdout, "zsched TA protocol %s conformance: %s (channel %s, host %s)\n",
		tacheck.Version, strings.Join(fs.Args(), " "), *channel, *host)
	if _, err := tacheck.Run(ctx, cfg); err != nil {
		if errors.Is(err, tacheck.ErrConfig) {
			fs.Usage()
			return usageError{err}
		}
		if startFailed != "" {
			fmt.Fprintf(stdout, "the agent did not start (%s): the other cases were not run\n", startFailed)
			return fmt.Errorf("%w: the agent did not start", errChecksFailed)
		}
		return err
	}
	fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", pass, fail, skip)
	if fail > 0 {
		return errChecksFailed
	}
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"

	"zsched/internal/agentbin"
	"zsched/lab"
	"zsched/postfix"
)

// postfixLab runs the active-limiter experiment against a real Postfix
// smtpd (smtpd_client_connection_count_limit) through smtp-ta, for each
// feedback style, and prints the table beside the README's figures.
func postfixLab(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab postfix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	messages := fs.Int("messages", 600, "messages, all to one destination")
	rcpts := fs.Int("rcpts", 2, "recipients per message (one delivery each)")
	client := fs.Int("client", 20, "client concurrency limit (maxthr)")
	server := fs.Int("server", 5, "Postfix's smtpd_client_connection_count_limit")
	initial := fs.Int("initial", 5, "initial concurrency")
	service := fs.Duration("service", 50*time.Millisecond, "delay per recipient in Postfix (the README's 1 s, scaled)")
	styles := fs.String("styles", strings.Join(lab.Styles, ","), "feedback styles, comma-separated")
	seed := fs.Int64("seed", 1, "random seed")
	verbose := fs.Bool("v", false, "print the scheduler's log (info and above) to stderr")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up on a style after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("postfix: unexpected argument %q", fs.Arg(0))
	}
	if err := postfix.Available(); err != nil {
		return err
	}
	var bins agentbin.Set
	defer bins.Remove()
	smtpTA, err := bins.Program("zsched/cmd/smtp-ta")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var log io.Writer
	if *verbose {
		log = stderr
	}
	var rs []lab.PostfixResult
	for _, st := range strings.Split(*styles, ",") {
		l := lab.README(strings.TrimSpace(st))
		l.Messages, l.Rcpts, l.ClientLimit, l.ServerLimit, l.Initial = *messages, *rcpts, *client, *server, *initial
		l.Service, l.Seed, l.Jitter = *service, *seed, 0
		if _, err := l.Theoretical(); err != nil {
			return err
		}
		c, cancel := context.WithTimeout(ctx, *timeout)
		r, err := lab.Postfix(c, l, smtpTA, log)
		cancel()
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	fmt.Fprintf(stdout, "Active server concurrency limiter, real Postfix %s smtpd on 127.0.0.1 with\n", postfixVersion())
	fmt.Fprintf(stdout, "smtpd_client_connection_count_limit = %d (421 and disconnect), %v per recipient; %d messages × %d\n",
		*server, *service, *messages, *rcpts)
	fmt.Fprintln(stdout, "recipients to one host, delivered by smtp-ta processes (connection caching on).")
	fmt.Fprintln(stdout, "First pass only, as the README measures: deferred = recipients deferred at their first")
	fmt.Fprintln(stdout, "attempt; concurrency = the window after each feedback event.")
	fmt.Fprintln(stdout)
	return lab.WritePostfixTable(stdout, rs)
}

func postfixVersion() string {
	out, err := exec.Command("postconf", "-h", "-d", "mail_version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

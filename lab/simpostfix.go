package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"zsched/postfix"
	"zsched/smtpclient"
)

// PostfixTraffic is the Postfix part of the simulator's validation:
// Postfix itself as the scheduler. A private Postfix instance (the client)
// relays Messages messages of Rcpts recipients at LimitedHost, injected
// over Span, to a second private instance whose smtpd takes Limit sessions
// (421 above) and delays each RCPT by Service — SCHEDULER_README's
// limiter experiment with Postfix's own queue manager and smtp client.
type PostfixTraffic struct {
	Messages, Rcpts int
	Span            time.Duration
	Limit           int
	Service         time.Duration
}

// RecordPostfix runs the experiment in dir and leaves the client's maillog
// at dir/maillog: the trace. The client never retries within the run
// (backoff of an hour): the log is Postfix's first pass.
func RecordPostfix(ctx context.Context, dir string, t PostfixTraffic) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	srv, err := postfix.Start(postfix.Config{Dir: filepath.Join(dir, "server"), ConnectionLimit: t.Limit,
		ProcessLimit: 2 * t.Limit, RcptDelay: t.Service})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer srv.Stop()
	cli, err := postfix.Start(postfix.Config{Dir: filepath.Join(dir, "client"),
		Main: []string{
			"myhostname = client.test", // the server's own name would be a mail loop
			"default_transport = smtp",
			"relayhost = [127.0.0.1]:" + strconv.Itoa(srv.Port),
			// One session per delivery, as the README's experiment.
			"smtp_connection_cache_on_demand = no",
			"queue_run_delay = 1h", "minimal_backoff_time = 1h", "maximal_backoff_time = 1h",
		},
		Master: []string{"smtp unix - - n - - smtp"},
	})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer cli.Stop()
	start := time.Now()
	for i := 0; i < t.Messages; i++ {
		at := start.Add(time.Duration(float64(t.Span) * float64(i) / float64(t.Messages)))
		if wait := time.Until(at); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return fmt.Errorf("lab: %w", context.Cause(ctx))
			}
		}
		if err := inject(ctx, cli.Addr, i, t.Rcpts); err != nil {
			return err
		}
	}
	want := t.Messages * t.Rcpts
	for deadline := time.Now().Add(10 * time.Minute); ; {
		log, err := cli.Log()
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		if strings.Count(log, ": to=<") >= want {
			return os.WriteFile(filepath.Join(dir, "maillog"), []byte(log), 0o644)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab: Postfix logged %d of %d first attempts in 10 minutes", strings.Count(log, ": to=<"), want)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("lab: %w", context.Cause(ctx))
		}
	}
}

// inject submits message i over SMTP.
func inject(ctx context.Context, addr string, i, rcpts int) error {
	c, err := smtpclient.Dial(ctx, smtpclient.Target{Addr: addr}, smtpclient.Options{HeloName: "inject.test"})
	if err != nil {
		return fmt.Errorf("lab: inject: %w", err)
	}
	defer c.Quit()
	env := smtpclient.Envelope{From: "lab@example.org"}
	for k := 0; k < rcpts; k++ {
		env.Rcpts = append(env.Rcpts, smtpclient.Rcpt{Addr: "u" + strconv.Itoa(i) + "." + strconv.Itoa(k) + "@" + LimitedHost})
	}
	tx, err := c.Send(env, strings.NewReader("Subject: lab "+strconv.Itoa(i)+"\n\nsimulator validation\n"))
	if err != nil {
		return fmt.Errorf("lab: inject: %w", err)
	}
	if tx.Final.Class() != 2 {
		return fmt.Errorf("lab: inject: Postfix refused message %d: %+v", i, tx.Final)
	}
	return nil
}

// PostfixSimConfig is the configuration a Postfix maillog is simulated
// with: zsched's defaults, or (postfixLike) Postfix's own policy — 1/N
// feedback both ways (zsched's default too), no learned ceiling, the
// initial window at once (no slow start). The
// postoffice and command are never used by the simulator.
func PostfixSimConfig(postfixLike bool) string {
	s := "[scheduler]\npostoffice = \"/nonexistent\"\n\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"smtp\"\n"
	if postfixLike {
		s += "positive_feedback = \"1/concurrency\"\nnegative_feedback = \"1/concurrency\"\nlearned_ceiling = false\nslow_start = false\n"
	}
	return s
}

package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"zsched/postfix"
)

// PostfixResult is one run against a real Postfix server, with what its
// maillog says beside the scheduler's own measurement.
type PostfixResult struct {
	Result
	Refused  int // sessions smtpd refused with 421 for the connection limit
	Sessions int // SMTP sessions smtpd saw in all
	Sent     int // recipients Postfix accepted and delivered (to discard)
}

// Postfix runs the experiment end to end against a real Postfix smtpd on
// 127.0.0.1, the README's server: Postfix's own active limiter
// (smtpd_client_connection_count_limit = ServerLimit, loopback not exempt:
// 421 and disconnect over the limit), 2 × ServerLimit smtpd processes (the
// README's process limit of 10), and Service per recipient (a policy
// service delays each RCPT, where the README used "sleep 1"). The daemon
// runs in this process and feeds real smtp-ta processes (smtpTA is the
// binary), each sending its jobs to that server and reporting every 421 as
// deferall. The first pass is measured from the scheduler's log as Real
// does; the daemon and Postfix are stopped when it is over.
func Postfix(ctx context.Context, l Limiter, smtpTA string, log io.Writer) (PostfixResult, error) {
	res := PostfixResult{Result: Result{Limiter: l, Mode: "pfix", Pending: -1}}
	dir, err := os.MkdirTemp("", "zsched-lab-postfix-")
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	defer os.RemoveAll(dir)
	// Postfix's daemons drop privileges and must reach their directories.
	if err := os.Chmod(dir, 0o755); err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	pf, err := postfix.Start(postfix.Config{
		Dir:             filepath.Join(dir, "postfix"),
		ConnectionLimit: l.ServerLimit,
		ProcessLimit:    2 * l.ServerLimit,
		RcptDelay:       l.Service,
	})
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	defer pf.Stop()

	po := filepath.Join(dir, "po")
	cfg, err := l.queue(dir, po, host, smtpTA, "-c", "smtp", "-h", "lab.test", "-F", "[127.0.0.1]:"+strconv.Itoa(pf.Port),
		"-connect-timeout", "10s", "-timeout", "60s")
	if err != nil {
		return res, err
	}

	mt := newMeter(l.Messages*l.Rcpts, l.Messages)
	res.Elapsed, err = firstPass(ctx, cfg, mt, log, l.Seed)
	mt.result(&res.Result)
	s, serr := pf.Summary()
	res.Refused, res.Sessions = s.TooMany, s.Connects
	for _, n := range s.Sent {
		res.Sent += n
	}
	if err == nil {
		err = serr
	}
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	return res, nil
}

// WritePostfixTable prints the runs as WriteTable does, then what
// Postfix's maillog shows for each: its 421 refusals (the deferrals the
// agent reported as deferall) and the recipients it delivered.
func WritePostfixTable(w io.Writer, rs []PostfixResult) error {
	base := make([]Result, len(rs))
	for i, r := range rs {
		base[i] = r.Result
	}
	if err := WriteTable(w, base); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-20s %14s %14s %22s %16s\n", "feedback style", "smtpd sessions", "421 refusals", "deferred recipients", "Postfix delivered")
	for _, r := range rs {
		if _, err := fmt.Fprintf(w, "%-20s %14d %14d %22d %16d\n", r.Feedback, r.Sessions, r.Refused, r.Deferred, r.Sent); err != nil {
			return err
		}
	}
	return nil
}

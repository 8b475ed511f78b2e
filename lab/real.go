package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/ctlfile"
	"zsched/daemon"
)

// Real runs the experiment end to end: the daemon in this process, on a
// postoffice in a temporary directory, with real agent processes running
// limited (the path of testagents/limited), which share the destination's
// ServerLimit sessions through slot files. It measures the first pass from
// the scheduler's own log and stops the daemon when the pass is over. With
// log set, the scheduler's log at info level and above goes there too.
func Real(ctx context.Context, l Limiter, limited string, log io.Writer) (Result, error) {
	res := Result{Limiter: l, Mode: "real", Pending: -1}
	dir, err := os.MkdirTemp("", "zsched-lab-")
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	defer os.RemoveAll(dir)
	po := filepath.Join(dir, "po")
	argv := []string{limited, "-c", "smtp", "-slots", filepath.Join(dir, "slots"), "-d", l.Service.String()}
	// No limit is a limit no client limit reaches; changes go through
	// -kfile, which the meter rewrites as deliveries are judged.
	top := maxLimit(l)
	if top == 0 {
		top = 10 * max(l.ClientLimit, 1)
	}
	argv = append(argv, "-k", strconv.Itoa(top))
	kfile := filepath.Join(dir, "limit")
	if len(l.Changes) > 0 {
		argv = append(argv, "-kfile", kfile)
		if err := writeLimit(kfile, l.limitAt(0)); err != nil {
			return res, err
		}
	}
	if l.Noise > 0 {
		argv = append(argv, "-noise", strconv.Itoa(l.Noise))
	}
	cfg, err := l.queue(dir, po, host, argv...)
	if err != nil {
		return res, err
	}

	mt := newMeter(l.Messages*l.Rcpts, l.Messages)
	if len(l.Changes) > 0 {
		cur := l.limitAt(0)
		mt.judged = func(n int) {
			if k := l.limitAt(n); k != cur {
				cur = k
				// Best effort: a failed write leaves the old limit, which
				// the figures would show.
				_ = writeLimit(kfile, k)
			}
		}
	}
	res.Elapsed, err = firstPass(ctx, cfg, mt, log, l.Seed)
	mt.result(&res)
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	return res, nil
}

// writeLimit sets the limit the agents read at their next job, replacing
// the file so no agent reads it half written.
func writeLimit(path string, k int) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(k)+"\n"), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// queue writes the experiment's configuration (one clause running argv) and
// its queue: l.Messages messages of l.Rcpts recipients, all at host.
func (l Limiter) queue(dir, po, host string, argv ...string) (*config.Config, error) {
	doc := fmt.Sprintf("[scheduler]\npostoffice = %s\nscaninterval = \"1s\"\nshutdown_timeout = \"10s\"\n",
		strconv.Quote(po)) + l.clause(argv...)
	cfg, err := config.Parse(filepath.Join(dir, "lab.toml"), []byte(doc))
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	sp := &ctlfile.Spool{Root: po, NoSync: true}
	if err := sp.Init(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	for i := 0; i < l.Messages; i++ {
		m := &ctlfile.Message{Sender: "lab@example.org", Header: []byte("Subject: lab " + strconv.Itoa(i)),
			Body: []byte("limiter experiment\n")}
		for k := 0; k < l.Rcpts; k++ {
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: host,
				User: "u" + strconv.Itoa(i) + "." + strconv.Itoa(k) + "@" + host})
		}
		if _, err := sp.Enqueue(m); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
	}
	return cfg, nil
}

// firstPass runs a daemon on cfg until the meter has seen every recipient's
// first attempt, then stops it; it returns how long that took.
func firstPass(ctx context.Context, cfg *config.Config, mt *meter, log io.Writer, seed int64) (time.Duration, error) {
	out := log
	if out == nil {
		out = io.Discard
	}
	d, err := daemon.New(cfg, hclog.New(&hclog.LoggerOptions{Name: "zsched", Output: out, Level: hclog.Info}),
		daemon.Options{Seed: seed, OnBatch: mt.batch})
	if err != nil {
		return 0, fmt.Errorf("lab: %w", err)
	}
	run, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- d.Run(run) }()
	select {
	case <-mt.done:
		elapsed := time.Since(start)
		stop()
		return elapsed, <-done
	case err = <-done:
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("first pass not over: %w", context.Cause(ctx))
		case err == nil:
			err = errors.New("the daemon stopped before the first pass was over")
		}
		return 0, err
	}
}

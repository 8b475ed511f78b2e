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
	doc := fmt.Sprintf("[scheduler]\npostoffice = %s\nscaninterval = \"1s\"\nshutdown_timeout = \"10s\"\n",
		strconv.Quote(po)) +
		l.clause(limited, "-c", "smtp", "-slots", filepath.Join(dir, "slots"),
			"-k", strconv.Itoa(l.ServerLimit), "-d", l.Service.String())
	cfg, err := config.Parse(filepath.Join(dir, "lab.toml"), []byte(doc))
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	sp := &ctlfile.Spool{Root: po, NoSync: true}
	if err := sp.Init(); err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	for i := 0; i < l.Messages; i++ {
		m := &ctlfile.Message{Sender: "lab@example.org", Header: []byte("Subject: lab " + strconv.Itoa(i)),
			Body: []byte("limiter experiment\n")}
		for k := 0; k < l.Rcpts; k++ {
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: host,
				User: "u" + strconv.Itoa(i) + "." + strconv.Itoa(k) + "@" + host})
		}
		if _, err := sp.Enqueue(m); err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
	}

	mt := newMeter(l.Messages*l.Rcpts, l.Messages)
	d, err := daemon.New(cfg, mt.logger(log, hclog.Info), daemon.Options{Seed: l.Seed})
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	run, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- d.Run(run) }()
	select {
	case <-mt.done:
		res.Elapsed = time.Since(start)
		stop()
		err = <-done
	case err = <-done:
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("first pass not over: %w", context.Cause(ctx))
		case err == nil:
			err = errors.New("the daemon stopped before the first pass was over")
		}
	}
	mt.result(&res)
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	return res, nil
}

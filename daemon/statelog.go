package daemon

import (
	"bufio"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The per-attempt log (statelog in scheduler.toml): one line per
// recipient outcome, with exactly the keys and values of the outcome line
// of the main log (msg rcpt to channel host ta status delay attempts next
// text) and its format (log_format), so that what reads one reads the
// other. The file is opened for appending and reopened by every reload
// (SIGHUP, `scheduler reload`), whether the new configuration loads or
// not: logrotate moves the file, then sends HUP. Lines are buffered for
// at most statelogDelay; a crash loses at most that much of this log,
// never delivery state.

const statelogDelay = 50 * time.Millisecond

// stateLog is the open statelog; nil when none is configured.
type stateLog struct {
	path   string
	format string // log_format at open
	log    hclog.Logger

	mu    sync.Mutex
	f     *os.File
	w     *bufio.Writer
	timer *time.Timer
}

// Write buffers p; the timer writes it out.
func (s *stateLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w.Buffered() == 0 {
		s.timer.Reset(statelogDelay)
	}
	return s.w.Write(p)
}

func (s *stateLog) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Flush()
}

// outcome writes an outcome line's key/value list.
func (s *stateLog) outcome(kv []any) {
	if s == nil {
		return
	}
	s.log.Info("outcome", kv...)
}

// close writes what is buffered and closes the file.
func (s *stateLog) close() {
	if s == nil {
		return
	}
	s.timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Flush()
	s.f.Close()
}

// openStateLog opens (or, on a reload, reopens) the statelog of the
// running configuration.
func (d *Daemon) openStateLog() error {
	p := d.cfg.Scheduler.StateLog
	old := d.statelog
	if p == "" {
		d.statelog = nil
		old.close()
		return nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("daemon: statelog: %w", err)
	}
	s := &stateLog{path: p, format: d.cfg.Scheduler.LogFormat, f: f, w: bufio.NewWriterSize(f, 64<<10)}
	s.timer = time.AfterFunc(time.Hour, func() {
		if err := s.flush(); err != nil {
			d.log.Error("cannot write the statelog", "file", p, "error", err)
		}
	})
	s.timer.Stop()
	// The main log's name and format: the lines are the outcome lines.
	s.log = hclog.New(&hclog.LoggerOptions{Name: "zsched", Level: hclog.Info, Output: s,
		JSONFormat: d.cfg.Scheduler.LogFormat == "json"})
	d.statelog = s
	old.close()
	return nil
}

// reopenStateLog is openStateLog for a reload: an error is logged, and the
// scheduler goes on without the statelog until the next reload.
func (d *Daemon) reopenStateLog() {
	if d.outcomes != nil {
		d.outcomes.sync() // the lines queued for the old file go to it
	}
	if err := d.openStateLog(); err != nil {
		d.log.Error("cannot reopen the statelog", "file", d.cfg.Scheduler.StateLog, "error", err)
		d.statelog.close()
		d.statelog = nil
		return
	}
	if d.statelog != nil {
		d.log.Info("statelog reopened", "file", d.statelog.path)
	}
}

package main

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// logBuffer holds the scheduler's log output for at most logDelay before
// writing it. Under load the scheduler logs a line per recipient attempt;
// written one by one that is a system call per recipient, the largest
// single cost of a busy scheduler after the agents' own. A crash loses at
// most logDelay of log lines, never delivery state (that lives in the
// control files).
type logBuffer struct {
	mu    sync.Mutex
	w     *bufio.Writer
	timer *time.Timer // armed while the buffer holds bytes

	// stamp: each Write is a line of the plain format without its time,
	// which Write puts in front (newLogger). hclog formats the time anew
	// for every line, a fifth of an outcome line's cost (615 → 475 ns in
	// BenchmarkRunLogLine); here it is formatted once per millisecond (a
	// busy scheduler writes some hundred lines in one), and the same
	// bytes come out.
	stamp   bool
	stampMs int64  // the Unix millisecond stampAt holds
	stampAt []byte // its time in logTimeFormat and a space
}

const logDelay = 50 * time.Millisecond

func newLogBuffer(w io.Writer) *logBuffer {
	b := &logBuffer{w: bufio.NewWriterSize(w, 64<<10)}
	b.timer = time.AfterFunc(time.Hour, func() { b.Flush() })
	b.timer.Stop()
	return b
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.w.Buffered() == 0 {
		b.timer.Reset(logDelay)
	}
	if b.stamp {
		now := time.Now()
		if ms := now.UnixMilli(); ms != b.stampMs || b.stampAt == nil {
			b.stampMs = ms
			b.stampAt = append(now.AppendFormat(b.stampAt[:0], logTimeFormat), ' ')
		}
		b.w.Write(b.stampAt) // bufio keeps the error for the line's write
	}
	return b.w.Write(p)
}

// Flush writes what is held now.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer.Stop()
	return b.w.Flush()
}

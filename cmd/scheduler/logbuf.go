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
	return b.w.Write(p)
}

// Flush writes what is held now.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer.Stop()
	return b.w.Flush()
}

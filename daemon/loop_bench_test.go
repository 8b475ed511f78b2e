package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/ctlfile"
)

// BenchmarkLoopCeiling drains, per iteration, a queue shaped like `scheduler
// bench`'s (messages × 5 recipients, each to another of 1 000 domains; the
// bench's clause: maxring 4, overfeed 32; every outcome logged at info, as
// in production) through Run with Options.LoopThread, and reports what the
// loop goroutine alone costs: its thread's CPU per recipient, and the rate
// that CPU would sustain were the agents, the readers and the removers free
// and on other cores (loop-rcpts/s, the loop's ceiling). The agents are
// real sinks; their cost and the file work beside the loop are outside the
// measure, which is the loop's thread only. rcpts/s is the drain's wall
// rate on this machine; loop-share is the loop's part of the scheduler
// process's CPU (agents excluded).
//
//	go test -run '^$' -bench LoopCeiling -benchtime 5x ./daemon
func BenchmarkLoopCeiling(b *testing.B) {
	const messages, rcpts, domains = 10_000, 5, 1_000
	agents := bins.AgentsFor(b)
	var loopCPU, procCPU, wall time.Duration
	for range b.N {
		b.StopTimer()
		d := loopDaemon(b, agents["sink"], messages, rcpts, domains)
		cpu := cpuTime()
		start := time.Now()
		b.StartTimer()
		if err := d.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		wall += time.Since(start)
		procCPU += cpuTime() - cpu
		loopCPU += d.LoopCPU()
		if c := d.core.Counters(); c.Delivered != messages*rcpts {
			b.Fatalf("delivered %d of %d", c.Delivered, messages*rcpts)
		}
	}
	total := float64(messages * rcpts * b.N)
	b.ReportMetric(total/wall.Seconds(), "rcpts/s")
	b.ReportMetric(total/loopCPU.Seconds(), "loop-rcpts/s")
	b.ReportMetric(float64(loopCPU.Nanoseconds())/total, "loop-ns/rcpt")
	b.ReportMetric(loopCPU.Seconds()/procCPU.Seconds(), "loop-share")
	b.ReportMetric(0, "ns/op")
}

// loopDaemon queues messages × rcpts over domains (recipient i*rcpts+r at
// domain (i*rcpts+r) mod domains, as cmd/bench) in a fresh
// postoffice and returns a draining daemon on it with the bench's clause.
func loopDaemon(b *testing.B, sink string, messages, rcpts, domains int) *Daemon {
	dir := b.TempDir()
	text := fmt.Appendf(nil, `[scheduler]
postoffice = %q
log_level = "info"
maxta = 12
message_active_limit = 20000
recipient_active_limit = 20000
scaninterval = "1h"

[[clause]]
select = "smtp/*"
command = ["GOMAXPROCS=1", %q, "-c", "smtp"]
maxring = 4
maxthr = 20
initial_concurrency = 5
overfeed = 32
`, filepath.Join(dir, "po"), sink)
	file := filepath.Join(dir, "bench.toml")
	if err := os.WriteFile(file, text, 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load(file)
	if err != nil {
		b.Fatal(err)
	}
	spool := &ctlfile.Spool{Root: cfg.Scheduler.Postoffice, Hash: 2, NoSync: true}
	if err := spool.Init(); err != nil {
		b.Fatal(err)
	}
	m := &ctlfile.Message{Sender: "bench@example.org", Header: []byte("Subject: bench\n"), Body: []byte("bench\n")}
	for i := range messages {
		m.Rcpts = m.Rcpts[:0]
		for r := range rcpts {
			dn := strconv.Itoa((i*rcpts + r) % domains)
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: "d" + dn + ".test",
				User: "u" + strconv.Itoa(i) + "." + strconv.Itoa(r) + "@d" + dn + ".test"})
		}
		if _, err := spool.Enqueue(m); err != nil {
			b.Fatal(err)
		}
	}
	// Formatted as in production, written nowhere: the formatting is the
	// loop's cost, the write the log buffer's.
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: bufio.NewWriterSize(io.Discard, 64<<10)})
	d, err := New(cfg, log, Options{Drain: true, LoopThread: true})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

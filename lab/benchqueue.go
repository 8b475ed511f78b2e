package lab

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"sync"

	"zsched/ctlfile"
)

// BenchQueue is the benchmarks' queue, the same for `make bench`
// (cmd/bench) and for null-vs-postfix and smtp-vs-postfix (Versus):
// Messages messages of Rcpts recipients, recipient r of message i at
// domain (i·Rcpts+r) mod Domains, from bench@example.org with From,
// Subject and a one-line body.
type BenchQueue struct {
	Messages, Rcpts, Domains int
}

// Flags adds -messages, -rcpts and -domains to fs, with make bench's
// defaults: 20 000 messages × 5 recipients over 1 000 domains.
func (q *BenchQueue) Flags(fs *flag.FlagSet) {
	fs.IntVar(&q.Messages, "messages", 20000, "messages to queue")
	fs.IntVar(&q.Rcpts, "rcpts", 5, "recipients per message")
	fs.IntVar(&q.Domains, "domains", 1000, "destination domains")
}

// Rcpt returns recipient r of message i: its domain and its address.
func (q BenchQueue) Rcpt(i, r int) (domain, addr string) {
	d := "d" + strconv.Itoa((i*q.Rcpts+r)%q.Domains) + ".test"
	return d, "u" + strconv.Itoa(i) + "." + strconv.Itoa(r) + "@" + d
}

const (
	benchSender = "bench@example.org"
	benchHeader = "From: bench@example.org\nSubject: bench\n"
	benchBody   = "This is a benchmark message.\n"
)

// Write enqueues the queue into spool (initialised; a benchmark's spool
// has NoSync) on as many goroutines as there are CPUs, which
// Spool.Enqueue allows. host, unless empty, is every recipient's host in
// place of its domain: a relay, as ZMailer's router names a smarthost.
func (q BenchQueue) Write(spool *ctlfile.Spool, host string) error {
	workers := min(runtime.GOMAXPROCS(0), q.Messages)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &ctlfile.Message{Sender: benchSender, Header: []byte(benchHeader), Body: []byte(benchBody)}
			for i := w; i < q.Messages; i += workers {
				m.Rcpts = m.Rcpts[:0]
				for r := range q.Rcpts {
					d, a := q.Rcpt(i, r)
					if host != "" {
						d = host
					}
					m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: d, User: a})
				}
				if _, err := spool.Enqueue(m); err != nil {
					errs[w] = fmt.Errorf("lab: queue: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

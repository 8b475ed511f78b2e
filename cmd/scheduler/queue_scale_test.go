package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/ctlfile"
)

var queueScale = flag.Int("queue.scale", 0, "TestQueueListingScale: recipients on disk (5 per message), e.g. 1000000; 0 skips it")

// TestQueueListingScale measures `scheduler queue -json | wc -c` on a
// large spool (issue 17): -queue.scale recipients on disk, a 200 000
// recipient active limit, a slow agent delivering all along. It reports
// the listing's time, size and the command's own peak RSS, the
// scheduler's peak RSS during the listing and during an equal time
// without one (interleaved, three rounds), and the deliveries made during
// each. A measurement, not a CI test:
//
//	go test ./cmd/scheduler -run QueueListingScale -queue.scale 1000000 -v -timeout 60m
func TestQueueListingScale(t *testing.T) {
	if *queueScale == 0 {
		t.Skip("-queue.scale N to run")
	}
	const per = 5
	msgs := *queueScale / per
	p := newPostoffice(t, "")
	p.rewrite(fmt.Sprintf("\n[[clause]]\nselect = \"smtp/*\"\ncommand = [%q, \"-c\", \"smtp\", \"-d\", \"5ms\"]\nmaxring = 4\n",
		p.agent("slow")))
	b, _ := os.ReadFile(p.config)
	cfg := strings.Replace(string(b), "[scheduler]\n",
		"[scheduler]\nmessage_active_limit = 1000000\nrecipient_active_limit = 200000\nhash = 2\n", 1)
	os.WriteFile(p.config, []byte(cfg), 0o644)
	po := p.postofficeDir()
	spool := &ctlfile.Spool{Root: po, NoSync: true, Hash: 2}
	if err := spool.Init(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for m := range msgs {
		msg := &ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: scale\n"), Body: []byte("x\n")}
		for r := range per {
			host := fmt.Sprintf("d%d.test", (m*per+r)%1000)
			msg.Rcpts = append(msg.Rcpts, ctlfile.Address{Channel: "smtp", Host: host, User: fmt.Sprintf("u%d.%d@%s", m, r, host)})
		}
		if _, err := spool.Enqueue(msg); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("queued %d recipients in %d messages in %s", msgs*per, msgs, time.Since(start).Round(time.Second))

	cmd, log, done := p.start("run")
	waitLine(t, log, "startup read over")
	pid := cmd.Process.Pid
	outcomes := func() int { return strings.Count(log.String(), "zsched: outcome:") }
	type round struct {
		listing          bool
		secs             float64
		peakKB, bytes    int64
		clientKB         int64 // the listing command's own peak RSS
		deliveries, msgs int
	}
	var rounds []round
	listingTime := 10 * time.Second
	for i := range 6 {
		r := round{listing: i%2 == 0}
		resetPeak(t, pid)
		before := outcomes()
		t0 := time.Now()
		if r.listing {
			c := p.scheduler("queue", "-json", "-timeout", "5m")
			out, _ := c.StdoutPipe()
			var stderr strings.Builder
			c.Stderr = &stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, bufio.NewReaderSize(out, 1<<20)) // wc -c
			if err := c.Wait(); err != nil {
				t.Fatalf("queue -json: %v\n%s", err, stderr.String())
			}
			r.bytes = n
			if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
				r.clientKB = ru.Maxrss // KiB on Linux
			}
			listingTime = time.Since(t0)
		} else {
			time.Sleep(listingTime) // the same window without a listing: a measurement, not a synchronisation
		}
		r.secs = time.Since(t0).Seconds()
		r.peakKB = peakRSS(t, pid)
		r.deliveries = outcomes() - before
		rounds = append(rounds, r)
		t.Logf("round %d listing=%v: %.1f s, %d bytes, peak RSS %d KiB (the listing command's %d KiB), %d outcomes during it",
			i, r.listing, r.secs, r.bytes, r.peakKB, r.clientKB, r.deliveries)
	}
	med := func(listing bool, f func(round) float64) float64 {
		var v []float64
		for _, r := range rounds {
			if r.listing == listing {
				v = append(v, f(r))
			}
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	with := med(true, func(r round) float64 { return float64(r.peakKB) })
	without := med(false, func(r round) float64 { return float64(r.peakKB) })
	t.Logf("median: listing %.1f s, %.0f MB; peak RSS with listing %.0f MiB, without %.0f MiB (%+.1f %%); outcomes during listing %.0f, without %.0f",
		med(true, func(r round) float64 { return r.secs }), med(true, func(r round) float64 { return float64(r.bytes) / 1e6 }),
		with/1024, without/1024, 100*(with-without)/without,
		med(true, func(r round) float64 { return float64(r.deliveries) }), med(false, func(r round) float64 { return float64(r.deliveries) }))
	cmd.Process.Signal(syscall.SIGTERM)
	waitExit(t, done, log, 2*time.Minute)
}

// resetPeak resets the process's peak RSS (VmHWM): clear_refs 5.
func resetPeak(t *testing.T, pid int) {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
}

// peakRSS is VmHWM in KiB.
func peakRSS(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

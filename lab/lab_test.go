package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestLimiterSimMatchesREADME runs the README's experiment in simulation
// (2000 recipients, 1 s each, fake clock) and holds each feedback style to
// the README: the first-pass deferred share near its theoretical
// 1/(1+roundup(1/feedback)) and the measured Postfix figures, the average
// window just above the server's limit of 5.
func TestLimiterSimMatchesREADME(t *testing.T) {
	for _, tc := range []struct {
		style          string
		lo, hi         float64 // first-pass deferred %
		concLo, concHi float64 // average window
	}{
		// Postfix measured 16.5 / 5.17, 24.5 / 5.28, 49.7 / 5.63.
		{"1/concurrency", 15, 18.5, 5.1, 5.3},
		{"1/sqrt_concurrency", 22.5, 27, 5.15, 5.45},
		{"1", 47, 52, 5.35, 5.75},
	} {
		t.Run(strings.ReplaceAll(tc.style, "/", "÷"), func(t *testing.T) {
			r, err := Sim(README(tc.style))
			if err != nil {
				t.Fatal(err)
			}
			pct := 100 * r.DeferredRate()
			t.Logf("%s: deferred %.1f%%, concurrency %.2f / %.2f over %d deliveries",
				tc.style, pct, r.Concurrency.Mean, r.Concurrency.StdDev, r.Deliveries)
			if r.Recipients != 2000 || r.Deliveries != 1000 {
				t.Fatalf("first pass: %d recipients, %d deliveries judged; want 2000 and 1000", r.Recipients, r.Deliveries)
			}
			if pct < tc.lo || pct > tc.hi {
				t.Errorf("first-pass deferred %.1f%%, want %.1f..%.1f", pct, tc.lo, tc.hi)
			}
			if c := r.Concurrency.Mean; c < tc.concLo || c > tc.concHi {
				t.Errorf("average concurrency %.2f, want %.2f..%.2f", c, tc.concLo, tc.concHi)
			}
			if r.Pending != 0 {
				t.Errorf("%d recipients left undelivered after draining", r.Pending)
			}
		})
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	r := Result{Limiter: README("1/concurrency"), Mode: "sim", Recipients: 2000, Deferred: 330,
		Deliveries: 1000, Concurrency: Stats{Mean: 5.17, StdDev: 0.38}, Elapsed: 5 * time.Minute}
	if err := WriteTable(&b, []Result{r}); err != nil {
		t.Fatal(err)
	}
	line := strings.Split(strings.TrimSpace(b.String()), "\n")[4]
	for _, want := range []string{"16.5", "16.7 (1/6)", "5.17 / 0.38", "1000", "5m0s"} {
		if !strings.Contains(line, want) {
			t.Errorf("row %q lacks %q", line, want)
		}
	}
	if _, err := (Limiter{Feedback: "fast"}).Theoretical(); err == nil {
		t.Error("an unknown feedback style was accepted")
	}
}

// TestLimiterEndToEnd is the experiment with real processes, shortened:
// the daemon, agents of testagents/limited sharing 5 sessions through
// flock'ed slot files, 20 ms per recipient. Timing on a loaded machine
// varies, so the bounds are loose; `go run ./cmd/lab feedback -real`
// prints the full table. (Now and then a burst of successes lifts the
// window to 7, and the refusals that follow, re-fed within a millisecond
// while the 5 sessions last, add up to a pseudo-cohort: the destination is
// declared dead and revived by the next success some milliseconds later,
// as Postfix's would be.)
func TestLimiterEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	limited := bins.AgentsFor(t)["limited"]
	l := README("1/concurrency")
	l.Messages, l.Service = 150, 20*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	r, err := Real(ctx, l, limited, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	pct := 100 * r.DeferredRate()
	t.Logf("real: deferred %.1f%%, concurrency %.2f / %.2f over %d deliveries in %v",
		pct, r.Concurrency.Mean, r.Concurrency.StdDev, r.Deliveries, r.Elapsed)
	if r.Recipients != 300 || r.Deliveries != 150 {
		t.Fatalf("first pass: %d recipients, %d deliveries; want 300 and 150", r.Recipients, r.Deliveries)
	}
	if pct < 5 || pct > 35 {
		t.Errorf("first-pass deferred %.1f%%, want about 16.7", pct)
	}
	if c := r.Concurrency.Mean; c < 4.5 || c > 7 {
		t.Errorf("average concurrency %.2f, want just above the server's 5", c)
	}
}

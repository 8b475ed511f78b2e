package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestCeilingSim runs every ceiling experiment in simulation (fake
// clock, under two seconds) and holds the learned ceiling to the issue's
// targets beside plain 1/N on the same runs: at most 3 % first-pass
// deferrals against a limiter of 5 with the window at 4.8 or more, the
// unlimited ramp no slower, no collapse under noise, a bounded follow of
// a limit that rises and a fall as fast as Postfix's.
func TestCeilingSim(t *testing.T) {
	rows, err := RunCeiling(context.Background(), "sim", Experiments("sim"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteCeilingTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	for _, r := range rows {
		if !r.Met {
			t.Errorf("%s, %s: 1/N %v, ceiling %v, target %s", r.Name, r.Measure, r.PostfixFigure, r.LearnedFigure, r.Target)
		}
	}
	// The 1/N side is Postfix's as the README measured it.
	if pf := rows[0].PostfixFigure; pf < 15 || pf > 18.5 {
		t.Errorf("1/N first-pass deferred %.1f %%, want about 16.7", pf)
	}
	if !strings.Contains(b.String(), "limiter 5") {
		t.Errorf("table lacks its rows:\n%s", b.String())
	}
}

// TestCeilingEndToEnd is the limiter row with real processes, shortened:
// the daemon and testagents/limited with 5 sessions, 20 ms per recipient.
func TestCeilingEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	limited := bins.AgentsFor(t)["limited"]
	l := readme("real")
	l.Messages, l.Ceiling = 400, true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	r, err := Real(ctx, l, limited, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	pct := 100 * r.DeferredRate()
	t.Logf("real, ceiling: deferred %.1f%%, window %.2f / %.2f over %d deliveries in %v",
		pct, r.Concurrency.Mean, r.Concurrency.StdDev, r.Deliveries, r.Elapsed)
	// Learning costs two refusals, then one per some 51 deliveries; real
	// timing adds a few.
	if pct > 6 {
		t.Errorf("first-pass deferred %.1f%%, want a few percent (1/N: 16.7)", pct)
	}
	if c := r.Concurrency.Mean; c < 4.5 || c > 6 {
		t.Errorf("average window %.2f, want about the server's 5", c)
	}
}

package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// The learned-ceiling experiments (issue 10): each runs the same setting
// twice, with Postfix's 1/N feedback alone (learned_ceiling = false) and
// with the learned ceiling, and reports one measure of each side by side.

// Experiment is one row of the ceiling table.
type Experiment struct {
	Name    string
	Measure string // what the two figures are
	Target  string // what the ceiling must show
	Limiter Limiter
	// figure computes the row's measure from a run.
	figure func(r Result) (float64, error)
	// format prints a figure.
	format string
	// ok reports whether the ceiling's figure meets the target, given
	// the plain 1/N figure.
	ok func(postfix, ceiling float64) bool
}

// Row is an experiment's outcome in one mode.
type Row struct {
	Experiment
	Mode             string // "sim" or "real"
	Postfix, Learned Result
	PostfixFigure    float64
	LearnedFigure    float64
	Met              bool
}

// readme is the README experiment with 1/N feedback, scaled to mode.
func readme(mode string) Limiter {
	l := README("1/concurrency")
	if mode == "real" {
		l.Service, l.Jitter = 20*time.Millisecond, 0
	}
	return l
}

// Experiments returns the rows for mode "sim" (1 s per recipient,
// fake clock) or "real" (the daemon and testagents/limited, 20 ms per
// recipient). The change experiment runs 3000 deliveries: the limit rises
// from 5 to 10 after 1000 and falls back to 5 after 2000.
func Experiments(mode string) []Experiment {
	lim := readme(mode)

	unl := readme(mode)
	unl.ServerLimit = 0

	noisy := func(k int) Limiter {
		l := readme(mode)
		l.ServerLimit, l.Noise = 0, k
		return l
	}

	chg := readme(mode)
	chg.Messages = 3000
	chg.Changes = []Change{{After: 1000, Limit: 10}, {After: 2000, Limit: 5}}

	deferred := func(r Result) (float64, error) { return 100 * r.DeferredRate(), nil }
	mean := func(r Result) (float64, error) { return r.Concurrency.Mean, nil }
	return []Experiment{
		{Name: "limiter 5", Measure: "first-pass deferred %", Target: "<= 3",
			Limiter: lim, figure: deferred, format: "%.1f",
			ok: func(_, c float64) bool { return c <= 3 }},
		{Name: "limiter 5", Measure: "average window", Target: ">= 4.8",
			Limiter: lim, figure: mean, format: "%.2f",
			ok: func(_, c float64) bool { return c >= 4.8 }},
		{Name: "unlimited", Measure: "deliveries until window 20", Target: "<= 1/N's",
			Limiter: unl, format: "%.0f",
			figure: func(r Result) (float64, error) { return reach(r.Trace, 0, func(w float64) bool { return w >= 20 }) },
			ok:     func(p, c float64) bool { return c <= p }},
		{Name: "noisy, 1 of 4 fails", Measure: "average window", Target: "no collapse",
			Limiter: noisy(4), figure: mean, format: "%.2f",
			ok: func(p, c float64) bool { return c >= 0.8*p }},
		{Name: "noisy, 1 of 10 fails", Measure: "average window", Target: "no collapse",
			Limiter: noisy(10), figure: mean, format: "%.2f",
			ok: func(p, c float64) bool { return c >= 0.8*p }},
		{Name: "limit 5→10 at 1000", Measure: "deliveries until window 10", Target: "<= 200",
			Limiter: chg, format: "%.0f",
			figure: func(r Result) (float64, error) { return reach(r.Trace, 1000, func(w float64) bool { return w >= 10 }) },
			ok:     func(_, c float64) bool { return c <= 200 }},
		{Name: "limit 10→5 at 2000", Measure: "deliveries until window 5", Target: "<= 50",
			Limiter: chg, format: "%.0f",
			figure: func(r Result) (float64, error) { return reach(r.Trace, 2000, func(w float64) bool { return w <= 5 }) },
			ok:     func(_, c float64) bool { return c <= 50 }},
		{Name: "limit 5→10→5", Measure: "first-pass deferred %", Target: "below 1/N's",
			Limiter: chg, figure: deferred, format: "%.1f",
			ok: func(p, c float64) bool { return c < p }},
	}
}

// reach returns how many feedback events after the from-th it took for the
// window to satisfy ok (1 = the first one after from).
func reach(trace []float64, from int, ok func(float64) bool) (float64, error) {
	for i := from; i < len(trace); i++ {
		if ok(trace[i]) {
			return float64(i - from + 1), nil
		}
	}
	return 0, fmt.Errorf("lab: the window never got there in %d deliveries", len(trace)-from)
}

// RunCeiling runs the experiments in mode ("sim", or "real" with limited,
// the path of testagents/limited) and returns their rows. Runs with the
// same Limiter are shared between rows.
func RunCeiling(ctx context.Context, mode string, exps []Experiment, limited string, log io.Writer) ([]Row, error) {
	type key struct {
		desc    string
		ceiling bool
	}
	done := make(map[key]Result)
	run := func(l Limiter, ceiling bool) (Result, error) {
		l.Ceiling = ceiling
		k := key{fmt.Sprintf("%+v", l), ceiling}
		if r, ok := done[k]; ok {
			return r, nil
		}
		var r Result
		var err error
		if mode == "real" {
			c, cancel := context.WithTimeout(ctx, 5*time.Minute)
			r, err = Real(c, l, limited, log)
			cancel()
		} else {
			r, err = Sim(l)
		}
		if err != nil {
			return r, err
		}
		done[k] = r
		return r, nil
	}
	var rows []Row
	for _, e := range exps {
		row := Row{Experiment: e, Mode: mode}
		var err error
		if row.Postfix, err = run(e.Limiter, false); err != nil {
			return rows, fmt.Errorf("%s, 1/N: %w", e.Name, err)
		}
		if row.Learned, err = run(e.Limiter, true); err != nil {
			return rows, fmt.Errorf("%s, ceiling: %w", e.Name, err)
		}
		if row.PostfixFigure, err = e.figure(row.Postfix); err != nil {
			return rows, fmt.Errorf("%s, 1/N: %w", e.Name, err)
		}
		if row.LearnedFigure, err = e.figure(row.Learned); err != nil {
			return rows, fmt.Errorf("%s, ceiling: %w", e.Name, err)
		}
		row.Met = e.ok(row.PostfixFigure, row.LearnedFigure)
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteCeilingTable prints the rows as one table.
func WriteCeilingTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	const head = "%-4s  %-22s %-28s %10s %10s  %-12s %s\n"
	fmt.Fprintf(&b, head, "mode", "experiment", "measure", "1/N", "ceiling", "target", "met")
	b.WriteString(strings.Repeat("-", 100) + "\n")
	for _, r := range rows {
		met := "yes"
		if !r.Met {
			met = "NO"
		}
		fmt.Fprintf(&b, head, r.Mode, r.Name, r.Measure,
			fmt.Sprintf(r.format, r.PostfixFigure), fmt.Sprintf(r.format, r.LearnedFigure), r.Target, met)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package lab

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// SideSummary is the medians of one side's drains.
type SideSummary struct {
	Rate       float64 // recipients/s
	CPUPerRcpt float64 // µs of the side's processes per recipient
	SchedPer   float64 // zsched's scheduler alone, µs per recipient; -1 for Postfix
	SinkPer    float64 // smtp-sink, µs per recipient (SMTP)
	Elapsed    time.Duration
}

// Summary is the medians of side's drains.
func (r *VersusReport) Summary(side string) SideSummary {
	var rate, cpu, sched, sink, el []float64
	n := r.Recipients()
	for _, d := range r.Drains {
		if d.Side != side {
			continue
		}
		rate = append(rate, d.Rate(n))
		cpu = append(cpu, perRcpt(d.CPU, n))
		sink = append(sink, perRcpt(d.Sink, n))
		el = append(el, d.Elapsed.Seconds())
		if d.Sched >= 0 {
			sched = append(sched, perRcpt(d.Sched, n))
		}
	}
	s := SideSummary{Rate: median(rate), CPUPerRcpt: median(cpu), SinkPer: median(sink), SchedPer: -1,
		Elapsed: time.Duration(median(el) * float64(time.Second))}
	if len(sched) > 0 {
		s.SchedPer = median(sched)
	}
	return s
}

// RoundRatios is zsched's rate over Postfix's in each round.
func (r *VersusReport) RoundRatios() []float64 {
	rates := map[int][2]float64{}
	for _, d := range r.Drains {
		x := rates[d.Round]
		if d.Side == "zsched" {
			x[0] = d.Rate(r.Recipients())
		} else {
			x[1] = d.Rate(r.Recipients())
		}
		rates[d.Round] = x
	}
	var out []float64
	for round := 1; round <= r.Runs; round++ {
		if x, ok := rates[round]; ok && x[0] > 0 && x[1] > 0 {
			out = append(out, x[0]/x[1])
		}
	}
	return out
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteVersus prints every drain, then the medians and the ratios.
func WriteVersus(w io.Writer, r *VersusReport) error {
	var b strings.Builder
	what := "a null agent (testagents/sink) against discard(8)"
	if r.Transport == SMTP {
		what = "smtp-ta against smtp(8), both to one smtp-sink on 127.0.0.1 (PIPELINING, connection reuse)"
		if r.Relay {
			what += ", all through it as a relay (one destination)"
		} else {
			what += ", every domain its own destination"
		}
	}
	fmt.Fprintf(&b, "zsched against Postfix %s: %s.\n", r.PostfixVersion, what)
	fmt.Fprintf(&b, "Queue: %d messages × %d recipients over %d domains (%d recipients), pre-queued on both sides.\n",
		r.Messages, r.Rcpts, r.Domains, r.Recipients())
	fmt.Fprintf(&b, "zsched: maxring %d, overfeed %d, feed %s. %d interleaved rounds. Load average before %s, after %s.\n\n",
		r.Maxring, r.Overfeed, r.feed(), r.Runs, r.LoadBefore, r.LoadAfter)
	sinkCol := r.Transport == SMTP
	fmt.Fprintf(&b, "%-7s %-8s %13s %8s %14s %16s", "round", "side", "recipients/s", "wall s", "CPU µs/rcpt", "scheduler µs/rcpt")
	if sinkCol {
		fmt.Fprintf(&b, " %14s", "sink µs/rcpt")
	}
	b.WriteByte('\n')
	n := r.Recipients()
	sched := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	for _, d := range r.Drains {
		sp := -1.0
		if d.Sched >= 0 {
			sp = perRcpt(d.Sched, n)
		}
		fmt.Fprintf(&b, "%-7d %-8s %13.0f %8.2f %14.1f %16s", d.Round, d.Side, d.Rate(n), d.Elapsed.Seconds(), perRcpt(d.CPU, n), sched(sp))
		if sinkCol {
			fmt.Fprintf(&b, " %14.1f", perRcpt(d.Sink, n))
		}
		b.WriteByte('\n')
	}
	z, p := r.Summary("zsched"), r.Summary("postfix")
	for _, x := range []struct {
		name string
		s    SideSummary
	}{{"zsched", z}, {"postfix", p}} {
		if x.s.Rate == 0 {
			continue // not run (-only)
		}
		fmt.Fprintf(&b, "%-7s %-8s %13.0f %8.2f %14.1f %16s", "median", x.name, x.s.Rate, x.s.Elapsed.Seconds(), x.s.CPUPerRcpt, sched(x.s.SchedPer))
		if sinkCol {
			fmt.Fprintf(&b, " %14.1f", x.s.SinkPer)
		}
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	ratios := r.RoundRatios()
	rs := make([]string, len(ratios))
	for i, x := range ratios {
		rs[i] = fmt.Sprintf("%.2f", x)
	}
	if p.Rate > 0 && z.Rate > 0 && z.CPUPerRcpt > 0 {
		fmt.Fprintf(&b, "zsched/Postfix: rate %.2f× (medians; per round %s, median %.2f×); Postfix uses %.2f× zsched's CPU per recipient.\n",
			z.Rate/p.Rate, strings.Join(rs, " "), median(ratios), p.CPUPerRcpt/z.CPUPerRcpt)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

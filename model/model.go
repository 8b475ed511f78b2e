// Package model owns the destination model of the policy simulator: what
// each destination of a traffic trace does with a delivery session, as
// inferred from the trace, and the answer it gives a simulated session.
//
// Per destination (channel and host) it keeps:
//
//   - service time: a distribution per session (connection set-up,
//     greeting, quit) and one per recipient, so that a session of n
//     recipients takes session + n × recipient draws;
//   - outcomes of an accepted session: the share of recipients failed
//     permanently and the share deferred on their own (a 4xx to one
//     recipient);
//   - refusals (site failures: connect, greeting, handshake, 421), as two
//     behaviours that may combine: "refuses when Limit sessions are
//     already open" (an active concurrency limiter; Limit 0 = none) and
//     "refuses a fraction P of sessions regardless" (a dead host has P = 1);
//     and how long a refusal takes;
//   - how its refusals ask to be retried (zsched's deferall agent gives
//     later recipients retryat +N).
//
// Inference (Builder): records are grouped into sessions (trace.Record.Job).
// A Postfix session's time is in the log (delays c+d, c being set-up); a
// zsched session's is not, and is estimated per agent process: a job
// starts when its agent finished the one before, or when it became due
// (its message's arrival, or the retry time the previous attempt logged),
// whichever is later, and ends when its outcomes are logged. An agent's
// first job also holds the agent's start-up, estimated apart (Startup).
// Concurrency is reconstructed from these intervals: for every session,
// the accepted sessions of its destination open when it began. Limit and P
// then maximize the likelihood of the refusals seen (see fitRefusals).
// Destinations with fewer than MinSessions sessions and fewer than
// MinRefusals refusals share one default model, built from all of them.
//
// The model is deliberately simple; a better one replaces it by giving
// the simulator (package replay) another implementation of its
// Destination interface.
package model

import (
	"fmt"
	"io"
	"math"
	"math/rand"
	"sort"
	"strings"
	"time"

	"zsched/report"
)

// Quantiles are the points a Dist keeps: every 5 %.
const Quantiles = 21

// Dist is an empirical distribution of durations, kept as its quantiles
// at 0, 5, …, 100 %.
type Dist struct {
	Q [Quantiles]time.Duration
	N int // samples it was made from
}

// NewDist returns the distribution of samples (which it sorts).
func NewDist(samples []time.Duration) Dist {
	var d Dist
	d.N = len(samples)
	if len(samples) == 0 {
		return d
	}
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	for i := range d.Q {
		d.Q[i] = quantile(samples, float64(i)/float64(Quantiles-1))
	}
	return d
}

// quantile of sorted samples, by linear interpolation.
func quantile(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	x := q * float64(len(s)-1)
	i := int(x)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	f := x - float64(i)
	return s[i] + time.Duration(f*float64(s[i+1]-s[i]))
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1).
func (d Dist) Quantile(q float64) time.Duration {
	q = min(max(q, 0), 1)
	x := q * float64(Quantiles-1)
	i := int(x)
	if i >= Quantiles-1 {
		return d.Q[Quantiles-1]
	}
	f := x - float64(i)
	return d.Q[i] + time.Duration(f*float64(d.Q[i+1]-d.Q[i]))
}

// Sample draws from d.
func (d Dist) Sample(rng *rand.Rand) time.Duration { return d.Quantile(rng.Float64()) }

// Dest is one destination's model.
type Dest struct {
	Channel, Host string
	// Shared is set on the default model, which destinations with too
	// little data of their own use.
	Shared bool

	Sessions   int // sessions observed (accepted and refused)
	Recipients int // recipients observed in them
	Refusals   int // sessions refused
	PeakOpen   int // most accepted sessions reconstructed open at once

	PerSession Dist // a session's own time, whatever its recipients
	PerRcpt    Dist // each recipient's time in a session
	RefuseTime Dist // how long a refusal takes

	Failed   float64 // share of recipients of accepted sessions failed permanently
	Deferred float64 // share deferred on their own

	Limit int     // refuses a session when Limit accepted ones are open; 0 = no limit
	P     float64 // refuses a session with probability P regardless
	// Retry, when set, is the retryat delay a refused session's recipients
	// after the first ask for (ZMailer's smtp: deferall for the first,
	// retryat +60 for the rest); zero: deferall for all.
	Retry time.Duration
}

// Attempt is a destination's answer to one session.
type Attempt struct {
	Refused bool
	Service time.Duration // until the answer
	// Retry is the delay the recipients reported retryat ask for.
	Retry time.Duration
}

// Server is what a simulator asks of a destination: its answer to a
// session. *Dest is one; another model gives the simulator its own.
type Server interface {
	Attempt(rng *rand.Rand, open int, st []report.Status) Attempt
}

// Attempt answers a session of len(st) recipients begun while open other
// accepted sessions were in progress at the destination, filling in each
// recipient's status.
func (d *Dest) Attempt(rng *rand.Rand, open int, st []report.Status) Attempt {
	refused := d.Limit > 0 && open >= d.Limit
	if !refused && d.P > 0 {
		refused = d.P >= 1 || rng.Float64() < d.P
	}
	if refused {
		for i := range st {
			st[i] = report.DeferAll
			if i > 0 && d.Retry > 0 {
				st[i] = report.RetryAt
			}
		}
		return Attempt{Refused: true, Service: d.RefuseTime.Sample(rng), Retry: d.Retry}
	}
	svc := d.PerSession.Sample(rng)
	// Recipients draw their times one by one; a very large session draws
	// a few and scales them (the mean is what matters there).
	n := len(st)
	draws := min(n, 64)
	var sum time.Duration
	for i := 0; i < draws; i++ {
		sum += d.PerRcpt.Sample(rng)
	}
	if draws > 0 {
		svc += sum / time.Duration(draws) * time.Duration(n)
	}
	for i := range st {
		switch u := rng.Float64(); {
		case u < d.Failed:
			st[i] = report.Error
		case u < d.Failed+d.Deferred:
			st[i] = report.Deferred
		default:
			st[i] = report.OK3
		}
	}
	return Attempt{Service: svc}
}

// Model is the destinations of a trace.
type Model struct {
	// Dests are the destinations with a model of their own, by volume
	// (recipients), then name.
	Dests []*Dest
	// Default is the shared model of every other destination.
	Default *Dest
	// Startup is how long a new agent takes before its first job: zsched
	// traces only (a Postfix log's service times exclude it).
	Startup time.Duration
	// Pooled counts the destinations that use Default.
	Pooled int

	byKey map[[2]string]*Dest
}

// New returns a model of the given destinations (each with its Channel
// and Host set), def for all others, and agents that take startup to
// start: a model written by hand rather than inferred (the simulator's
// tests and its synthetic traces use one as the ground truth).
func New(dests []*Dest, def *Dest, startup time.Duration) *Model {
	m := &Model{Dests: dests, Default: def, Startup: startup}
	if def != nil {
		def.Shared = true
	}
	m.index()
	return m
}

// Fixed is a distribution that always gives d.
func Fixed(d time.Duration) Dist {
	var x Dist
	for i := range x.Q {
		x.Q[i] = d
	}
	x.N = 1
	return x
}

// Lookup returns the model of a destination: its own, or the default.
func (m *Model) Lookup(channel, host string) *Dest {
	if d := m.byKey[[2]string{channel, strings.ToLower(host)}]; d != nil {
		return d
	}
	return m.Default
}

// Server returns a destination's model as the simulator uses it.
func (m *Model) Server(channel, host string) Server { return m.Lookup(channel, host) }

// AgentStartup returns how long a new agent takes before its first job.
func (m *Model) AgentStartup() time.Duration { return m.Startup }

func (m *Model) index() {
	m.byKey = make(map[[2]string]*Dest, len(m.Dests))
	for _, d := range m.Dests {
		m.byKey[[2]string{d.Channel, d.Host}] = d
	}
}

// Write prints the model as a table, one destination a line, the default
// last.
func (m *Model) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "destination model (%d own, %d sharing the default; agent start-up %s)\n",
		len(m.Dests), m.Pooled, fmtDur(m.Startup))
	const head = "%-32s %8s %8s %9s %9s %9s %9s %6s %6s %8s %5s %6s %6s %7s\n"
	fmt.Fprintf(&b, head, "destination", "sessions", "rcpts", "session", "rcpt p50", "rcpt p90", "refuse", "fail%", "defer%", "refusals", "peak", "limit", "p", "retry")
	for _, d := range append(append([]*Dest(nil), m.Dests...), m.Default) {
		if d == nil {
			continue
		}
		name := d.Channel + "/" + d.Host
		if d.Shared {
			name = "(default)"
			if m.Pooled == 0 {
				name = "(default: all of them)"
			}
		}
		limit := "-"
		if d.Limit > 0 {
			limit = fmt.Sprint(d.Limit)
		}
		retry := "-"
		if d.Retry > 0 {
			retry = "+" + fmtDur(d.Retry)
		}
		fmt.Fprintf(&b, "%-32s %8d %8d %9s %9s %9s %9s %6.1f %6.1f %8d %5d %6s %6.3f %7s\n",
			trunc(name, 32), d.Sessions, d.Recipients, fmtDur(d.PerSession.Quantile(0.5)),
			fmtDur(d.PerRcpt.Quantile(0.5)), fmtDur(d.PerRcpt.Quantile(0.9)), fmtDur(d.RefuseTime.Quantile(0.5)),
			100*d.Failed, 100*d.Deferred, d.Refusals, d.PeakOpen, limit, d.P, retry)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// fmtDur prints a duration with three significant digits at most.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.3gs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// logLik is the log-likelihood of k events of probability p among n.
func logLik(k, n int, p float64) float64 {
	var l float64
	if k > 0 {
		l += float64(k) * math.Log(p)
	}
	if n-k > 0 {
		l += float64(n-k) * math.Log(1-p)
	}
	return l
}

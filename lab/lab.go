// Package lab owns zsched's experiments: runs that measure the scheduler
// against published results and print them as tables. The first is
// SCHEDULER_README's "Impact of active server concurrency limiter"
// (Postfix 2.5 concurrency feedback against a server that allows 5 sessions
// and answers the 6th with 421), run in simulation with a fake clock (Sim)
// and end to end with the real daemon and real agent processes (Real).
// Versus puts zsched beside Postfix itself: one queue drained by both, on
// the same machine, interleaved (null agents, or SMTP to smtp-sink).
//
// Measurements follow the README: "All results ... are based on the first
// delivery runs only", so the deferred percentage counts recipients whose
// first attempt was deferred, and the client concurrency is the window
// after each feedback event of the first pass — the value Postfix's
// destination_concurrency_feedback_debug logs per delivery — averaged, with
// its standard deviation.
//
// RunSoak is of another kind: issue 16's hostile battery (router-style
// writers, misbehaving agents, hostile files, operator commands, SIGSTOP,
// descriptor pressure) against a live scheduler, counting lost, duplicated
// and stranded recipients; lab/soakagent is its transport agent.
package lab

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"zsched/config"
	"zsched/core"
)

// Limiter is one run of the active-limiter experiment.
type Limiter struct {
	// Feedback is the positive and negative feedback, as in scheduler.toml:
	// "1/concurrency", "1/sqrt_concurrency" or a number.
	Feedback    string
	Messages    int           // messages, all to one destination
	Rcpts       int           // recipients per message: one delivery each
	ClientLimit int           // maxthr
	ServerLimit int           // sessions the destination accepts at once
	Initial     int           // initial_concurrency
	Service     time.Duration // per recipient
	// Jitter is the most a simulated session may take beyond its service
	// time, drawn uniformly per session. Real sessions never end at the
	// same instant; without it the fake clock keeps the agents in
	// lockstep, successes arrive in bursts and the window overshoots
	// before any refusal can be judged (an artifact, not the algorithm).
	Jitter time.Duration
	Seed   int64

	// Beyond Postfix (issue 10). Ceiling turns learned_ceiling on; off,
	// the clause is pure Postfix 2.5. A ServerLimit of 0 is a server
	// without a limit. Noise K > 0 makes one session in K fail its
	// handshake wherever the concurrency stands (one bad server of K
	// behind one address). Changes move the server's limit during the run.
	Ceiling bool
	Noise   int
	Changes []Change
}

// Change moves the server's limit once After deliveries have been judged.
type Change struct {
	After int
	Limit int
}

// limitAt is the server's limit after n deliveries were judged.
func (l Limiter) limitAt(n int) int {
	k := l.ServerLimit
	for _, c := range l.Changes {
		if n >= c.After {
			k = c.Limit
		}
	}
	return k
}

// Styles are the README's three feedback styles, in its order.
var Styles = []string{"1/concurrency", "1/sqrt_concurrency", "1"}

// README returns the README's setting for one feedback style: client limit
// 20, server limit 5, initial concurrency 5, 1 s per recipient, 2000
// recipients as 1000 deliveries of 2 (DESIGN §6: 1000 messages of 2
// recipients at one host stand for its one message to 2000 recipients
// with a recipient limit of 2).
func README(feedback string) Limiter {
	return Limiter{Feedback: feedback, Messages: 1000, Rcpts: 2, ClientLimit: 20,
		ServerLimit: 5, Initial: 5, Service: time.Second, Jitter: 10 * time.Millisecond, Seed: 1}
}

// Theoretical is the README's defer rate 1/(1+roundup(1/feedback)), with the
// feedback taken at the server's limit: the window grows past the limit
// after roundup(1/g) successes and the next delivery is refused.
func (l Limiter) Theoretical() (float64, error) {
	f, err := config.ParseFeedback(l.Feedback)
	if err != nil {
		return 0, fmt.Errorf("lab: %w", err)
	}
	return 1 / (1 + math.Ceil(1/f.Of(float64(l.ServerLimit))-1e-9)), nil
}

// Result is what one run measured.
type Result struct {
	Limiter
	Mode        string // "sim" or "real"
	Recipients  int    // recipients attempted in the first pass
	Deferred    int    // of them, deferred at their first attempt
	Deliveries  int    // feedback events (deliveries judged) in the first pass
	Concurrency Stats  // the window after each first-pass feedback event
	Elapsed     time.Duration
	// Pending is how many recipients were left undelivered after the run
	// drained the queue (sim only; -1 when the run did not drain).
	Pending int
	// Trace is the window after each first-pass feedback event, in order.
	Trace []float64
}

// DeferredRate is the first-pass deferred fraction.
func (r Result) DeferredRate() float64 {
	if r.Recipients == 0 {
		return 0
	}
	return float64(r.Deferred) / float64(r.Recipients)
}

// Stats are the mean and population standard deviation of samples.
type Stats struct {
	N      int
	Mean   float64
	StdDev float64
	Max    float64
}

func stats(xs []float64) Stats {
	s := Stats{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	for _, x := range xs {
		s.Mean += x
		s.Max = max(s.Max, x)
	}
	s.Mean /= float64(len(xs))
	for _, x := range xs {
		s.StdDev += (x - s.Mean) * (x - s.Mean)
	}
	s.StdDev = math.Sqrt(s.StdDev / float64(len(xs)))
	return s
}

// WriteTable prints results in the README's layout, with the measured
// figures beside the theoretical defer rate.
func WriteTable(w io.Writer, rs []Result) error {
	var b strings.Builder
	const head = "%-4s %6s %6s  %-20s %7s %12s  %-15s %10s %9s  %s\n"
	fmt.Fprintf(&b, head, "mode", "client", "server", "feedback", "first-", "theoretical", "client", "deliveries", "elapsed", "Postfix 2.5 (README)")
	fmt.Fprintf(&b, head, "", "limit", "limit", "style", "pass %", "defer rate", "concurrency", "", "", "deferred %, concurrency")
	fmt.Fprintf(&b, head, "", "", "", "", "defer", "", "avg / stddev", "", "", "avg / stddev")
	b.WriteString(strings.Repeat("-", 130) + "\n")
	for _, r := range rs {
		th, err := r.Theoretical()
		if err != nil {
			return err
		}
		el := r.Elapsed.Round(10 * time.Millisecond)
		if el > time.Minute {
			el = el.Round(time.Second)
		}
		pf := "-"
		if p, ok := postfixMeasured[r.Feedback]; ok && r.ClientLimit == 20 && r.ServerLimit == 5 && r.Initial == 5 {
			pf = p
		}
		fmt.Fprintf(&b, "%-4s %6d %6d  %-20s %7.1f %5.1f (1/%.0f)  %5.2f / %-7.2f %10d %9s  %s\n",
			r.Mode, r.ClientLimit, r.ServerLimit, r.Feedback, 100*r.DeferredRate(), 100*th, 1/th,
			r.Concurrency.Mean, r.Concurrency.StdDev, r.Deliveries, el, pf)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// postfixMeasured is the README's table for the same setting (no
// connection caching): first-pass deferred %, concurrency average/stddev.
var postfixMeasured = map[string]string{
	"1/concurrency":      "16.5  5.17 / 0.38",
	"1/sqrt_concurrency": "24.5  5.28 / 0.45",
	"1":                  "49.7  5.63 / 0.67",
}

// clause is the scheduler.toml clause of the experiment's destination.
// Without slow start in either mode: the feedback experiments reproduce
// Postfix 2.5, which opens the initial window at once, and the ceiling's
// are measured against them from the same start (lab cluster measures
// slow start).
func (l Limiter) clause(argv ...string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`
[[clause]]
select = "smtp/*"
command = [%s]
interval = "1h"
retries = [1]
maxring = %d
maxthr = %d
initial_concurrency = %d
positive_feedback = %q
negative_feedback = %q
failed_cohort_limit = 1
learned_ceiling = %t
slow_start = false
order = "fifo"
`, strings.Join(q, ", "), l.ClientLimit, l.ClientLimit, l.Initial, l.Feedback, l.Feedback, l.Ceiling)
}

// host is the experiment's destination.
const host = "limited.test"

// meter gathers, from the core's observations and outcomes, the window
// after each feedback event and the first-attempt outcome of each
// recipient. It is safe for concurrent use: the daemon hands it batches on
// its own goroutine.
type meter struct {
	mu         sync.Mutex
	windows    []float64
	first      map[string]bool // inum/offset → deferred at its first attempt
	want       int             // recipients in the first pass
	deliveries int             // deliveries in the first pass
	done       chan struct{}   // closed when the first pass is over
	finished   bool
	// judged, if set, is called with the number of feedback events so
	// far after each one (m.mu is held).
	judged func(n int)
}

// newMeter returns a meter for a first pass of deliveries jobs with rcpts
// recipients in all. The pass is over when every recipient had its first
// outcome and every delivery its feedback (which follows the outcomes).
func newMeter(rcpts, deliveries int) *meter {
	return &meter{first: make(map[string]bool), want: rcpts, deliveries: deliveries, done: make(chan struct{})}
}

// observe records the feedback events among os.
func (m *meter) observe(os []core.Observation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range os {
		if m.finished {
			return
		}
		if os[i].Kind != core.ObservedFeedback {
			continue
		}
		m.windows = append(m.windows, float64(os[i].Feedback.Window))
		if m.judged != nil {
			m.judged(len(m.windows))
		}
		m.check()
	}
}

// outcomes records the first-attempt outcomes among os.
func (m *meter) outcomes(os []core.Outcome) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range os {
		if m.finished {
			return
		}
		if o.Attempts == 1 {
			m.outcome(strconv.FormatInt(o.Inum, 10)+"/"+strconv.FormatInt(o.Offset, 10), o.Status)
		}
	}
}

// batch records what a batch of the daemon's core shows.
func (m *meter) batch(r *core.Ready) {
	m.observe(r.Observations)
	m.outcomes(r.Outcomes)
}

// outcome records a first-attempt outcome; m.mu is held.
func (m *meter) outcome(rcpt, status string) {
	if _, seen := m.first[rcpt]; seen {
		return
	}
	m.first[rcpt] = status == "deferall" || status == "retryat"
	m.check()
}

// check ends the first pass when it is over; m.mu is held.
func (m *meter) check() {
	if !m.finished && len(m.first) >= m.want && len(m.windows) >= m.deliveries {
		m.finished = true
		close(m.done)
	}
}

// result fills in what the meter measured.
func (m *meter) result(r *Result) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Recipients = len(m.first)
	for _, d := range m.first {
		if d {
			r.Deferred++
		}
	}
	r.Deliveries = len(m.windows)
	r.Concurrency = stats(m.windows)
	r.Trace = append([]float64(nil), m.windows...)
}

// count is the number of feedback events so far.
func (m *meter) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.windows)
}

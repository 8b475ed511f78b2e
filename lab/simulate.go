package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/ctlfile"
	"zsched/daemon"
	"zsched/model"
	"zsched/replay"
	"zsched/trace"
)

// The policy simulator's validation (issue 21): a real run of the daemon
// with real agents is recorded, its log is simulated with the same
// configuration, and the prediction is set beside what happened; then one
// knob changes, the change is predicted from the first run's log alone,
// and a second real run says whether the prediction held.

// Hosts of the validation's destinations.
const (
	LimitedHost = "limited.test" // testagents/limited: a server with a session limit
	DeadHost    = "dead.test"    // testagents/deferall: connection refused, always
	SlowHost    = "slow.test"    // testagents/slow
)

// FastHost is the i-th of the fast destinations (testagents/sink).
func FastHost(i int) string { return "fast" + strconv.Itoa(i) + ".test" }

// Traffic is the validation's arrivals: a base of Rate messages a second
// (Poisson) for Span, each of 1 to 3 recipients at destinations drawn from
// the mix (limited 30 %, dead 5 %, slow 10 %, one of Fast sinks 55 %), and
// bursts of messages of 1 or 2 recipients all at the limited destination.
type Traffic struct {
	Span   time.Duration
	Rate   float64
	Bursts []Burst
	Fast   int
	Seed   int64
}

// Burst is Messages arrivals spread evenly over Length from At.
type Burst struct {
	At, Length time.Duration
	Messages   int
}

// Arrival is one message of a schedule: when, and a host per recipient.
type Arrival struct {
	At    time.Duration
	Hosts []string
}

// ValidationTraffic is the validation's default: three minutes, base 6
// messages a second, three bursts of 400 messages in 4 s at the limited
// destination, 500 fast destinations.
func ValidationTraffic() Traffic {
	return Traffic{Span: 3 * time.Minute, Rate: 6, Fast: 500, Seed: 1, Bursts: []Burst{
		{At: 20 * time.Second, Length: 4 * time.Second, Messages: 400},
		{At: 80 * time.Second, Length: 4 * time.Second, Messages: 400},
		{At: 140 * time.Second, Length: 4 * time.Second, Messages: 400},
	}}
}

// Schedule returns the arrivals in time order; the same Traffic gives the
// same schedule.
func (t Traffic) Schedule() []Arrival {
	rng := rand.New(rand.NewSource(t.Seed))
	var out []Arrival
	host := func() string {
		switch u := rng.Float64(); {
		case u < 0.30:
			return LimitedHost
		case u < 0.35:
			return DeadHost
		case u < 0.45:
			return SlowHost
		default:
			return FastHost(rng.Intn(max(t.Fast, 1)))
		}
	}
	if t.Rate > 0 {
		for at := 0.0; ; {
			at += rng.ExpFloat64() / t.Rate
			if at >= t.Span.Seconds() {
				break
			}
			n := 1 + rng.Intn(3)
			a := Arrival{At: time.Duration(at * float64(time.Second))}
			for i := 0; i < n; i++ {
				a.Hosts = append(a.Hosts, host())
			}
			out = append(out, a)
		}
	}
	for _, b := range t.Bursts {
		for i := 0; i < b.Messages; i++ {
			at := b.At + time.Duration(float64(b.Length)*float64(i)/float64(b.Messages))
			a := Arrival{At: at, Hosts: []string{LimitedHost}}
			if rng.Intn(2) == 0 {
				a.Hosts = append(a.Hosts, LimitedHost)
			}
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// Setup is the validation's destinations and the knob under test.
type Setup struct {
	Limit          int           // sessions the limited destination takes
	LimitedService time.Duration // per recipient there
	SlowService    time.Duration // per recipient at the slow one
	// Knob holds [defaults] lines of scheduler.toml, e.g.
	// "learned_ceiling = false"; "" runs the defaults.
	Knob string
	// Tail is how long the daemon runs after the last arrival.
	Tail time.Duration
}

// ValidationSetup is the validation's default: 5 sessions at 50 ms per
// recipient, 300 ms per recipient at the slow destination, 40 s of tail
// (the limited destination's first retries, a minute after their
// deferral, fall in it).
func ValidationSetup() Setup {
	return Setup{Limit: 5, LimitedService: 50 * time.Millisecond, SlowService: 300 * time.Millisecond, Tail: 40 * time.Second}
}

// TOML is the run's scheduler.toml: one clause per kind of destination,
// agents from agents (agentbin.Set.Agents's map).
func (s Setup) TOML(po, slots string, agents map[string]string, jsonLog bool) string {
	q := func(argv ...string) string {
		for i, a := range argv {
			argv[i] = strconv.Quote(a)
		}
		return "[" + strings.Join(argv, ", ") + "]"
	}
	format := "text"
	if jsonLog {
		format = "json"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[scheduler]\npostoffice = %q\nscaninterval = \"1s\"\nshutdown_timeout = \"5s\"\nlog_format = %q\n\n", po, format)
	fmt.Fprintf(&b, "[defaults]\ninterval = \"1m\"\n%s\n\n", s.Knob)
	fmt.Fprintf(&b, "[[clause]]\nselect = \"smtp/%s\"\ncommand = %s\n\n", LimitedHost,
		q(agents["limited"], "-c", "smtp", "-slots", slots, "-k", strconv.Itoa(s.Limit), "-d", s.LimitedService.String()))
	fmt.Fprintf(&b, "[[clause]]\nselect = \"smtp/%s\"\ncommand = %s\n\n", DeadHost, q(agents["deferall"], "-c", "smtp"))
	fmt.Fprintf(&b, "[[clause]]\nselect = \"smtp/%s\"\ncommand = %s\n\n", SlowHost, q(agents["slow"], "-c", "smtp", "-d", s.SlowService.String()))
	fmt.Fprintf(&b, "[[clause]]\nselect = \"smtp/*\"\ncommand = %s\n", q(agents["sink"], "-c", "smtp"))
	return b.String()
}

// Recording is one real run: its configuration and the scheduler's log.
type Recording struct {
	Config string // scheduler.toml
	Log    string // the daemon's log (info level): the trace
	Count  int    // messages enqueued
}

// Record runs the daemon in this process on a fresh postoffice in dir,
// with real agent processes, enqueues t's schedule in real time (each
// message announced on the notify socket), keeps running s.Tail after the
// last arrival, stops it, and returns where its configuration and log are.
func Record(ctx context.Context, dir string, t Traffic, s Setup, agents map[string]string, jsonLog bool) (Recording, error) {
	for _, a := range []string{"limited", "deferall", "slow", "sink"} {
		if agents[a] == "" {
			return Recording{}, fmt.Errorf("lab: testagents/%s was not built", a)
		}
	}
	rec := Recording{Config: filepath.Join(dir, "scheduler.toml"), Log: filepath.Join(dir, "zsched.log")}
	po := filepath.Join(dir, "po")
	if err := os.WriteFile(rec.Config, []byte(s.TOML(po, filepath.Join(dir, "slots"), agents, jsonLog)), 0o644); err != nil {
		return rec, fmt.Errorf("lab: %w", err)
	}
	cfg, err := config.Load(rec.Config)
	if err != nil {
		return rec, fmt.Errorf("lab: %w", err)
	}
	sp := &ctlfile.Spool{Root: po, NoSync: true}
	if err := sp.Init(); err != nil {
		return rec, fmt.Errorf("lab: %w", err)
	}
	defer sp.Close()
	logf, err := os.Create(rec.Log)
	if err != nil {
		return rec, fmt.Errorf("lab: %w", err)
	}
	defer logf.Close()
	log := hclog.New(&hclog.LoggerOptions{Name: "zsched", Level: hclog.Info, JSONFormat: jsonLog, Output: logf})
	d, err := daemon.New(cfg, log, daemon.Options{Seed: t.Seed})
	if err != nil {
		return rec, fmt.Errorf("lab: %w", err)
	}
	run, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()
	// Arrivals wait for the notify socket: an arrival announced before it
	// exists would wait for the scan.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(cfg.Scheduler.NotifySocket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return rec, errors.New("lab: the daemon did not open its notify socket within 10s")
		}
		select {
		case err := <-done:
			return rec, fmt.Errorf("lab: the daemon stopped at start: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	start := time.Now()
	for i, a := range t.Schedule() {
		if wait := time.Until(start.Add(a.At)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				stop()
				<-done
				return rec, fmt.Errorf("lab: %w", context.Cause(ctx))
			case err := <-done:
				return rec, fmt.Errorf("lab: the daemon stopped: %w", err)
			}
		}
		m := &ctlfile.Message{Sender: "lab@example.org", Header: []byte("Subject: simulate " + strconv.Itoa(i)), Body: []byte("validation\n")}
		for k, h := range a.Hosts {
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: h, User: "u" + strconv.Itoa(i) + "." + strconv.Itoa(k) + "@" + h})
		}
		rel, err := sp.Enqueue(m)
		if err != nil {
			stop()
			<-done
			return rec, fmt.Errorf("lab: %w", err)
		}
		// No listener only delays the arrival to the next scan.
		_ = ctlfile.NotifyScheduler(cfg.Scheduler.NotifySocket, rel)
		rec.Count++
	}
	select {
	case <-time.After(s.Tail):
	case <-ctx.Done():
	}
	stop()
	if err := <-done; err != nil {
		return rec, fmt.Errorf("lab: %w", err)
	}
	return rec, ctx.Err()
}

// Simulate loads a trace and simulates it under each configuration, up to
// the trace's end; it returns what the trace says happened first, then a
// result per configuration.
func Simulate(tracePath string, format trace.Format, year int, configs ...string) ([]replay.Result, *model.Model, error) {
	f, err := os.Open(tracePath)
	if err != nil {
		return nil, nil, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	ld, err := replay.Load(trace.NewReader(f, format, trace.Options{Year: year, Location: time.Local}), model.Options{}, 3)
	if err != nil {
		return nil, nil, fmt.Errorf("lab: %w", err)
	}
	out := []replay.Result{ld.Observed}
	for _, p := range configs {
		cfg, err := config.Load(p)
		if err != nil {
			return nil, nil, fmt.Errorf("lab: %w", err)
		}
		r, err := replay.Run(cfg, ld.Workload, ld.Model, replay.Options{Name: filepath.Base(p), Seed: 1, Check: 1000, Until: ld.Workload.End, Top: 3})
		if err != nil {
			return nil, nil, fmt.Errorf("lab: %w", err)
		}
		out = append(out, r)
	}
	return out, ld.Model, nil
}

// Tolerances of the validation: first-pass deferred % within 2 points,
// delay percentiles within 25 %.
const (
	TolDeferred = 2.0
	TolDelay    = 0.25
)

// Check is one comparison of a prediction with what really happened.
type Check struct {
	Measure     string
	Real, Pred  float64 // deferred in %, delays in seconds
	Unit        string  // "%" or "s"
	WithinLimit bool
}

// Compare sets a predicted Result beside a real one.
func Compare(real, pred replay.Result) []Check {
	return []Check{
		deferredCheck("first-pass deferred %", real.FirstDeferredPct(), pred.FirstDeferredPct()),
		delayCheck("delay p50", real.DelayP50, pred.DelayP50),
		delayCheck("delay p95", real.DelayP95, pred.DelayP95),
	}
}

func deferredCheck(name string, real, pred float64) Check {
	return Check{Measure: name, Real: real, Pred: pred, Unit: "%", WithinLimit: math.Abs(real-pred) <= TolDeferred}
}

func delayCheck(name string, real, pred time.Duration) Check {
	r, p := real.Seconds(), pred.Seconds()
	ok := r == p || r > 0 && math.Abs(p-r)/r <= TolDelay
	return Check{Measure: name, Real: r, Pred: p, Unit: "s", WithinLimit: ok}
}

func (c Check) format(v float64) string {
	if c.Unit == "%" {
		return fmt.Sprintf("%.1f %%", v)
	}
	return fmtSeconds(v)
}

func fmtSeconds(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.1f ms", v*1000)
	default:
		return fmt.Sprintf("%.2f s", v)
	}
}

// Diff is how far a prediction is from reality, in the check's terms.
func (c Check) Diff() string {
	if c.Unit == "%" {
		return fmt.Sprintf("%+.1f pt", c.Pred-c.Real)
	}
	if c.Real == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.0f %%", 100*(c.Pred-c.Real)/c.Real)
}

// WriteChecks prints checks as a table: measure, real, predicted,
// difference, within tolerance.
func WriteChecks(w io.Writer, title string, cs []Check) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", title)
	fmt.Fprintf(&b, "%-24s %12s %12s %9s  %s\n", "measure", "real", "predicted", "diff", "within tolerance")
	for _, c := range cs {
		ok := "yes"
		if !c.WithinLimit {
			ok = "NO"
		}
		fmt.Fprintf(&b, "%-24s %12s %12s %9s  %s\n", c.Measure, c.format(c.Real), c.format(c.Pred), c.Diff(), ok)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// KnobChange is the knob experiment: what the change did for real (run A to
// run B), what the simulation of run A's trace predicted it would do.
type KnobChange struct {
	Measure          string
	Unit             string
	RealA, RealB     float64
	PredA, PredB     float64
	Direction, Sized bool // the predicted change has the real one's sign; B predicted within tolerance
}

// CompareChange builds the knob experiment's rows.
func CompareChange(realA, realB, predA, predB replay.Result) []KnobChange {
	rows := []KnobChange{
		{Measure: "first-pass deferred %", Unit: "%", RealA: realA.FirstDeferredPct(), RealB: realB.FirstDeferredPct(),
			PredA: predA.FirstDeferredPct(), PredB: predB.FirstDeferredPct()},
		{Measure: "delay p50", Unit: "s", RealA: realA.DelayP50.Seconds(), RealB: realB.DelayP50.Seconds(),
			PredA: predA.DelayP50.Seconds(), PredB: predB.DelayP50.Seconds()},
		{Measure: "delay p95", Unit: "s", RealA: realA.DelayP95.Seconds(), RealB: realB.DelayP95.Seconds(),
			PredA: predA.DelayP95.Seconds(), PredB: predB.DelayP95.Seconds()},
	}
	for i := range rows {
		r := &rows[i]
		rd, pd := r.RealB-r.RealA, r.PredB-r.PredA
		if r.Unit == "%" {
			// A change within the tolerance is no direction to get wrong.
			r.Direction = math.Abs(rd) <= TolDeferred && math.Abs(pd) <= TolDeferred || rd*pd > 0
			r.Sized = math.Abs(r.PredB-r.RealB) <= TolDeferred
		} else {
			small := func(a, b float64) bool { return a == b || a > 0 && math.Abs(b-a)/a <= TolDelay }
			r.Direction = small(r.RealA, r.RealB) && small(r.PredA, r.PredB) || rd*pd > 0
			r.Sized = small(r.RealB, r.PredB)
		}
	}
	return rows
}

// WriteChange prints the knob experiment.
func WriteChange(w io.Writer, title string, rows []KnobChange) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", title)
	fmt.Fprintf(&b, "%-24s %10s %10s %10s   %10s %10s %10s   %-9s %s\n", "measure", "real A", "real B", "change", "pred A", "pred B", "change", "direction", "B within tolerance")
	for _, r := range rows {
		f := func(v float64) string {
			if r.Unit == "%" {
				return fmt.Sprintf("%.1f %%", v)
			}
			return fmtSeconds(v)
		}
		ch := func(a, b float64) string {
			if r.Unit == "%" {
				return fmt.Sprintf("%+.1f pt", b-a)
			}
			if a == 0 {
				return "-"
			}
			return fmt.Sprintf("%+.0f %%", 100*(b-a)/a)
		}
		yes := func(ok bool) string {
			if ok {
				return "yes"
			}
			return "NO"
		}
		fmt.Fprintf(&b, "%-24s %10s %10s %10s   %10s %10s %10s   %-9s %s\n", r.Measure, f(r.RealA), f(r.RealB), ch(r.RealA, r.RealB),
			f(r.PredA), f(r.PredB), ch(r.PredA, r.PredB), yes(r.Direction), yes(r.Sized))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Result is what happened to a workload: in the trace itself (Name
// "trace") or in one simulation.
type Result struct {
	Name       string
	Recipients int
	Delivered  int
	Failed     int // permanently
	Expired    int
	Pending    int // neither of those when the run (or the trace) ended
	Unrouted   int // of them, at destinations no clause of the configuration matches
	// FirstAttempts counts recipients' first attempts; FirstDeferred those
	// that did not end the recipient (deferred, refused, suspended).
	FirstAttempts int
	FirstDeferred int
	// Refusals counts sessions the destinations refused (site failures).
	Refusals int
	// Delay percentiles: arrival to delivery, delivered recipients.
	DelayP50, DelayP95, DelayP99 time.Duration
	// AgentsStarted counts agent processes; PeakAgents is the most alive
	// at once (in a trace: between their first and last outcome).
	AgentsStarted int
	PeakAgents    int
	Top           []DestResult
	// Until is where the run's clock stopped (the trace: its last record).
	Until time.Time
	// Events and Checks count a simulation's events and core checks.
	Events int64
	Checks int64
}

// DestResult is one of the destinations with the most recipients.
type DestResult struct {
	Name       string
	Recipients int
	// PeakWindow and AvgWindow: the concurrency window, after each of the
	// destination's deliveries (-1: not known, as in a trace).
	PeakWindow int
	AvgWindow  float64
	// PeakSessions is the most sessions open at once (in a trace:
	// reconstructed from its times; -1 when too few to tell).
	PeakSessions int
}

// FirstDeferredPct is the first-pass deferred percentage.
func (r Result) FirstDeferredPct() float64 {
	if r.FirstAttempts == 0 {
		return 0
	}
	return 100 * float64(r.FirstDeferred) / float64(r.FirstAttempts)
}

func (r *Result) setDelays(ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.5) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	r.DelayP50, r.DelayP95, r.DelayP99 = at(0.50), at(0.95), at(0.99)
}

// WriteTable prints results side by side, one column each.
func WriteTable(w io.Writer, rs []Result) error {
	if len(rs) == 0 {
		return nil
	}
	rows := [][]string{{""}}
	add := func(label string, f func(r Result) string) {
		row := []string{label}
		for _, r := range rs {
			row = append(row, f(r))
		}
		rows = append(rows, row)
	}
	for _, r := range rs {
		rows[0] = append(rows[0], r.Name)
	}
	add("recipients", func(r Result) string { return fmt.Sprint(r.Recipients) })
	add("delivered", func(r Result) string { return fmt.Sprint(r.Delivered) })
	add("failed", func(r Result) string { return fmt.Sprint(r.Failed) })
	add("expired", func(r Result) string { return fmt.Sprint(r.Expired) })
	add("pending at end", func(r Result) string { return fmt.Sprint(r.Pending) })
	add("  of them unrouted (no clause)", func(r Result) string { return fmt.Sprint(r.Unrouted) })
	add("first-pass deferred %", func(r Result) string { return fmt.Sprintf("%.1f", r.FirstDeferredPct()) })
	add("refusals (site failures)", func(r Result) string { return fmt.Sprint(r.Refusals) })
	add("delay p50", func(r Result) string { return fmtDelay(r.DelayP50) })
	add("delay p95", func(r Result) string { return fmtDelay(r.DelayP95) })
	add("delay p99", func(r Result) string { return fmtDelay(r.DelayP99) })
	add("agents started", func(r Result) string { return fmt.Sprint(r.AgentsStarted) })
	add("peak agents", func(r Result) string { return fmt.Sprint(r.PeakAgents) })
	n := 0
	for _, r := range rs {
		n = max(n, len(r.Top))
	}
	for i := 0; i < n; i++ {
		name := ""
		for _, r := range rs {
			if i < len(r.Top) {
				name = r.Top[i].Name
				break
			}
		}
		add(name+" window peak/avg", func(r Result) string {
			if i >= len(r.Top) || r.Top[i].PeakWindow < 0 {
				return "-"
			}
			return fmt.Sprintf("%d / %.2f", r.Top[i].PeakWindow, r.Top[i].AvgWindow)
		})
		add(name+" sessions peak", func(r Result) string {
			if i >= len(r.Top) || r.Top[i].PeakSessions < 0 {
				return "-"
			}
			return fmt.Sprint(r.Top[i].PeakSessions)
		})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, c := range row {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtDelay(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// jsonResult is Result for scripts: durations in seconds.
type jsonResult struct {
	Name             string       `json:"name"`
	Recipients       int          `json:"recipients"`
	Delivered        int          `json:"delivered"`
	Failed           int          `json:"failed"`
	Expired          int          `json:"expired"`
	Pending          int          `json:"pending"`
	Unrouted         int          `json:"unrouted"`
	FirstAttempts    int          `json:"first_attempts"`
	FirstDeferred    int          `json:"first_deferred"`
	FirstDeferredPct float64      `json:"first_deferred_pct"`
	Refusals         int          `json:"refusals"`
	DelayP50         float64      `json:"delay_p50_s"`
	DelayP95         float64      `json:"delay_p95_s"`
	DelayP99         float64      `json:"delay_p99_s"`
	AgentsStarted    int          `json:"agents_started"`
	PeakAgents       int          `json:"peak_agents"`
	Top              []DestResult `json:"top"`
	Until            time.Time    `json:"until"`
	Events           int64        `json:"events,omitempty"`
	Checks           int64        `json:"checks,omitempty"`
}

// MarshalJSON writes durations as seconds.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(jsonResult{
		Name: r.Name, Recipients: r.Recipients, Delivered: r.Delivered, Failed: r.Failed,
		Expired: r.Expired, Pending: r.Pending, Unrouted: r.Unrouted, FirstAttempts: r.FirstAttempts,
		FirstDeferred: r.FirstDeferred, FirstDeferredPct: r.FirstDeferredPct(), Refusals: r.Refusals,
		DelayP50: r.DelayP50.Seconds(), DelayP95: r.DelayP95.Seconds(), DelayP99: r.DelayP99.Seconds(),
		AgentsStarted: r.AgentsStarted, PeakAgents: r.PeakAgents, Top: r.Top, Until: r.Until,
		Events: r.Events, Checks: r.Checks,
	})
}

// MarshalJSON names DestResult's fields for scripts.
func (d DestResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name         string  `json:"name"`
		Recipients   int     `json:"recipients"`
		PeakWindow   int     `json:"peak_window"`
		AvgWindow    float64 `json:"avg_window"`
		PeakSessions int     `json:"peak_sessions"`
	}{d.Name, d.Recipients, d.PeakWindow, d.AvgWindow, d.PeakSessions})
}

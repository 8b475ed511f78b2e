package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"zsched/config"
	"zsched/model"
	"zsched/replay"
	"zsched/trace"
)

// configList is -config given once or more.
type configList []string

func (c *configList) String() string     { return strings.Join(*c, ",") }
func (c *configList) Set(s string) error { *c = append(*c, s); return nil }

// cmdSimulate replays a traffic trace through the core under each
// configuration and prints what each would have done beside what the trace
// says happened (package replay).
func cmdSimulate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configs configList
	fs.Var(&configs, "config", "configuration `file` to simulate (repeat for one column each; default $ZSCHED_CONFIG, else ./scheduler.toml)")
	tracePath := fs.String("trace", "", "the traffic trace: zsched's log or statelog, or a Postfix maillog (required; - for stdin)")
	format := fs.String("format", "auto", "the trace's format: auto, zsched or postfix")
	asJSON := fs.Bool("json", false, "print one JSON document")
	showModel := fs.Bool("model", false, "print the destination model inferred from the trace")
	check := fs.Int("check", 10000, "run the core's invariant check every `N` events (0: never)")
	until := fs.String("until", "", "stop the clock: \"end\" (the trace's last record) or a duration after the first arrival; default: until the queue is empty")
	top := fs.Int("top", 5, "destinations (most recipients first) whose windows are shown")
	seed := fs.Int64("seed", 1, "random seed of the core and the destination model")
	year := fs.Int("year", 0, "year of a maillog's syslog timestamps (default: this year)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("simulate: unexpected argument %q", fs.Arg(0))
	}
	if *tracePath == "" {
		fs.Usage()
		return usagef("simulate: -trace FILE is required")
	}
	if len(configs) == 0 {
		configs = configList{configPath("")}
	}
	f, err := trace.ParseFormat(*format)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	cfgs := make([]*config.Config, len(configs))
	for i, p := range configs {
		if cfgs[i], err = config.Load(p); err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
	}
	in := io.Reader(os.Stdin)
	if *tracePath != "-" {
		tf, err := os.Open(*tracePath)
		if err != nil {
			return fmt.Errorf("simulate: %w", err)
		}
		defer tf.Close()
		in = tf
	}
	started := time.Now()
	ld, err := replay.Load(trace.NewReader(in, f, trace.Options{Year: *year}), model.Options{}, *top)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	w := ld.Workload
	var stop time.Time
	switch *until {
	case "":
	case "end":
		stop = w.End
	default:
		d, err := config.ParseDuration(*until)
		if err != nil {
			return fmt.Errorf("simulate: -until: %w", err)
		}
		stop = w.Start.Add(time.Duration(d))
	}
	fmt.Fprintf(stderr, "simulate: %s: %s trace, %d lines, %d outcomes, %d malformed lines skipped; %d messages, %d recipients, %d destinations, %s of traffic (read in %s)\n",
		*tracePath, ld.Format, ld.Stats.Lines, ld.Stats.Records, ld.Stats.Malformed, len(w.Msgs), w.Recipients, len(w.Dests),
		w.End.Sub(w.Start).Round(time.Second), time.Since(started).Round(time.Millisecond))
	for _, ex := range ld.Stats.Examples {
		fmt.Fprintln(stderr, "simulate:   skipped:", ex)
	}
	results := []replay.Result{ld.Observed}
	for i, cfg := range cfgs {
		name := filepath.Base(configs[i])
		last := time.Now()
		began := last
		res, err := replay.Run(cfg, w, ld.Model, replay.Options{
			Name: name, Seed: *seed, Check: *check, Until: stop, Top: *top,
			Progress: func(p replay.Progress) {
				if p.Done || time.Since(last) < time.Second {
					return
				}
				last = time.Now()
				fmt.Fprintf(stderr, "simulate: %s: %d of %d messages arrived, simulated time %s, %d events\n",
					name, p.Arrived, p.Messages, p.Now.Sub(w.Start).Round(time.Second), p.Events)
			},
		})
		if err != nil {
			return fmt.Errorf("simulate: %s: %w", name, err)
		}
		fmt.Fprintf(stderr, "simulate: %s: %d events, %d core checks, simulated %s in %s\n",
			name, res.Events, res.Checks, res.Until.Sub(w.Start).Round(time.Second), time.Since(began).Round(time.Millisecond))
		results = append(results, res)
	}
	if *asJSON {
		doc := struct {
			Trace   traceJSON       `json:"trace"`
			Model   []destJSON      `json:"model,omitempty"`
			Results []replay.Result `json:"results"`
		}{Trace: traceJSON{File: *tracePath, Format: ld.Format.String(), Lines: ld.Stats.Lines,
			Outcomes: ld.Stats.Records, Malformed: ld.Stats.Malformed, Messages: len(w.Msgs),
			Recipients: w.Recipients, Destinations: len(w.Dests), Start: w.Start, End: w.End}, Results: results}
		if *showModel {
			doc.Model = modelJSON(ld.Model)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	if *showModel {
		if err := ld.Model.Write(stdout); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	return replay.WriteTable(stdout, results)
}

type traceJSON struct {
	File         string    `json:"file"`
	Format       string    `json:"format"`
	Lines        int       `json:"lines"`
	Outcomes     int       `json:"outcomes"`
	Malformed    int       `json:"malformed"`
	Messages     int       `json:"messages"`
	Recipients   int       `json:"recipients"`
	Destinations int       `json:"destinations"`
	Start        time.Time `json:"start"`
	End          time.Time `json:"end"`
}

type destJSON struct {
	Name       string  `json:"name"`
	Shared     bool    `json:"shared,omitempty"`
	Sessions   int     `json:"sessions"`
	Recipients int     `json:"recipients"`
	Refusals   int     `json:"refusals"`
	PeakOpen   int     `json:"peak_sessions"`
	SessionP50 float64 `json:"session_p50_s"`
	RcptP50    float64 `json:"rcpt_p50_s"`
	RcptP90    float64 `json:"rcpt_p90_s"`
	RefuseP50  float64 `json:"refuse_p50_s"`
	Failed     float64 `json:"failed"`
	Deferred   float64 `json:"deferred"`
	Limit      int     `json:"limit"`
	P          float64 `json:"p"`
	RetryS     float64 `json:"retry_s"`
}

func modelJSON(m *model.Model) []destJSON {
	var out []destJSON
	for _, d := range append(append([]*model.Dest(nil), m.Dests...), m.Default) {
		name := model.Name(d.Channel, d.Host)
		if d.Shared {
			name = "(default)"
		}
		out = append(out, destJSON{Name: name, Shared: d.Shared, Sessions: d.Sessions, Recipients: d.Recipients,
			Refusals: d.Refusals, PeakOpen: d.PeakOpen, SessionP50: d.PerSession.Quantile(0.5).Seconds(),
			RcptP50: d.PerRcpt.Quantile(0.5).Seconds(), RcptP90: d.PerRcpt.Quantile(0.9).Seconds(),
			RefuseP50: d.RefuseTime.Quantile(0.5).Seconds(), Failed: d.Failed, Deferred: d.Deferred,
			Limit: d.Limit, P: d.P, RetryS: d.Retry.Seconds()})
	}
	return out
}

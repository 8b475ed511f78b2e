package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"zsched/internal/agentbin"
	"zsched/lab"
	"zsched/replay"
	"zsched/trace"
)

// simulateValidate checks the policy simulator against real runs (issue
// 21): a recorded run simulated with its own configuration, a knob changed
// and predicted from that recording alone, then run for real; and a
// Postfix maillog simulated with zsched's defaults and a Postfix-like
// configuration beside what Postfix did.
func simulateValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lab simulate-validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	knob := fs.String("knob", "learned_ceiling = false", "the [defaults] line of run B (run A has the defaults)")
	span := fs.Duration("span", 3*time.Minute, "arrivals spread over this long")
	dir := fs.String("dir", "", "keep the recordings (configurations, logs, maillog) here; with files already in it, simulate those instead of running again")
	doZsched := fs.Bool("zsched", true, "the real runs of zsched (about 8 minutes)")
	doPostfix := fs.Bool("postfix", true, "the Postfix part (root and the postfix package; about 2 minutes)")
	pfMessages := fs.Int("pf-messages", 300, "Postfix part: messages of 2 recipients")
	pfService := fs.Duration("pf-service", 500*time.Millisecond, "Postfix part: the server's delay per recipient")
	scale := fs.Int("scale", 0, "instead: time the simulator on a synthetic day of this many recipients (-dests destinations; the trace is kept in -dir)")
	dests := fs.Int("dests", 10000, "destinations of the -scale day")
	check := fs.Int("check", 10000, "-scale: a core check every this many events")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("simulate-validate: unexpected argument %q", fs.Arg(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := *dir
	if root == "" {
		d, err := os.MkdirTemp("", "zsched-lab-simulate-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		root = d
	}
	// Postfix's daemons drop privileges and must reach the maillog's
	// directory.
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return err
	}
	if *scale > 0 {
		return scaleRun(root, *scale, *dests, *check, stdout, stderr)
	}
	if *doZsched {
		if err := zschedValidation(ctx, root, *span, *knob, stdout, stderr); err != nil {
			return err
		}
	}
	if *doPostfix {
		if err := postfixValidation(ctx, root, *pfMessages, *pfService, stdout, stderr); err != nil {
			return err
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func zschedValidation(ctx context.Context, root string, span time.Duration, knob string, stdout, stderr io.Writer) error {
	t := lab.ValidationTraffic()
	scale := float64(span) / float64(t.Span)
	t.Span = span
	for i := range t.Bursts {
		t.Bursts[i].At = time.Duration(float64(t.Bursts[i].At) * scale)
	}
	setupA, setupB := lab.ValidationSetup(), lab.ValidationSetup()
	setupB.Knob = knob
	dirA, dirB := filepath.Join(root, "a"), filepath.Join(root, "b")
	recA := lab.Recording{Config: filepath.Join(dirA, "scheduler.toml"), Log: filepath.Join(dirA, "zsched.log")}
	recB := lab.Recording{Config: filepath.Join(dirB, "scheduler.toml"), Log: filepath.Join(dirB, "zsched.log")}
	if !exists(recA.Log) || !exists(recB.Log) {
		var bins agentbin.Set
		defer bins.Remove()
		agents, err := bins.Agents()
		if err != nil {
			return err
		}
		for _, r := range []struct {
			dir   string
			setup lab.Setup
			json  bool
			rec   *lab.Recording
		}{{dirA, setupA, false, &recA}, {dirB, setupB, true, &recB}} {
			if exists(r.rec.Log) {
				continue
			}
			if err := os.MkdirAll(r.dir, 0o755); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "simulate-validate: real run in %s (%s of arrivals, knob %q, log format json=%t)\n", r.dir, span, r.setup.Knob, r.json)
			rec, err := lab.Record(ctx, r.dir, t, r.setup, agents, r.json)
			if err != nil {
				return err
			}
			*r.rec = rec
		}
	}
	// Run A's trace, simulated with A's configuration and with B's.
	fromA, m, err := lab.Simulate(recA.Log, trace.Zsched, 0, recA.Config, recB.Config)
	if err != nil {
		return err
	}
	onlyB, _, err := lab.Simulate(recB.Log, trace.Zsched, 0)
	if err != nil {
		return err
	}
	realA, predA, predB, realB := fromA[0], fromA[1], fromA[2], onlyB[0]
	fmt.Fprintf(stdout, "Real runs: the daemon and real agents (testagents/limited with %d sessions at %s per recipient,\n",
		lab.ValidationSetup().Limit, lab.ValidationSetup().LimitedService)
	fmt.Fprintf(stdout, "deferall for a dead destination, slow at %s, sink at %d fast destinations), %d messages over %s.\n",
		lab.ValidationSetup().SlowService, t.Fast, len(t.Schedule()), span)
	fmt.Fprintf(stdout, "Run A: defaults, text log. Run B: %q, JSON log. Predictions simulate run A's log only.\n\n", knob)
	if err := m.Write(stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	realA.Name, predA.Name, predB.Name, realB.Name = "real A", "predicted A", "predicted B", "real B"
	if err := replay.WriteTable(stdout, []replay.Result{realA, predA, predB, realB}); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := lab.WriteChecks(stdout, "Same configuration: run A's log simulated with A's configuration", lab.Compare(realA, predA)); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	return lab.WriteChange(stdout, fmt.Sprintf("One knob changed (%s): predicted from run A's log, then run for real", knob),
		lab.CompareChange(realA, realB, predA, predB))
}

func postfixValidation(ctx context.Context, root string, messages int, service time.Duration, stdout, stderr io.Writer) error {
	pf := lab.PostfixTraffic{Messages: messages, Rcpts: 2, Limit: 5, Service: service, Span: 5 * time.Second}
	maillog := filepath.Join(root, "postfix", "maillog")
	if !exists(maillog) {
		fmt.Fprintf(stderr, "simulate-validate: Postfix relaying %d messages to a Postfix smtpd that takes %d sessions\n", messages, pf.Limit)
		if err := lab.RecordPostfix(ctx, filepath.Join(root, "postfix"), pf); err != nil {
			return err
		}
	}
	cfgDir := filepath.Join(root, "postfix-configs")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	defaults, postfixLike := filepath.Join(cfgDir, "zsched-defaults.toml"), filepath.Join(cfgDir, "postfix-like.toml")
	if err := os.WriteFile(defaults, []byte(lab.PostfixSimConfig(false)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(postfixLike, []byte(lab.PostfixSimConfig(true)), 0o644); err != nil {
		return err
	}
	rs, m, err := lab.Simulate(maillog, trace.Postfix, 0, defaults, postfixLike)
	if err != nil {
		return err
	}
	rs[0].Name = "Postfix (real)"
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "Postfix %s relaying %d messages × 2 recipients, injected over %s, to a Postfix smtpd that takes %d\n",
		strings.TrimSpace(postfixVersion()), messages, pf.Span, pf.Limit)
	fmt.Fprintf(stdout, "sessions (421 above) at %s per recipient; its maillog simulated with zsched's defaults and with a\n", service)
	fmt.Fprintln(stdout, "Postfix-like configuration (1/N feedback, no learned ceiling), up to the log's end.")
	fmt.Fprintln(stdout)
	if err := m.Write(stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	return replay.WriteTable(stdout, rs)
}

func scaleRun(root string, recipients, dests, check int, stdout, stderr io.Writer) error {
	fmt.Fprintf(stderr, "simulate-validate: a synthetic day of %d recipients over %d destinations in %s\n", recipients, dests, root)
	r, err := lab.Scale(root, recipients, dests, check, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Synthetic day: %d recipients, %d destinations; trace %s (%d lines, %.0f MiB)",
		r.Recipients, r.Dests, r.TraceFile, r.TraceLines, float64(r.TraceBytes)/(1<<20))
	if r.Generate > 0 {
		fmt.Fprintf(stdout, ", written in %s", r.Generate.Round(time.Millisecond))
	}
	fmt.Fprintf(stdout, "\nread and model: %s; simulate (defaults, core check every %d events): %s, %d events, %d checks, peak heap %d MiB\n",
		r.Read.Round(time.Millisecond), check, r.Simulate.Round(time.Millisecond), r.Events, r.Checks, r.PeakHeap>>20)
	fmt.Fprintf(stdout, "in all (what scheduler simulate takes for one configuration): %s\n\n", (r.Read + r.Simulate).Round(time.Millisecond))
	return replay.WriteTable(stdout, []replay.Result{r.Result})
}

package core_test

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/report"
	"zsched/sim"
)

// TestScripts runs the scenario scripts of testdata/: the core driven
// through sim by commands that read like the README, each followed by what
// the core did (its batches of actions, times from the start) or showed.
// After a reviewed change of behaviour, `go test ./core -run TestScripts
// -rewrite` writes the new expectations; read the diff before committing.
//
// Commands (agents are a1, a2, … in the order the core starts them;
// messages 1001, 1002, …):
//
//	config [seed=N]            the clauses (TOML) below; a fresh core at +0s
//	agents manual|sink|refuse|limiter [delay=D] [sessions=N] [service=D] [verbose]
//	                           how agents answer: manual ones only when told;
//	                           the batches of others are not printed unless
//	                           verbose
//	enqueue [n=N] [notify=delay,success,failure] channel/host/user...
//	                           N messages (default 1) with these recipients
//	hungry aN                  agent N says #hungry
//	report aN STATUS... [retry=+S] [text=...]
//	                           agent N reports on the next recipients of its
//	                           oldest job, a status word each; the job ends
//	                           at its #hungry
//	line aN TEXT               agent N writes a line
//	exit aN                    agent N's process exits
//	advance D                  the clock moves on by D, timers and agents act
//	run [until=D]              until the queue is empty or D has passed
//	hold|release channel/host|MSG, flush [SEL], kill MSG, etrn NAME
//	reload                     the clauses (TOML) below replace the old ones
//	restart                    a new core from the queue and learned state
//	dump rings|agents|learned|files|counters|jobs, why MSG
//	window channel/host        watch a destination's window; again: what it
//	                           did since
//
// The core's log goes to the test log (go test -v).
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		d := &driver{}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			d.t = t
			return d.do(td)
		})
	})
}

// driver is one script's state.
type driver struct {
	t       *testing.T
	s       *sim.Sim
	cfg     *config.Config
	seed    int64
	out     strings.Builder
	printed time.Time // the time of the last batch printed
	quiet   bool      // batches are not printed (agents that answer alone)
	// windows are, per destination watched, the window after each batch
	// that held one of its outcomes.
	watch   string
	windows []int
}

// tlog writes the core's log to the test log of the directive running.
type tlog struct{ d *driver }

func (w tlog) Write(p []byte) (int, error) {
	w.d.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (d *driver) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "core", Output: tlog{d}, Level: hclog.Debug, DisableTime: true})
}

func (d *driver) do(td *datadriven.TestData) string {
	d.out.Reset()
	if d.s == nil && td.Cmd != "config" {
		td.Fatalf(d.t, "%s before config", td.Cmd)
	}
	if err := d.command(td); err != nil {
		fmt.Fprintf(&d.out, "error: %v\n", err)
	}
	if d.s != nil {
		d.settle()
		if err := d.s.Err(); err != nil {
			td.Fatalf(d.t, "the simulation broke an invariant: %v", err)
		}
	}
	return d.out.String()
}

// settle carries out what is due at the present instant: an agent told to
// end exits at once.
func (d *driver) settle() { d.s.Advance(d.s.Now.Sub(sim.Epoch)) }

func (d *driver) command(td *datadriven.TestData) error {
	args := td.CmdArgs
	pos := func(i int) string {
		if i < len(args) {
			return args[i].Key
		}
		return ""
	}
	switch td.Cmd {
	case "config":
		d.seed = 1
		td.MaybeScanArgs(d.t, "seed", &d.seed)
		c, err := parseConfig(td.Input)
		if err != nil {
			return err
		}
		d.cfg = c
		d.s = sim.NewLogged(c, nil, d.seed, d.logger())
		d.s.Manual = true
		d.s.Check = true
		d.s.OnReady = d.print
		d.printed = sim.Epoch
		d.watch, d.windows, d.quiet = "", nil, false
	case "agents":
		return d.agents(td)
	case "enqueue":
		n := 1
		td.MaybeScanArgs(d.t, "n", &n)
		var notify uint8
		if a, ok := td.Arg("notify"); ok {
			for _, v := range strings.Split(strings.Join(a.Vals, ","), ",") {
				bit, ok := map[string]uint8{"never": 1, "success": 2, "failure": 4, "delay": 8}[strings.TrimSpace(v)]
				if !ok {
					return fmt.Errorf("no NOTIFY keyword %q", v)
				}
				notify |= bit
			}
		}
		var rcpts []string
		for _, a := range args {
			if len(a.Vals) == 0 && strings.Count(a.Key, "/") == 2 {
				rcpts = append(rcpts, a.Key)
			}
		}
		for range n {
			m := &sim.Msg{}
			for k, r := range rcpts {
				f := strings.SplitN(r, "/", 3)
				m.Rcpts = append(m.Rcpts, &sim.Rcpt{Offset: int64(100 + 40*k), Channel: f[0], Host: f[1], User: f[2], Notify: notify, Status: ' '})
			}
			d.s.Add(m)
		}
	case "hungry":
		return d.s.Hungry(d.agent(pos(0)))
	case "line":
		return d.s.Line(d.agent(pos(0)), strings.TrimSpace(strings.TrimPrefix(td.FullCmd(), "line "+pos(0))))
	case "report":
		id := d.agent(pos(0))
		var words []report.Status
		for _, a := range args[1:] {
			if len(a.Vals) > 0 {
				continue
			}
			st, ok := report.ParseStatus(a.Key)
			if !ok {
				return fmt.Errorf("no status word %q", a.Key)
			}
			words = append(words, st)
		}
		r := sim.Response{}
		if a, ok := td.Arg("retry"); ok {
			r.Retry = a.Vals[0]
		}
		if a, ok := td.Arg("text"); ok {
			r.Text = strings.Join(a.Vals, " ")
		}
		r.Status = words
		return d.s.Report(id, r)
	case "exit":
		return d.s.Exit(d.agent(pos(0)))
	case "advance":
		dur, err := time.ParseDuration(pos(0))
		if err != nil {
			return err
		}
		d.s.Advance(d.s.Now.Sub(sim.Epoch) + dur)
	case "run":
		until := 24 * time.Hour
		if a, ok := td.Arg("until"); ok {
			var err error
			if until, err = time.ParseDuration(a.Vals[0]); err != nil {
				return err
			}
		}
		d.s.Run(d.s.Now.Sub(sim.Epoch) + until)
		fmt.Fprintf(&d.out, "at %s: %d messages in core, %d recipients pending\n", sim.At(d.s.Now), d.s.Core.Messages(), len(d.s.Pending()))
	case "hold", "release":
		return d.hold(td.Cmd == "hold", pos(0))
	case "flush":
		d.s.Do(func(now time.Time) {
			n, err := d.s.Core.Flush(now, pos(0))
			fmt.Fprintf(&d.out, "%d threads flushed", n)
			if err != nil {
				fmt.Fprintf(&d.out, ": %v", err)
			}
			d.out.WriteString("\n")
		})
	case "kill":
		var err error
		d.s.Do(func(now time.Time) { err = d.s.Core.Kill(now, pos(0)) })
		return err
	case "etrn":
		d.s.Do(func(now time.Time) { fmt.Fprintf(&d.out, "%d threads started\n", d.s.Core.ETRN(now, pos(0))) })
	case "reload":
		c, err := parseConfig(td.Input)
		if err != nil {
			return err
		}
		d.s.Do(func(now time.Time) { err = d.s.Core.Reconfigure(now, c) })
		if err == nil {
			d.cfg = c
		}
		return err
	case "restart":
		learned := d.s.Core.Destinations(d.s.Now)
		d.seed++
		fmt.Fprintf(&d.out, "restart with %d destinations learned\n", len(learned))
		d.s.RestartFrom(d.cfg, d.seed, learned)
	case "dump":
		d.dump(pos(0))
	case "why":
		m, err := d.s.Core.Message(d.s.Now, pos(0))
		if err != nil {
			return err
		}
		for _, v := range m.Vertices {
			fmt.Fprintf(&d.out, "%s/%s: %s\n", v.Channel, v.Host, v.Why)
		}
	case "window":
		d.window(pos(0))
	default:
		td.Fatalf(d.t, "unknown command %q", td.Cmd)
	}
	return nil
}

// parseConfig parses a script's configuration, with a postoffice that is
// never opened.
func parseConfig(doc string) (*config.Config, error) {
	const po = "postoffice = \"/nonexistent\"\n"
	if strings.Contains(doc, "[scheduler]\n") {
		doc = strings.Replace(doc, "[scheduler]\n", "[scheduler]\n"+po, 1)
	} else {
		doc = "[scheduler]\n" + po + doc
	}
	return config.Parse("script.toml", []byte(doc))
}

// agent returns the id of "aN".
func (d *driver) agent(name string) int {
	id, err := strconv.Atoi(strings.TrimPrefix(name, "a"))
	if err != nil || !strings.HasPrefix(name, "a") {
		d.t.Fatalf("not an agent: %q", name)
	}
	return id
}

// print writes a batch the core produced, under the time it came at when
// the clock moved since the last one.
func (d *driver) print(r *core.Ready) {
	d.record(r)
	if d.quiet {
		return
	}
	if !d.s.Now.Equal(d.printed) {
		d.printed = d.s.Now
		fmt.Fprintf(&d.out, "%s:\n", sim.At(d.s.Now))
	}
	d.out.WriteString(sim.Format(r))
}

// record notes the window of the destination watched after a batch that
// held one of its outcomes.
func (d *driver) record(r *core.Ready) {
	if d.watch == "" {
		return
	}
	ch, host, _ := strings.Cut(d.watch, "/")
	for _, o := range r.Outcomes {
		if o.Channel == ch && o.Host == host && o.Agent != 0 {
			if tv, ok := d.s.Core.Thread(d.s.Now, ch, host); ok {
				d.windows = append(d.windows, tv.Window)
			}
			return
		}
	}
}

func (d *driver) agents(td *datadriven.TestData) error {
	kind := td.CmdArgs[0].Key
	delay := time.Duration(0)
	if a, ok := td.Arg("delay"); ok {
		var err error
		if delay, err = time.ParseDuration(a.Vals[0]); err != nil {
			return err
		}
	}
	d.s.Manual = kind == "manual"
	// Agents that answer alone make too many batches to read: the
	// script prints what it asks for (run, window, dump).
	d.quiet = !d.s.Manual && !td.HasArg("verbose")
	switch kind {
	case "manual":
	case "sink":
		d.s.Behavior = func(j sim.Job) sim.Response {
			r := sim.Sink(j)
			r.Delay = delay
			return r
		}
	case "refuse":
		d.s.Behavior = refuse
	case "limiter":
		// A server that takes `sessions` sessions at once and refuses the
		// next at the greeting (Postfix's experiment), `service` a
		// recipient.
		sessions, service := 5, time.Second
		td.MaybeScanArgs(d.t, "sessions", &sessions)
		if a, ok := td.Arg("service"); ok {
			var err error
			if service, err = time.ParseDuration(a.Vals[0]); err != nil {
				return err
			}
		}
		var ends []time.Time
		d.s.Behavior = func(j sim.Job) sim.Response {
			open := ends[:0]
			for _, e := range ends {
				if e.After(d.s.Now) {
					open = append(open, e)
				}
			}
			ends = open
			st := make([]report.Status, len(j.Rcpts))
			if len(ends) >= sessions {
				for i := range st {
					st[i] = report.DeferAll
				}
				return sim.Response{Status: st, Text: "421 too many sessions"}
			}
			r := sim.Sink(j)
			r.Delay = service * time.Duration(len(j.Rcpts))
			ends = append(ends, d.s.Now.Add(r.Delay))
			return r
		}
	default:
		return fmt.Errorf("no agents %q", kind)
	}
	return nil
}

func (d *driver) hold(hold bool, target string) error {
	var err error
	d.s.Do(func(now time.Time) {
		if ch, host, ok := strings.Cut(target, "/"); ok {
			if hold {
				d.s.Core.HoldThread(now, ch, host)
			} else {
				d.s.Core.ReleaseThread(now, ch, host)
			}
			return
		}
		if hold {
			err = d.s.Core.HoldMessage(now, target)
		} else {
			err = d.s.Core.ReleaseMessage(now, target)
		}
	})
	return err
}

// window starts watching a destination's window, or, when it is watched,
// prints what was seen since and the first attempts' outcomes.
func (d *driver) window(dest string) {
	if d.watch != dest {
		d.watch, d.windows = dest, nil
		fmt.Fprintf(&d.out, "watching %s\n", dest)
		return
	}
	ch, host, _ := strings.Cut(dest, "/")
	first, deferred := 0, 0
	for _, o := range d.s.Outcomes {
		if o.Channel == ch && o.Host == host && o.Attempts == 1 && o.Agent != 0 {
			first++
			if !o.Final() {
				deferred++
			}
		}
	}
	fmt.Fprintf(&d.out, "first attempts %d, deferred %d (%.1f%%)\n", first, deferred, 100*float64(deferred)/float64(max(first, 1)))
	if len(d.windows) > 0 {
		sum, sq := 0.0, 0.0
		for _, w := range d.windows {
			sum += float64(w)
		}
		mean := sum / float64(len(d.windows))
		for _, w := range d.windows {
			sq += (float64(w) - mean) * (float64(w) - mean)
		}
		fmt.Fprintf(&d.out, "window after %d batches: %d..%d, mean %.2f ± %.2f\n", len(d.windows),
			slices.Min(d.windows), slices.Max(d.windows), mean, math.Sqrt(sq/float64(len(d.windows))))
	}
	if tv, ok := d.s.Core.Thread(d.s.Now, ch, host); ok {
		fmt.Fprintf(&d.out, "now: window %d", tv.Window)
		if tv.Ceiling > 0 {
			fmt.Fprintf(&d.out, ", learned ceiling %d", tv.Ceiling)
			if !tv.Confirmed {
				d.out.WriteString("?")
			}
		}
		d.out.WriteString("\n")
	}
}

func (d *driver) dump(what string) {
	now := d.s.Now
	w := &d.out
	switch what {
	case "rings":
		for _, r := range d.s.Core.Rings(now) {
			name := r.Channel
			if r.HostBound {
				name += "/" + r.Host
			}
			fmt.Fprintf(w, "ring %s clause=%d agents=%d idle=%d msgs=%d\n", name, r.Clause, r.Agents, r.Idle, r.Msgs)
			for _, t := range r.Threads {
				writeThread(w, t, now)
			}
		}
	case "agents":
		for _, a := range d.s.Core.AgentViews() {
			fmt.Fprintf(w, "a%d %s/%s %s jobs=%d\n", a.ID, a.Channel, a.Host, a.State, a.Jobs)
		}
	case "learned":
		for _, l := range d.s.Core.Destinations(now) {
			fmt.Fprintf(w, "%s/%s window=%d ceiling=%d strikes=%d", l.Channel, l.Host, l.Window.Concurrency, l.Window.Ceiling, l.Window.Strikes)
			if !l.DeadUntil.IsZero() {
				fmt.Fprintf(w, " dead until %s", sim.At(l.DeadUntil))
			}
			w.WriteString("\n")
		}
	case "files":
		inums := make([]int64, 0, len(d.s.Msgs))
		for inum := range d.s.Msgs {
			inums = append(inums, inum)
		}
		slices.Sort(inums)
		for _, inum := range inums {
			m := d.s.Msgs[inum]
			fmt.Fprintf(w, "%s:", m.Path)
			for _, r := range m.Rcpts {
				fmt.Fprintf(w, " %c%s/%s/%s", r.Status, r.Channel, r.Host, r.User)
			}
			if d.s.Completed[inum] {
				w.WriteString(" (completed)")
			}
			w.WriteString("\n")
			for _, dg := range m.Diags {
				fmt.Fprintf(w, "  d @%d %s %s: %s\n", dg.Offset, dg.Notary.Action, dg.Notary.Status, dg.Text)
			}
		}
	case "counters":
		fmt.Fprintf(w, "%+v\n", d.s.Core.Counters())
	case "jobs":
		// The messages of the job lines written so far, in order,
		// numbered from 1 (message 1001): the README's delivery
		// sequences.
		for _, j := range d.s.JobLog {
			n, _ := strconv.ParseInt(j.Path, 10, 64)
			fmt.Fprint(w, n-1000)
		}
		w.WriteString("\n")
	default:
		d.t.Fatalf("dump what? %q", what)
	}
}

func writeThread(w io.Writer, t core.ThreadView, now time.Time) {
	fmt.Fprintf(w, "  %s/%s %s window=%d/%d vertices=%d rcpts=%d", t.Channel, t.Host, t.State, t.Window, t.MaxThr, t.Vertices, t.Recipients)
	if len(t.Agents) > 0 {
		var as []string
		for _, id := range t.Agents {
			as = append(as, "a"+strconv.Itoa(id))
		}
		fmt.Fprintf(w, " agents=%s", strings.Join(as, ","))
	}
	if t.Busy != len(t.Agents) {
		// Sessions borrowed by other threads' agents (feed = "message").
		fmt.Fprintf(w, " busy=%d", t.Busy)
	}
	if t.Ceiling > 0 {
		fmt.Fprintf(w, " ceiling=%d", t.Ceiling)
		if !t.Confirmed {
			fmt.Fprint(w, "?")
		}
	}
	if t.State == core.ThreadBlocked {
		fmt.Fprintf(w, " pend=%s", t.Pend)
	}
	if !t.Backoff.IsZero() {
		fmt.Fprintf(w, " until=%s", sim.At(t.Backoff))
	}
	if !t.Wake.IsZero() {
		fmt.Fprintf(w, " wake=%s", sim.At(t.Wake))
	}
	fmt.Fprintln(w)
}

package core_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/report"
	"zsched/sim"
)

// The configuration of the replay: rings per host (local), a queueonly
// channel (etrn), the random order (bulk, which draws on the core's rand),
// preemption (smtp), a small maxta so that rings block and idle agents are
// reclaimed, short expiry so that held mail expires, delay warnings.
const replayBase = `
[scheduler]
postoffice = "/nonexistent"
maxta = 9
forkrate = 1000
delay_warning_time = "20m"

[defaults]
interval = "1m"
retries = [1, 2, 3]
expiry = "2h"
expiry2 = "30m"
jobtimeout = "3m"
idlemax = "4m"
initial_concurrency = 2

[[clause]]
select = "local/*"
command = "sink -c local $host"
maxring = 3
maxthr = 2

[[clause]]
select = "etrn/*"
command = "sink -c etrn"
queueonly = true

[[clause]]
select = "bulk/*"
command = "sink -c bulk"
order = "random"
maxring = 3

[[clause]]
select = "spare1/*"
command = "sink -c spare1"

[[clause]]
select = "spare2/*"
command = "sink -c spare2"

[[clause]]
select = "smtp/*"
command = "sink -c smtp"
maxring = 4
maxthr = 4
overfeed = 1
delivery_slot_cost = 2
minimum_delivery_slots = 1
`

// replayReload lowers maxring (idle agents of several rings are ended at
// once), changes bulk's command (its agents are retired) and smtp's
// window ceiling (windows are clamped).
var replayReload = strings.NewReplacer(
	"select = \"spare", "select = \"gone", // clauses removed and added
	"maxring = 3", "maxring = 1",
	"maxring = 4", "maxring = 1",
	`command = "sink -c bulk"`, `command = "sink -c bulk -v"`,
	"maxthr = 4", "maxthr = 2",
).Replace(replayBase)

// TestReplayIsByteIdentical runs one long random script of events twice
// with the same seed — arrivals, reports of every status word, agents that
// crash or hang past jobtimeout, idle reaping, reloads, holds, flushes,
// kills, ETRN, restarts of the core from its learned state — and requires
// the two streams of Ready batches (with the core's log and its views) to
// be byte-identical: the core decides nothing by map order (issue 19).
func TestReplayIsByteIdentical(t *testing.T) {
	const seed = 19
	first := replay(t, seed)
	second := replay(t, seed)
	if !bytes.Equal(first, second) {
		a, b := strings.Split(string(first), "\n"), strings.Split(string(second), "\n")
		for i := 0; i < len(a) && i < len(b); i++ {
			if a[i] != b[i] {
				lo := max(0, i-8)
				t.Fatalf("the replay differs at line %d of %d:\n%s\n--- first run: %s\n--- second run: %s",
					i+1, len(a), strings.Join(a[lo:i], "\n"), a[i], b[i])
			}
		}
		t.Fatalf("the replay differs in length: %d and %d lines", len(a), len(b))
	}
	// The script must reach the walks the test guards, several at a time.
	for _, want := range []struct {
		what string
		min  int
	}{
		{"kill a", 10},                      // hung agents past jobtimeout, crashing ones
		{": idlemax\n", 10},                 // idle reaping
		{"reclaimed for a blocked ring", 3}, // maxta
		{"reload: ring over maxring", 3},    // the reload's maxring walk
		{" expired attempts=", 20},          // expiry, held mail included
		{"\ndsn ", 5},                       // delay warnings
		{" killed\n", 3},                    // kill
		{"\nreread ", 10},                   // crashes
		{"== restart", 3},                   // restarts from learned state
		{" retryat attempts=", 5},           // every status word
		{" deferback attempts=", 5},         //
		{" error2 attempts=", 5},            //
		{" ok2 attempts=", 5},               //
		{"etrn/", 5},                        // ETRN
		{"reload: clause changed", 3},       // reloads
		{"\ndead smtp/", 3},                 // feedback
		{"\nfeedback ", 100},                //
		{"\nthrottle a", 3},                 // transport failures
	} {
		if n := bytes.Count(first, []byte(want.what)); n < want.min {
			t.Errorf("the script reached %q %d times, want at least %d", want.what, n, want.min)
		}
	}
	t.Logf("%d bytes, %d lines of actions, logs and views", len(first), bytes.Count(first, []byte("\n")))
}

// replay runs the script of seed and returns everything it observed.
func replay(t *testing.T, seed int64) []byte {
	t.Helper()
	base, reloaded := replayConfig(t, replayBase), replayConfig(t, replayReload)
	var out bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Debug, DisableTime: true})
	rng := rand.New(rand.NewSource(seed))
	s := sim.NewLogged(base, func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = 10 * time.Second
		return r
	}, seed, log)
	s.Check = true
	s.OnReady = func(r *core.Ready) {
		fmt.Fprintf(&out, "== %s\n%s", sim.At(s.Now), sim.Format(r))
	}
	cfg, restarts := base, int64(0)
	hosts := map[string][]string{
		"smtp":  {"a.test", "b.test", "c.test", "d.test", "e.test"},
		"local": {"l1", "l2", "l3"},
		"etrn":  {"x.client.test", "y.client.test"},
		"bulk":  {"m1.test", "m2.test"},
	}
	channels := []string{"smtp", "smtp", "smtp", "local", "local", "etrn", "bulk"}
	pick := func(xs []string) string { return xs[rng.Intn(len(xs))] }
	queued := func() []string { // messages in core, oldest first
		var inums []int64
		for inum := range s.Msgs {
			if !s.Completed[inum] {
				inums = append(inums, inum)
			}
		}
		slices.Sort(inums)
		ids := make([]string, len(inums))
		for i, inum := range inums {
			ids[i] = s.Msgs[inum].Path
		}
		return ids
	}
	op := func(name string, f func(now time.Time)) {
		fmt.Fprintf(&out, "== %s %s\n", sim.At(s.Now), name)
		s.Do(f)
	}
	// A prelude that gives four rings two idle agents each, then lowers
	// maxring: each reload ends agents of four rings at once. (Go walks
	// a small map from a random one of its eight slots, so one such
	// reload tells a map-ordered walk from an ordered one only about
	// half the time: the prelude makes six.)
	reload := func(next *config.Config) {
		op("reload", func(now time.Time) {
			if err := s.Core.Reconfigure(now, next); err != nil {
				t.Fatalf("reload: %v", err)
			}
		})
		cfg = next
	}
	for cycle := range 6 {
		for i := range 2 {
			var rcpts []string
			for _, h := range hosts["local"] {
				rcpts = append(rcpts, "local/"+h+"/p"+strconv.Itoa(cycle)+"."+strconv.Itoa(i))
			}
			s.Enqueue(append(rcpts, "smtp/a.test/p"+strconv.Itoa(cycle)+"."+strconv.Itoa(i))...)
		}
		s.Advance(s.Now.Sub(sim.Epoch) + 30*time.Second)
		reload(reloaded)
		s.Advance(s.Now.Sub(sim.Epoch) + 5*time.Minute)
		reload(base)
	}
	// Nine agents in five rings go idle at one instant, maxta is
	// reached, and rings with no agent want one: each takes the slot of
	// an idle agent of another ring, all idle as long (reclaim).
	for round := range 3 {
		tag := "r" + strconv.Itoa(round)
		var rcpts []string
		for _, h := range hosts["local"] {
			rcpts = append(rcpts, "local/"+h+"/"+tag)
		}
		for _, h := range hosts["smtp"][:4] {
			rcpts = append(rcpts, "smtp/"+h+"/"+tag)
		}
		s.Enqueue(append(rcpts, "bulk/m1.test/"+tag, "bulk/m2.test/"+tag)...)
		s.Advance(s.Now.Sub(sim.Epoch) + 20*time.Second)
		s.Enqueue("spare1/s.test/"+tag, "spare2/s.test/"+tag)
		s.Advance(s.Now.Sub(sim.Epoch) + 5*time.Minute)
	}
	// A dozen messages held together expire together (sweepHeld), past
	// expiry and expiry2.
	var held []string
	for i := range 12 {
		m := s.Enqueue("etrn/x.client.test/h" + strconv.Itoa(i))
		held = append(held, m.Path)
	}
	for _, id := range held {
		op("hold "+id, func(now time.Time) { s.Core.HoldMessage(now, id) })
	}
	s.Advance(s.Now.Sub(sim.Epoch) + 3*time.Hour)
	s.Behavior = replayAgent(rng)
	for step := 0; step < 1000 && s.Err() == nil; step++ {
		switch x := rng.Intn(100); {
		case x < 40: // a burst of arrivals at one instant
			for range 1 + rng.Intn(4) {
				m := &sim.Msg{}
				for k := range 1 + rng.Intn(4) {
					ch := pick(channels)
					m.Rcpts = append(m.Rcpts, &sim.Rcpt{Offset: int64(100 + 40*k), Channel: ch, Host: pick(hosts[ch]),
						User: "u" + strconv.Itoa(step) + "." + strconv.Itoa(k), Notify: uint8(rng.Intn(16)), Status: ' '})
				}
				s.Add(m)
			}
		case x < 70:
			s.Advance(s.Now.Sub(sim.Epoch) + time.Duration(1+rng.Intn(300))*time.Second)
		case x < 74:
			ch := pick([]string{"smtp", "local"})
			h := pick(hosts[ch])
			op("hold "+ch+"/"+h, func(now time.Time) { s.Core.HoldThread(now, ch, h) })
		case x < 78:
			ch := pick([]string{"smtp", "local"})
			h := pick(hosts[ch])
			op("release "+ch+"/"+h, func(now time.Time) { s.Core.ReleaseThread(now, ch, h) })
		case x < 84: // a few messages queued together
			if ids := queued(); len(ids) > 0 {
				i := rng.Intn(len(ids))
				for _, id := range ids[i:min(len(ids), i+1+rng.Intn(4))] {
					op("hold "+id, func(now time.Time) { s.Core.HoldMessage(now, id) })
				}
			}
		case x < 86:
			if ids := queued(); len(ids) > 0 {
				id := pick(ids)
				op("release "+id, func(now time.Time) { s.Core.ReleaseMessage(now, id) })
			}
		case x < 88:
			sel := pick([]string{"", "smtp", "local/*", "smtp/[ab].test"})
			op("flush "+sel, func(now time.Time) { s.Core.Flush(now, sel) })
		case x < 90:
			if ids := queued(); len(ids) > 0 {
				id := pick(ids)
				op("kill "+id, func(now time.Time) { s.Core.Kill(now, id) })
			}
		case x < 93:
			name := pick([]string{"x.client.test", "@client.test", "y.client.test"})
			op("etrn "+name, func(now time.Time) { s.Core.ETRN(now, name) })
		case x < 98:
			if cfg == reloaded {
				reload(base)
			} else {
				reload(reloaded)
			}
		default:
			learned := s.Core.Destinations(s.Now)
			restarts++
			fmt.Fprintf(&out, "== restart %s, %d destinations learned\n", sim.At(s.Now), len(learned))
			s.RestartFrom(cfg, seed+restarts, learned)
		}
		if step%25 == 0 {
			views(&out, s)
		}
	}
	if err := s.Err(); err != nil {
		lines := strings.Split(out.String(), "\n")
		t.Fatalf("%v\n%s", err, strings.Join(lines[max(0, len(lines)-150):], "\n"))
	}
	s.Advance(s.Now.Sub(sim.Epoch) + 6*time.Hour)
	views(&out, s)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// views writes what the operator sees: they must be as replayable as the
// actions.
func views(out *bytes.Buffer, s *sim.Sim) {
	now := s.Now
	fmt.Fprintf(out, "== views %s\n", sim.At(now))
	for _, r := range s.Core.Rings(now) {
		fmt.Fprintf(out, "ring %+v\n", r)
	}
	for _, a := range s.Core.AgentViews() {
		fmt.Fprintf(out, "agent %+v\n", a)
	}
	fmt.Fprintf(out, "gauges %+v\n", s.Core.Gauges(now, 3))
	fmt.Fprintf(out, "shape %+v\n", s.Core.Shape(now, []time.Duration{time.Minute, time.Hour}, 4))
	fmt.Fprintf(out, "learned %+v\n", s.Core.Destinations(now))
	fmt.Fprintf(out, "counters %+v\n", s.Core.Counters())
}

// replayAgent answers jobs at random, drawing on rng: every status word,
// partial reports, notaries, service times that often coincide, crashes
// and hangs.
func replayAgent(rng *rand.Rand) sim.Behavior {
	words := []report.Status{report.OK, report.OK2, report.OK3, report.Error, report.Error2,
		report.Deferred, report.Deferback, report.RetryAt, report.DeferAll}
	return func(j sim.Job) sim.Response {
		var r sim.Response
		switch x := rng.Intn(100); {
		case x < 55:
			r = sim.Sink(j)
		case x < 60:
			r.Hang = true
		case x < 65:
			r = sim.Sink(j)
			r.Status = r.Status[:rng.Intn(len(r.Status)+1)]
			r.Crash = true
		default:
			for range j.Rcpts {
				r.Status = append(r.Status, words[rng.Intn(len(words))])
			}
			if rng.Intn(4) == 0 {
				r.Status = r.Status[:len(r.Status)-1] // one left unreported
			}
			if rng.Intn(2) == 0 {
				r.Retry = "+" + strconv.Itoa(30+rng.Intn(600))
			}
			r.Text = "said " + strconv.Itoa(rng.Intn(5))
			if rng.Intn(3) == 0 {
				r.Notary = report.Notary{Action: "failed", Status: "5.1.1", Diagnostic: "smtp; 550 no"}
			}
		}
		r.Delay = time.Duration(rng.Intn(4)) * 15 * time.Second
		return r
	}
}

func replayConfig(t *testing.T, doc string) *config.Config {
	t.Helper()
	c, err := config.Parse("replay.toml", []byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"zsched/config"
	"zsched/internal/need"
	"zsched/postfix"
)

// The lab's comparisons end to end on a tiny queue: each side drains it
// completely (Versus checks every recipient's delivery on both sides, from
// the scheduler's summary and from Postfix's maillog), and the table has
// both sides and the ratio. The full-size runs are "go run ./cmd/lab
// smtp-vs-postfix" and "null-vs-postfix".
func TestVersusSmoke(t *testing.T) {
	need.Met(t, "the postfix package, as root", postfix.Available())
	need.Met(t, "smtp-sink (the postfix package)", postfix.SinkAvailable())
	scheduler, smtpTA := bins.ProgramFor(t, "zsched/cmd/scheduler"), bins.ProgramFor(t, "zsched/cmd/smtp-ta")
	sink := bins.AgentsFor(t)["sink"]
	for _, tc := range []struct {
		name  string
		tr    Transport
		relay bool
		agent string
	}{
		{"null", Null, false, sink},
		{"smtp", SMTP, false, smtpTA},
		{"smtp relay", SMTP, true, smtpTA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := Versus{BenchQueue: BenchQueue{Messages: 24, Rcpts: 2, Domains: 6}, Transport: tc.tr, Relay: tc.relay, Runs: 1,
				Scheduler: scheduler, Agent: tc.agent, Maxring: 2, Overfeed: 4, Procs: 1, Timeout: time.Minute}
			var progress bytes.Buffer
			v.Progress = &progress
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := v.Run(ctx)
			t.Logf("progress:\n%s", progress.String())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Drains) != 2 || rep.Drains[0].Side != "zsched" || rep.Drains[1].Side != "postfix" {
				t.Fatalf("drains %+v, want zsched's then Postfix's", rep.Drains)
			}
			for _, d := range rep.Drains {
				if d.Elapsed <= 0 || d.CPU <= 0 {
					t.Errorf("%s: elapsed %v, CPU %v", d.Side, d.Elapsed, d.CPU)
				}
			}
			var b bytes.Buffer
			if err := WriteVersus(&b, rep); err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", b.String())
			for _, want := range []string{"median  zsched", "median  postfix", "zsched/Postfix: rate"} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("table lacks %q", want)
				}
			}
		})
	}
}

// The table's medians and ratios, from drains made up for it.
func TestWriteVersus(t *testing.T) {
	rep := &VersusReport{
		Versus:     Versus{BenchQueue: BenchQueue{Messages: 100, Rcpts: 10, Domains: 10}, Transport: SMTP, Runs: 3, Maxring: 4, Overfeed: 32},
		LoadBefore: "1.00 1.00 1.00", LoadAfter: "2.00 2.00 2.00", PostfixVersion: "3.7.11",
	}
	// 1000 recipients: zsched at 1000, 2000, 500 per second with 1000,
	// 2000, 3000 µs of CPU in all; Postfix at 250, 400, 100.
	for i, z := range []float64{1, 0.5, 2} {
		p := []float64{4, 2.5, 10}[i]
		rep.Drains = append(rep.Drains,
			DrainRun{Side: "zsched", Round: i + 1, Elapsed: time.Duration(z * float64(time.Second)),
				CPU: time.Duration(i+1) * time.Millisecond, Sched: time.Millisecond / 2},
			DrainRun{Side: "postfix", Round: i + 1, Elapsed: time.Duration(p * float64(time.Second)),
				CPU: 10 * time.Millisecond, Sched: -1})
	}
	z, p := rep.Summary("zsched"), rep.Summary("postfix")
	if z.Rate != 1000 || p.Rate != 250 || z.CPUPerRcpt != 2 || p.CPUPerRcpt != 10 || z.SchedPer != 0.5 || p.SchedPer != -1 {
		t.Errorf("medians: zsched %+v, postfix %+v", z, p)
	}
	if r := rep.RoundRatios(); len(r) != 3 || r[0] != 4 || r[1] != 5 || r[2] != 5 {
		t.Errorf("round ratios %v, want 4 5 5", r)
	}
	var b bytes.Buffer
	if err := WriteVersus(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Load average before 1.00 1.00 1.00, after 2.00 2.00 2.00",
		"rate 4.00× (medians; per round 4.00 5.00 5.00, median 5.00×); Postfix uses 5.00× zsched's CPU per recipient",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// zsched's side runs the clause the flags ask for: its configuration is
// one the scheduler accepts, with the feed given (the default when none is).
func TestVersusConfigFeed(t *testing.T) {
	for _, tc := range []struct{ feed, want string }{{"", config.FeedThread}, {config.FeedMessage, config.FeedMessage}} {
		v := Versus{Transport: Null, Agent: "/bin/true", Maxring: 4, Overfeed: 32, Feed: tc.feed}
		c, err := config.Parse("versus.toml", []byte(v.zschedConfig(t.TempDir(), "")))
		if err != nil {
			t.Fatalf("feed %q: %v", tc.feed, err)
		}
		if len(c.Clauses) != 1 || c.Clauses[0].Feed != tc.want {
			t.Errorf("feed %q: clauses %+v, want one with feed %q", tc.feed, c.Clauses, tc.want)
		}
	}
}

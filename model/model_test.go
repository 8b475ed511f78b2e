package model

import (
	"math"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"zsched/report"
	"zsched/trace"
)

// sessions draws n sessions whose reconstructed concurrency is uniform on
// 0..top and refuses them by rule.
func sessions(n, top int, seed int64, refuse func(rng *rand.Rand, open int) bool) ([]int32, []bool) {
	rng := rand.New(rand.NewSource(seed))
	open := make([]int32, n)
	ref := make([]bool, n)
	for i := range open {
		o := rng.Intn(top + 1)
		open[i], ref[i] = int32(o), refuse(rng, o)
	}
	return open, ref
}

func TestFitRefusals(t *testing.T) {
	for _, c := range []struct {
		name      string
		top       int
		refuse    func(rng *rand.Rand, open int) bool
		limit     int
		p, pSlack float64
	}{
		{"limiter of 5", 7, func(_ *rand.Rand, o int) bool { return o >= 5 }, 5, 0, 0},
		{"limiter of 3, reconstruction off by one either way 10 % of the time", 6, func(rng *rand.Rand, o int) bool {
			if rng.Intn(10) == 0 {
				o += 2*rng.Intn(2) - 1
			}
			return o >= 3
		}, 3, 0, 0},
		{"limiter of 4 that also refuses 10 % regardless", 7, func(rng *rand.Rand, o int) bool { return o >= 4 || rng.Float64() < 0.1 }, 4, 0.1, 0.03},
		{"20 % regardless", 7, func(rng *rand.Rand, _ int) bool { return rng.Float64() < 0.2 }, 0, 0.2, 0.03},
		{"dead", 0, func(*rand.Rand, int) bool { return true }, 0, 1, 0},
		{"never", 7, func(*rand.Rand, int) bool { return false }, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			open, ref := sessions(3000, c.top, 1, c.refuse)
			limit, p := fitRefusals(open, ref)
			if limit != c.limit || math.Abs(p-c.p) > c.pSlack {
				t.Errorf("limit %d p %.3f, want %d and %.3f ± %.3f", limit, p, c.limit, c.p, c.pSlack)
			}
		})
	}
}

func TestDist(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	d := NewDist(s)
	if d.N != 100 || d.Quantile(0) != time.Millisecond || d.Quantile(1) != 100*time.Millisecond ||
		d.Quantile(0.5) != 50500*time.Microsecond {
		t.Errorf("dist %+v median %v", d, d.Quantile(0.5))
	}
	rng := rand.New(rand.NewSource(1))
	var sum time.Duration
	for i := 0; i < 10000; i++ {
		x := d.Sample(rng)
		if x < time.Millisecond || x > 100*time.Millisecond {
			t.Fatalf("sample %v out of range", x)
		}
		sum += x
	}
	if mean := sum / 10000; mean < 48*time.Millisecond || mean > 53*time.Millisecond {
		t.Errorf("mean of samples %v", mean)
	}
	if f := Fixed(3 * time.Second); f.Sample(rng) != 3*time.Second {
		t.Error("fixed")
	}
}

func TestAttempt(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	d := &Dest{Limit: 2, Retry: time.Minute, PerSession: Fixed(100 * time.Millisecond), PerRcpt: Fixed(time.Second),
		RefuseTime: Fixed(time.Millisecond), Failed: 0.25, Deferred: 0.25}
	st := make([]report.Status, 3)
	if a := d.Attempt(rng, 2, st); !a.Refused || a.Retry != time.Minute || a.Service != time.Millisecond ||
		st[0] != report.DeferAll || st[1] != report.RetryAt || st[2] != report.RetryAt {
		t.Errorf("at the limit: %+v %v", a, st)
	}
	count := map[report.Status]int{}
	for i := 0; i < 1000; i++ {
		a := d.Attempt(rng, 1, st)
		if a.Refused || a.Service != 3100*time.Millisecond {
			t.Fatalf("below the limit: %+v", a)
		}
		for _, s := range st {
			count[s]++
		}
	}
	if f, df := float64(count[report.Error])/3000, float64(count[report.Deferred])/3000; math.Abs(f-0.25) > 0.03 || math.Abs(df-0.25) > 0.03 {
		t.Errorf("outcomes %v", count)
	}
	dead := &Dest{P: 1}
	if a := dead.Attempt(rng, 0, st[:1]); !a.Refused || st[0] != report.DeferAll {
		t.Errorf("dead: %+v %v", a, st)
	}
}

// zschedJob appends the records of one job as zsched logs them: its
// recipients' outcomes at its end.
func zschedJob(recs []trace.Record, job uint64, agent, host string, msg int, arrival, end time.Time, status trace.Status, n int) []trace.Record {
	for i := 0; i < n; i++ {
		recs = append(recs, trace.Record{At: end, Arrival: arrival, Msg: strconv.Itoa(msg), Rcpt: strconv.Itoa(100 + 50*i),
			Channel: "smtp", Host: host, Status: status, Attempt: 1, Agent: agent, Job: job, Service: -1, Setup: -1})
	}
	return recs
}

// TestBuilderEstimatesZschedSessions: zsched logs no service times. Three
// agents serve a backlog at a destination back to back, 100 ms a session
// plus 40 ms a recipient; the first agent then sits idle for a second (its
// window shrank) before its last job. The sessions are recovered from the
// agents' sequence, the idle second is not taken for work, and the agents'
// first jobs give their start-up.
func TestBuilderEstimatesZschedSessions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	const startup = 30
	var recs []trace.Record
	job, msg := uint64(0), 0
	for i, agent := range []string{"11", "12", "13"} {
		arrival := t0.Add(ms(10 * i))
		at := arrival.Add(ms(startup))
		for k := 0; k < 40; k++ {
			n := 1 + k%3
			at = at.Add(ms(100 + 40*n))
			job++
			msg++
			recs = zschedJob(recs, job, agent, "x.test", msg, arrival, at, trace.Delivered, n)
		}
		if agent == "11" {
			job++
			msg++
			recs = zschedJob(recs, job, agent, "x.test", msg, arrival, at.Add(time.Second+ms(140)), trace.Delivered, 1)
		}
	}
	// The trace is in time order; so are each agent's records here.
	b := NewBuilder(Options{})
	for _, r := range recs {
		b.Add(r)
	}
	m := b.Model()
	d := m.Lookup("smtp", "x.test")
	if d.Shared || d.Sessions != 121 || d.Recipients != 238 || d.Refusals != 0 {
		t.Fatalf("dest %+v", d)
	}
	if got := d.PerSession.Quantile(0.5); got < ms(95) || got > ms(105) {
		t.Errorf("per session %v, want 100ms", got)
	}
	if got := d.PerRcpt.Quantile(0.5); got < ms(38) || got > ms(42) {
		t.Errorf("per recipient %v, want 40ms", got)
	}
	if got := d.PerRcpt.Quantile(1); got > ms(100) {
		t.Errorf("the idle second taken for work: per recipient at most %v", got)
	}
	if m.Startup < ms(startup-5) || m.Startup > ms(startup+5) {
		t.Errorf("start-up %v, want %dms", m.Startup, startup)
	}
	if d.PeakOpen != 3 {
		t.Errorf("peak sessions %d, want 3", d.PeakOpen)
	}
}

// TestBuilderPostfixSessions: Postfix logs each session's set-up and
// transmission; a destination seen too little shares the default model.
func TestBuilderPostfixSessions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBuilder(Options{})
	for i := 0; i < 30; i++ {
		end := t0.Add(time.Duration(i) * time.Second)
		for k := 0; k < 2; k++ {
			b.Add(trace.Record{At: end, Arrival: t0, Msg: "Q" + strconv.Itoa(i), Rcpt: strconv.Itoa(k), Channel: "smtp",
				Host: "big.test", Status: trace.Delivered, Attempt: 1, Agent: "7", Job: uint64(i + 1),
				Service: 700 * time.Millisecond, Setup: 300 * time.Millisecond})
		}
	}
	b.Add(trace.Record{At: t0, Arrival: t0, Msg: "R", Rcpt: "r", Channel: "smtp", Host: "small.test",
		Status: trace.Failed, Attempt: 1, Agent: "8", Job: 99, Service: 0, Setup: 0})
	m := b.Model()
	big := m.Lookup("smtp", "big.test")
	if big.Shared || big.PerSession.Quantile(0.5) != 300*time.Millisecond || big.PerRcpt.Quantile(0.5) != 200*time.Millisecond || m.Startup != 0 {
		t.Errorf("big %+v startup %v", big, m.Startup)
	}
	if small := m.Lookup("smtp", "small.test"); !small.Shared || small.Failed != 1 || m.Pooled != 1 {
		t.Errorf("small %+v pooled %d", small, m.Pooled)
	}
	if unseen := m.Lookup("smtp", "never.test"); unseen != m.Default {
		t.Error("an unseen destination has the default model")
	}
}

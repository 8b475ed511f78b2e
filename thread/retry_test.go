package thread

import (
	"math/rand"
	"strconv"
	"testing"
	"time"

	"zsched/config"
	"zsched/report"
)

// t0 is on a minute boundary (and an hour boundary).
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestScheduleNext(t *testing.T) {
	const m = time.Minute
	tests := []struct {
		name  string
		s     Schedule
		now   time.Time
		i     int
		want  time.Time
		wantI int
	}{
		{"first entry", Schedule{Interval: m, Retries: []int{1, 2, 4}}, t0, 0, t0.Add(m), 1},
		{"second entry", Schedule{Interval: m, Retries: []int{1, 2, 4}}, t0, 1, t0.Add(2 * m), 2},
		{"last entry", Schedule{Interval: m, Retries: []int{1, 2, 4}}, t0, 2, t0.Add(4 * m), 3},
		{"no list: one interval", Schedule{Interval: 5 * m}, t0, 0, t0.Add(5 * m), 0},
		{"jackhammer 0 is bounded", Schedule{Interval: m, Retries: []int{0}}, t0, 0, t0.Add(MinRetry), 1},
		{"hour and a half interval", Schedule{Interval: 90 * m, Retries: []int{1, 2}}, t0, 1, t0.Add(3 * time.Hour), 2},

		// Skew: the time is pulled toward the boundary below it by
		// (offset from that boundary)/skew. now = 12:00:30, +1m = 12:01:30,
		// 30 s past the 12:01 boundary.
		{"skew 1 lands on the boundary", Schedule{Interval: m, Retries: []int{1}, Skew: 1}, t0.Add(30 * time.Second), 0, t0.Add(m), 1},
		{"skew 2 goes half way", Schedule{Interval: m, Retries: []int{1}, Skew: 2}, t0.Add(30 * time.Second), 0, t0.Add(m + 15*time.Second), 1},
		{"skew 5 goes a fifth", Schedule{Interval: m, Retries: []int{1}, Skew: 5}, t0.Add(30 * time.Second), 0, t0.Add(m + 24*time.Second), 1},
		{"skew on a boundary changes nothing", Schedule{Interval: m, Retries: []int{3}, Skew: 1}, t0, 0, t0.Add(3 * m), 1},
		// 12:00:59.5 +1m = 12:01:59.5; skew 1 pulls it to 12:01:00, half a
		// second after now: too soon, so one interval later.
		{"aligned too close to now moves one interval on", Schedule{Interval: m, Retries: []int{1}, Skew: 1},
			t0.Add(59*time.Second + 500*time.Millisecond), 0, t0.Add(2 * m), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i := tc.i
			got := tc.s.Next(tc.now, &i, rand.New(rand.NewSource(1)))
			if !got.Equal(tc.want) || i != tc.wantI {
				t.Fatalf("Next(%s, i=%d) = %s, i=%d; want %s, i=%d",
					tc.now.Format(time.TimeOnly), tc.i, got.Format("15:04:05.000"), i, tc.want.Format("15:04:05.000"), tc.wantI)
			}
		})
	}
}

// TestScheduleWrapsToARandomIndex runs the schedule past its end with a
// fixed seed: the first len(list) delays follow the list, then each wrap
// picks a random index and continues from it to the end again.
func TestScheduleWrapsToARandomIndex(t *testing.T) {
	list := []int{1, 1, 2, 3, 5, 8, 13, 21, 34}
	s := Schedule{Interval: time.Minute, Retries: list}
	rng := rand.New(rand.NewSource(42))
	now := t0
	i := 0
	var factors []int
	for n := 0; n < 200; n++ {
		next := s.Next(now, &i, rng)
		factors = append(factors, int(next.Sub(now)/time.Minute))
		now = next
	}
	for k, f := range list {
		if factors[k] != f {
			t.Fatalf("delay %d is %d intervals, want the list's %d", k, factors[k], f)
		}
	}
	// After the list, the delays come in runs: a random start index, then
	// every following entry up to the end of the list.
	picked := map[int]bool{}
	for k := len(list); k < len(factors); {
		start := indexOf(list, factors[k])
		if start < 0 {
			t.Fatalf("delay %d is %d intervals, not in the list", k, factors[k])
		}
		// The list starts with two 1s: a run from index 0 shows both, a
		// run from index 1 only one.
		if factors[k] == 1 && (k+1 == len(factors) || factors[k+1] != 1) {
			start = 1
		}
		picked[start] = true
		for j := start; j < len(list) && k < len(factors); j, k = j+1, k+1 {
			if factors[k] != list[j] {
				t.Fatalf("delay %d is %d intervals, want list[%d] = %d (run from index %d): %v", k, factors[k], j, list[j], start, factors)
			}
		}
	}
	if len(picked) < 5 {
		t.Fatalf("only %d distinct restart indexes in 200 retries: %v", len(picked), picked)
	}
	// The same seed gives the same schedule: scenarios replay exactly.
	rng2 := rand.New(rand.NewSource(42))
	now, i = t0, 0
	for k := range factors {
		next := s.Next(now, &i, rng2)
		if int(next.Sub(now)/time.Minute) != factors[k] {
			t.Fatalf("seed 42 replayed differently at retry %d", k)
		}
		now = next
	}
}

func indexOf(list []int, f int) int {
	for i, x := range list {
		if x == f {
			return i
		}
	}
	return -1
}

// TestRetryAt checks the agent's retryat override, relative and absolute,
// through the same path the core takes (report.Line.RetryAfter, then At).
func TestRetryAt(t *testing.T) {
	tests := []struct {
		name  string
		retry string
		want  time.Duration
	}{
		{"relative", "+300", 5 * time.Minute},
		{"absolute", strconv.FormatInt(t0.Unix()+600, 10), 10 * time.Minute},
		{"absolute in the past", strconv.FormatInt(t0.Unix()-600, 10), MinRetry},
		{"relative zero", "+0", MinRetry},
		{"absurdly far", "+99999999999", maxRetryAt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := report.Line{Status: report.RetryAt, Retry: tc.retry}
			secs, ok := l.RetryAfter(t0.Unix())
			if !ok {
				t.Fatalf("retryat %s not understood", tc.retry)
			}
			if got := At(t0, secs).Sub(t0); got != tc.want {
				t.Fatalf("retryat %s: retry after %s, want %s", tc.retry, got, tc.want)
			}
		})
	}
}

// TestCompoundIntervalFromConfig: ZMailer reads "1h30m" as 1h (Q1); the
// schedule built from the parsed config waits 5400 s.
func TestCompoundIntervalFromConfig(t *testing.T) {
	c, err := config.Parse("t.toml", []byte(`[scheduler]
postoffice = "/x"
[[clause]]
select = "smtp/*"
command = "sink"
interval = "1h30m"
retries = [1]
skew = 1
`))
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Clauses[0]
	s := Schedule{Interval: cl.Interval.D(), Retries: cl.Retries, Skew: cl.Skew}
	i := 0
	// t0 is on a 90-minute boundary since the epoch? Use one that is.
	base := time.Unix(5400*200000, 0).UTC()
	if got := s.Next(base, &i, rand.New(rand.NewSource(1))).Sub(base); got != 5400*time.Second {
		t.Fatalf("interval 1h30m waits %s, want 5400s", got)
	}
}

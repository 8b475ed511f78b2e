package thread

import (
	"math/rand"
	"time"
)

// Schedule is a clause's retry schedule: delays of retries[i] × interval,
// i advancing once per failure, wrapping to a random index at the end of the
// list (ZMailer's documented behaviour, without its HEAD quirks Q2–Q4).
type Schedule struct {
	Interval time.Duration
	Retries  []int
	Skew     int
}

// Next returns the retry time after a failure at now and advances *i.
// With skew ≥ 1 the time is pulled toward the interval boundary below it by
// (offset from the boundary)/skew, so retries bunch on boundaries without
// all landing on the same instant.
func (s Schedule) Next(now time.Time, i *int, rng *rand.Rand) time.Time {
	if len(s.Retries) == 0 || s.Interval <= 0 {
		return now.Add(s.Interval)
	}
	if *i >= len(s.Retries) || *i < 0 {
		*i = rng.Intn(len(s.Retries))
	}
	f := s.Retries[*i]
	*i++
	if f == 0 {
		return now
	}
	at := now.Add(time.Duration(f) * s.Interval)
	if s.Skew >= 1 {
		off := time.Duration(at.UnixNano() % int64(s.Interval))
		at = at.Add(-off / time.Duration(s.Skew))
	}
	if !at.After(now) {
		at = now.Add(s.Interval)
	}
	return at
}

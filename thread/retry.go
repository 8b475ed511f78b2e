package thread

import (
	"math/rand"
	"time"
)

// MinRetry is the shortest delay Next ever returns. A factor of 0 in the
// retries list ("jackhammer") and an agent's `retryat +0` both mean "again
// at once"; taken literally, a destination that fails instantly would be
// re-fed in a loop that never lets the clock move. One second keeps that
// loop bounded while staying far below any real interval.
const MinRetry = time.Second

// Schedule is a clause's retry schedule: delays of retries[i] × interval,
// i advancing once per failure, wrapping to a random index at the end of the
// list — ZMailer's documented behaviour without its HEAD quirks: the index
// advances exactly once per failed run (Q2), the base is always the time of
// the failure (Q4), and a retryat from the agent overrides the list (Q3,
// applied by the caller through At).
type Schedule struct {
	Interval time.Duration
	Retries  []int
	Skew     int
}

// Next returns the retry time after a failure at now and advances *i.
//
// Skew alignment: with skew ≥ 1 the computed time t is pulled back toward
// the interval boundary at or below it (boundaries are multiples of the
// interval since the Unix epoch) by (t − boundary)/skew. Skew 1 lands
// exactly on the boundary; larger skews bunch retries near boundaries
// without making them all fire at one instant; a very large skew leaves t
// almost as it is. Retries of many destinations thus tend to coincide,
// which lets one agent run serve several threads in turn (ZMailer's intent).
// The result is never earlier than now+MinRetry: if alignment pulls it back
// that far, the time one full interval later is used instead, as ZMailer
// pushes a past time forward by whole intervals.
//
// Without a retries list the delay is one interval.
func (s Schedule) Next(now time.Time, i *int, rng *rand.Rand) time.Time {
	if len(s.Retries) == 0 || s.Interval <= 0 {
		return now.Add(max(s.Interval, MinRetry))
	}
	if *i >= len(s.Retries) || *i < 0 {
		*i = rng.Intn(len(s.Retries))
	}
	f := s.Retries[*i]
	*i++
	if f <= 0 {
		return now.Add(MinRetry)
	}
	at := now.Add(time.Duration(f) * s.Interval)
	if s.Skew >= 1 {
		off := time.Duration(at.UnixNano() % int64(s.Interval))
		if off < 0 {
			off += s.Interval // before 1970: the remainder is negative
		}
		at = at.Add(-off / time.Duration(s.Skew))
	}
	if at.Before(now.Add(MinRetry)) {
		at = at.Add(s.Interval)
	}
	return at
}

// At returns the retry time an agent's `retryat` asks for, given as seconds
// from now (report.Line.RetryAfter), never sooner than MinRetry.
func At(now time.Time, secs int64) time.Time {
	d := maxRetryAt
	if secs < int64(maxRetryAt/time.Second) {
		d = time.Duration(secs) * time.Second
	}
	return now.Add(max(d, MinRetry))
}

// maxRetryAt bounds an agent's retryat: a garbled absolute time must not
// park a destination for decades. Expiry still ends its recipients on time
// (the scheduler's sweep does not wait for the back-off).
const maxRetryAt = 30 * 24 * time.Hour

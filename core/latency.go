package core

import (
	"math"
	"time"
)

// Latency is a histogram of dispatch latencies: the time from a vertex
// becoming due (arrival, retry time, end of back-off) to its job line being
// written. Buckets grow by 2^(1/4) from 1 µs, so a quantile is within 19 %
// of the truth at any scale, in constant memory.
type Latency struct {
	counts [latencyBuckets]uint64
	n      uint64
	sum    time.Duration
}

const latencyBuckets = 4 * 40 // 1 µs · 2^40 ≈ 12.7 days

func latencyBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	b := int(math.Ceil(4 * math.Log2(us)))
	return min(b, latencyBuckets-1)
}

// Observe records one dispatch.
func (l *Latency) Observe(d time.Duration) {
	l.counts[latencyBucket(d)]++
	l.n++
	l.sum += d
}

// Count returns the number of dispatches observed.
func (l *Latency) Count() uint64 { return l.n }

// Mean returns the mean latency.
func (l *Latency) Mean() time.Duration {
	if l.n == 0 {
		return 0
	}
	return l.sum / time.Duration(l.n)
}

// Quantile returns the upper bound of the bucket holding quantile q.
func (l *Latency) Quantile(q float64) time.Duration {
	if l.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(l.n)))
	var seen uint64
	for b, c := range l.counts {
		seen += c
		if seen >= rank && c > 0 {
			return time.Duration(math.Pow(2, float64(b)/4) * float64(time.Microsecond))
		}
	}
	return time.Duration(math.Pow(2, float64(latencyBuckets-1)/4) * float64(time.Microsecond))
}

// Latency returns the dispatch latency histogram.
func (s *Core) Latency() *Latency { return &s.latency }

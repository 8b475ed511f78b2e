package core

import (
	"math/rand"
	"strconv"
	"testing"
	"time"

	"zsched/thread"
)

// BenchmarkTimerHeap measures the agenda's hot operation: a thread's wake
// time moved (a deferral, a back-off, a retry), the heap holding n
// threads. Costs must stay logarithmic in n.
func BenchmarkTimerHeap(b *testing.B) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{100, 10_000, 1_000_000} {
		b.Run("threads="+strconv.Itoa(n), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			var h timerHeap
			ts := make([]*thread.Thread, n)
			for i := range ts {
				ts[i] = thread.New(thread.Key{Host: strconv.Itoa(i)}, thread.Window{})
				h.set(ts[i], t0.Add(time.Duration(rng.Int63n(int64(time.Hour)))))
			}
			b.ResetTimer()
			for i := range b.N {
				t := ts[i%n]
				h.set(t, t0.Add(time.Duration(rng.Int63n(int64(time.Hour)))))
			}
		})
	}
}

// TestTimerHeapOrder checks the heap against a sort after random moves and
// removals: popping the minimum repeatedly yields non-decreasing times.
func TestTimerHeapOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewSource(2))
	var h timerHeap
	ts := make([]*thread.Thread, 500)
	for i := range ts {
		ts[i] = thread.New(thread.Key{Host: strconv.Itoa(i)}, thread.Window{})
	}
	for range 5000 {
		th := ts[rng.Intn(len(ts))]
		if rng.Intn(4) == 0 {
			h.set(th, time.Time{})
		} else {
			h.set(th, t0.Add(time.Duration(rng.Intn(1000))*time.Second))
		}
	}
	for i, th := range h {
		if th.WakeIndex != i {
			t.Fatalf("thread at %d says it is at %d", i, th.WakeIndex)
		}
	}
	var last time.Time
	for len(h) > 0 {
		th := h[0]
		if th.Wake.Before(last) {
			t.Fatalf("popped %v after %v", th.Wake, last)
		}
		last = th.Wake
		h.set(th, time.Time{})
		if th.WakeIndex != -1 {
			t.Fatal("a removed thread keeps an index")
		}
	}
}

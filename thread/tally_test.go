package thread

import (
	"math/rand"
	"testing"
	"time"
)

// TestTallyAgainstNaiveModel adds and removes recipients at random arrival
// seconds, mostly the oldest first (a draining destination) with new
// seconds arriving behind, and checks the tally against a plain count
// after every change: recipients, the oldest arrival, and every second's
// count. The stale keys of its heap must not pile up.
func TestTallyAgainstNaiveModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	base := time.Unix(1_800_000_000, 0)
	var tl Tally
	model := map[int64]int{} // arrival second → recipients
	total := 0
	newest := int64(0)
	check := func(step int) {
		t.Helper()
		if tl.Recipients != total {
			t.Fatalf("step %d: %d recipients, want %d", step, tl.Recipients, total)
		}
		var oldest time.Time
		for s := range model {
			if at := base.Add(time.Duration(s) * time.Second); oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
		if got := tl.Oldest(); !got.Equal(oldest) {
			t.Fatalf("step %d: oldest %v, want %v", step, got, oldest)
		}
		seen := 0
		tl.Each(func(at time.Time, n int) {
			seen++
			if want := model[int64(at.Sub(base)/time.Second)]; n != want {
				t.Fatalf("step %d: %v counts %d, want %d", step, at, n, want)
			}
		})
		if seen != len(model) {
			t.Fatalf("step %d: %d arrival seconds, want %d", step, seen, len(model))
		}
		if len(tl.oldest) > 2*len(tl.ages)+33 {
			t.Fatalf("step %d: heap of %d keys for %d seconds", step, len(tl.oldest), len(tl.ages))
		}
	}
	pick := func() int64 {
		// The oldest second three times in four, else any.
		var oldest int64 = -1
		for s := range model {
			if oldest < 0 || s < oldest {
				oldest = s
			}
		}
		if rng.Intn(4) > 0 {
			return oldest
		}
		for s := range model {
			return s
		}
		return oldest
	}
	for step := range 20000 {
		switch {
		case total == 0 || rng.Intn(2) == 0:
			// Mostly new seconds at the end, sometimes an old one (a
			// queue read in directory order).
			s := newest
			if rng.Intn(3) == 0 {
				newest++
				s = newest
			} else if rng.Intn(10) == 0 && newest > 0 {
				s = rng.Int63n(newest)
			}
			n := 1 + rng.Intn(3)
			tl.Add(base.Add(time.Duration(s)*time.Second), n)
			model[s] += n
			total += n
		default:
			s := pick()
			n := 1 + rng.Intn(model[s])
			tl.Remove(base.Add(time.Duration(s)*time.Second), n)
			if model[s] -= n; model[s] == 0 {
				delete(model, s)
			}
			total -= n
		}
		check(step)
	}
	// Messages without an arrival time count in Recipients only.
	tl.Add(time.Time{}, 2)
	total += 2
	check(-1)
	tl.Remove(time.Time{}, 2)
	total -= 2
	check(-2)
}

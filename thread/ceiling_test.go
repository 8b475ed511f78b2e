package thread

import (
	"math/rand"
	"testing"
	"time"

	"zsched/config"
)

// learning returns the default clause's window (learned_ceiling on,
// probe factor 10, TTL 1h) with 1/N feedback, initial 5, limit 20,
// opened at once as Postfix's (no slow start).
func learning(on bool) Window {
	c := config.Default().Defaults
	c.LearnedCeiling = on
	c.SlowStart = false
	return NewWindow(&c)
}

// limiter drives w against a server that takes k sessions: a delivery at
// a window above k is refused (the session past the limit), others
// succeed with the window full. It returns how many were refused.
func limiter(w *Window, k func(i int) int, n int, now time.Time, trace *[]int) int {
	refused := 0
	for i := range n {
		if w.Limit() > k(i) {
			w.Failed(now)
			refused++
		} else {
			w.Succeeded(w.Limit(), now)
		}
		if trace != nil {
			*trace = append(*trace, w.Limit())
		}
	}
	return refused
}

// TestCeilingOffIsPostfix: learned_ceiling = false is Postfix 2.5
// exactly, step by step against the README's pseudocode, on random
// feedback sequences that push back as a limiter and as noise do.
func TestCeilingOffIsPostfix(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for run := 0; run < 100; run++ {
		w := learning(false)
		r := reference{concurrency: 5, limit: 20, initial: 5, cohortLimit: 1, g: inverse.Of, f: inverse.Of}
		k, noise := 1+rng.Intn(20), rng.Float64()/4
		for step := 0; step < 1000; step++ {
			if w.Limit() > k || rng.Float64() < noise {
				w.Failed(epoch.Add(time.Duration(step) * time.Second))
				r.afterFailure()
			} else {
				w.Succeeded(w.Limit(), epoch.Add(time.Duration(step)*time.Second))
				r.afterSuccess(r.concurrency)
			}
			if w.Concurrency != r.concurrency || w.Success != r.success || w.Failure != r.failure ||
				w.FailCohorts != r.failCohorts || w.Ceiling != 0 {
				t.Fatalf("run %d step %d: window %+v, pseudocode %+v", run, step, w, r)
			}
		}
	}
}

// TestCeilingNoPushbackIsPostfix: a destination that never fails ramps up
// exactly as Postfix's, ceiling learning on.
func TestCeilingNoPushbackIsPostfix(t *testing.T) {
	w, p := learning(true), learning(false)
	for i := 0; i < 500; i++ {
		w.Succeeded(w.Limit(), epoch)
		p.Succeeded(p.Limit(), epoch)
		if w != (func() Window { q := p; q.Learn = true; return q })() {
			t.Fatalf("delivery %d: learning %+v, Postfix %+v", i, w, p)
		}
	}
}

// TestCeilingLearnsALimiter: against 5 sessions, Postfix's 1/N refuses one
// delivery in 6; with the ceiling learned (confirmed at 5) it is one in
// about 10 × 5 + 1, and the window stays at the limit.
func TestCeilingLearnsALimiter(t *testing.T) {
	five := func(int) int { return 5 }
	p, w := learning(false), learning(true)
	pRefused := limiter(&p, five, 3000, epoch, nil)
	var trace []int
	wRefused := limiter(&w, five, 3000, epoch, &trace)
	t.Logf("refused: Postfix %d, ceiling %d of 3000", pRefused, wRefused)
	if pRefused < 3000/7 {
		t.Fatalf("Postfix refused %d, want about 1 in 6", pRefused)
	}
	if wRefused > 3000*3/100 {
		t.Fatalf("with the ceiling %d refused, want at most 3 %%", wRefused)
	}
	if c, ok := w.LearnedCeiling(epoch); c != 5 || !ok {
		t.Fatalf("ceiling %d (confirmed %v), want 5 confirmed", c, ok)
	}
	sum := 0
	for _, x := range trace {
		sum += x
	}
	if avg := float64(sum) / float64(len(trace)); avg < 4.8 {
		t.Fatalf("average window %.2f, want >= 4.8", avg)
	}
}

// TestCeilingProbesCostLittleAtALowLimit: against 2 sessions, a
// confirmed ceiling's probes are as far apart as at 5 (ProbeFactor × 5
// deliveries), not 10 × 2 + 1: at most about 2 % refused once learned,
// where the factor alone refused one in 21.
func TestCeilingProbesCostLittleAtALowLimit(t *testing.T) {
	// The helper's limiter refuses every delivery above the limit, even
	// when fewer are busy: start at the limit, and never dead.
	two := func(int) int { return 2 }
	w := learning(true)
	w.Initial, w.Concurrency, w.CohortLimit = 2, 2, 0
	limiter(&w, two, 500, epoch, nil) // learn and confirm the ceiling
	if c, ok := w.LearnedCeiling(epoch); c != 2 || !ok {
		t.Fatalf("ceiling %d (confirmed %v), want 2 confirmed", c, ok)
	}
	refused := limiter(&w, two, 5000, epoch, nil)
	t.Logf("refused %d of 5000 at a confirmed ceiling of 2", refused)
	if refused > 5000/50 {
		t.Fatalf("refused %d of 5000 at a confirmed ceiling of 2, want at most one in 51", refused)
	}
	// Above the floor the factor alone decides, as before.
	five := func(int) int { return 5 }
	w = learning(true)
	limiter(&w, five, 500, epoch, nil)
	if refused := limiter(&w, five, 5100, epoch, nil); refused != 100 {
		t.Fatalf("refused %d of 5100 at a confirmed ceiling of 5, want one in 51", refused)
	}
}

// TestCeilingFollowsAChangingLimit: the limit rises from 5 to 10, then
// falls back to 5. The window reaches 10 within a bounded number of
// deliveries (a slow probe, a pseudo-cohort to raise the ceiling, then
// Postfix's ramp), and falls back as fast as Postfix's does.
func TestCeilingFollowsAChangingLimit(t *testing.T) {
	k := func(i int) int {
		if i >= 1000 && i < 2000 {
			return 10
		}
		return 5
	}
	reach := func(tr []int, from int, ok func(int) bool) int {
		for i := from; i < len(tr); i++ {
			if ok(tr[i]) {
				return i - from + 1
			}
		}
		return -1
	}
	var pt, wt []int
	p, w := learning(false), learning(true)
	limiter(&p, k, 3000, epoch, &pt)
	limiter(&w, k, 3000, epoch, &wt)
	up := func(x int) bool { return x >= 10 }
	down := func(x int) bool { return x <= 5 }
	pu, wu := reach(pt, 1000, up), reach(wt, 1000, up)
	pd, wd := reach(pt, 2000, down), reach(wt, 2000, down)
	t.Logf("to 10: Postfix %d, ceiling %d deliveries; back to 5: Postfix %d, ceiling %d", pu, wu, pd, wd)
	// The probe from a confirmed 5 takes 10 × 5 successes, raising the
	// ceiling a pseudo-cohort of 6, the ramp 6+7+8+9.
	if wu < 0 || wu > 10*5+6+6+7+8+9+10 {
		t.Fatalf("window reached 10 after %d deliveries", wu)
	}
	if wd < 0 || wd > pd {
		t.Fatalf("window fell back to 5 after %d deliveries, Postfix's after %d", wd, pd)
	}
	if c, ok := w.LearnedCeiling(epoch); c != 5 || !ok {
		t.Fatalf("after the fall the ceiling is %d (confirmed %v), want 5 confirmed", c, ok)
	}
}

// TestCeilingResistsNoise: failures that strike wherever the window
// stands (one bad server of K behind one address) do not hold the window
// down: its average stays near Postfix's on the same sequence.
func TestCeilingResistsNoise(t *testing.T) {
	for _, k := range []int{4, 10} {
		avg := func(on bool) float64 {
			rng := rand.New(rand.NewSource(int64(k)))
			w := learning(on)
			sum := 0
			for i := 0; i < 5000; i++ {
				if rng.Intn(k) == 0 {
					w.Failed(epoch)
				} else {
					w.Succeeded(w.Limit(), epoch)
				}
				sum += w.Limit()
			}
			return float64(sum) / 5000
		}
		p, c := avg(false), avg(true)
		t.Logf("1 of %d fails: average window Postfix %.2f, ceiling %.2f", k, p, c)
		if c < 0.9*p {
			t.Errorf("1 of %d fails: the ceiling held the window at %.2f, Postfix's %.2f", k, c, p)
		}
	}
}

// TestCeilingExpires: a ceiling nothing confirmed for ceiling_ttl is
// forgotten; a refused probe renews it.
func TestCeilingExpires(t *testing.T) {
	w := learning(true)
	limiter(&w, func(int) int { return 5 }, 200, epoch, nil)
	st := w.State()
	if c, ok := w.LearnedCeiling(epoch); c != 5 || !ok {
		t.Fatalf("ceiling %d (%v), want 5 confirmed", c, ok)
	}
	if c, _ := w.LearnedCeiling(st.CeilingAt.Add(w.TTL - time.Second)); c != 5 {
		t.Fatalf("ceiling gone before its TTL")
	}
	later := st.CeilingAt.Add(w.TTL + time.Second)
	if c, _ := w.LearnedCeiling(later); c != 0 {
		t.Fatalf("ceiling %d still shown after its TTL", c)
	}
	w.Succeeded(w.Limit(), later)
	if w.Ceiling != 0 || w.Confirmed() {
		t.Fatalf("ceiling kept after its TTL: %+v", w)
	}
	// Renewal: probes refused at 6 keep a live limiter's ceiling.
	v := learning(true)
	at := epoch
	for i := 0; i < 100; i++ {
		limiter(&v, func(int) int { return 5 }, 100, at, nil)
		at = at.Add(10 * time.Minute)
	}
	if c, ok := v.LearnedCeiling(at); c != 5 || !ok {
		t.Fatalf("a limiter probed every 10 minutes for 16 hours lost its ceiling: %d %v", c, ok)
	}
}

// TestCeilingStateRestore: the ceiling survives State and Restore (a
// restart), clamped to maxthr, and is dropped where the clause turned
// learning off.
func TestCeilingStateRestore(t *testing.T) {
	w := learning(true)
	limiter(&w, func(int) int { return 7 }, 300, epoch, nil)
	st := w.State()
	if st.Ceiling != 7 || st.Strikes != confirmedStrikes || st.CeilingAt.IsZero() {
		t.Fatalf("state %+v, want a confirmed ceiling 7 with its time", st)
	}
	v := learning(true)
	v.Restore(st)
	if c, ok := v.LearnedCeiling(epoch); c != 7 || !ok || v.Limit() != w.Limit() {
		t.Fatalf("restored ceiling %d (%v), window %d", c, ok, v.Limit())
	}
	c := config.Default().Defaults
	c.MaxThr = 4
	small := NewWindow(&c)
	small.Restore(st)
	if small.Ceiling > 4 {
		t.Fatalf("restored ceiling %d over maxthr 4", small.Ceiling)
	}
	off := learning(false)
	off.Restore(st)
	if off.Ceiling != 0 || !(off.Limit() == w.Limit()) {
		t.Fatalf("learned_ceiling = false kept a ceiling: %+v", off)
	}
	bad := learning(true)
	bad.Restore(WindowState{Concurrency: 3, Ceiling: 3, Strikes: 9})
	if !bad.Fresh() {
		t.Fatal("Restore took an impossible strike count")
	}
}

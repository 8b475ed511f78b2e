package thread

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"zsched/config"
)

var (
	inverse = config.Feedback{Kind: config.FeedbackInverse, Value: 1}
	invSqrt = config.Feedback{Kind: config.FeedbackInverseSqrt, Value: 1}
	fixed1  = config.Feedback{Kind: config.FeedbackFixed, Value: 1}
)

// window returns a window as a clause with these settings would make it.
func window(initial, limit int, pos, neg config.Feedback, cohorts int) Window {
	return NewWindow(&config.Clause{MaxThr: limit, InitialConcurrency: initial,
		PositiveFeedback: pos, NegativeFeedback: neg, FailedCohortLimit: cohorts})
}

// epoch is the time feedback is judged at where time does not matter.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// noSafety is a busy count large enough that the safety rule never binds.
const noSafety = 1000

// successesPerStep returns how many successes each step up from the
// initial concurrency took, until the limit.
func successesPerStep(t *testing.T, w Window) []int {
	t.Helper()
	var steps []int
	n := 0
	for w.Limit() < w.Max {
		before := w.Limit()
		w.Succeeded(noSafety, epoch)
		n++
		if w.Limit() != before {
			if w.Limit() != before+1 {
				t.Fatalf("window jumped from %d to %d", before, w.Limit())
			}
			steps = append(steps, n)
			n = 0
		}
		if n > 1000 {
			t.Fatalf("window stuck at %d", before)
		}
	}
	return steps
}

func TestPositiveFeedbackHysteresis(t *testing.T) {
	// g(N) = 1/N: one step up per whole pseudo-cohort of N successes, so
	// growth is linear in time (README, "Summary of the Postfix 2.5
	// concurrency feedback algorithm"). The step happens at the END of the
	// 1/g sequence.
	steps := successesPerStep(t, window(5, 20, inverse, inverse, 1))
	for i, n := range steps {
		if want := 5 + i; n != want {
			t.Fatalf("1/N: step %d→%d took %d successes, want %d (all steps %v)", 5+i, 6+i, n, want, steps)
		}
	}
	// g(N) = 1/sqrt(N): ceil(sqrt(N)) successes per step, give or take the
	// remainder a step leaves over: never fewer than sqrt(N)-1, never more
	// than sqrt(N)+1.
	steps = successesPerStep(t, window(5, 20, invSqrt, inverse, 1))
	for i, n := range steps {
		r := math.Sqrt(float64(5 + i))
		if float64(n) < r-1 || float64(n) > r+1 {
			t.Fatalf("1/sqrt(N): step from %d took %d successes, want about %.2f (all %v)", 5+i, n, r, steps)
		}
	}
	// g = 1: the old scheduler's +1 per delivery (5-10-20 over pseudo-cohorts).
	steps = successesPerStep(t, window(5, 20, fixed1, inverse, 1))
	if len(steps) != 15 {
		t.Fatalf("fixed 1: %d steps from 5 to 20, want 15", len(steps))
	}
	for _, n := range steps {
		if n != 1 {
			t.Fatalf("fixed 1: a step took %d successes, want 1 (%v)", n, steps)
		}
	}
}

func TestPositiveFeedbackStepByStep(t *testing.T) {
	w := window(5, 20, inverse, inverse, 1)
	for i := 1; i <= 4; i++ {
		w.Succeeded(noSafety, epoch)
		if w.Limit() != 5 || math.Abs(w.Success-0.2*float64(i)) > 1e-9 {
			t.Fatalf("after %d successes: window %d success %g, want 5 and %g", i, w.Limit(), w.Success, 0.2*float64(i))
		}
	}
	w.Failure = 0.5 // as a negative cycle in progress would leave it
	w.Succeeded(noSafety, epoch)
	if w.Limit() != 6 || w.Success > 1e-9 {
		t.Fatalf("5th success: window %d success %g, want 6 and 0", w.Limit(), w.Success)
	}
	if w.Failure != 0 {
		t.Fatalf("a step up must restart the negative cycle: failure %g", w.Failure)
	}
}

func TestNegativeFeedbackReverseHysteresis(t *testing.T) {
	for _, tc := range []struct {
		name string
		neg  config.Feedback
	}{{"1/N", inverse}, {"1/sqrt(N)", invSqrt}, {"1", fixed1}} {
		t.Run(tc.name, func(t *testing.T) {
			w := window(5, 20, inverse, tc.neg, 100)
			w.Concurrency = 12
			// The very first failure costs one at once: the step happens at
			// the BEGINNING of the 1/f sequence.
			if w.Failed(epoch) || w.Limit() != 11 {
				t.Fatalf("first failure: window %d, want 11", w.Limit())
			}
			// The rest of the cycle is paid by the failures that follow:
			// the next step comes after ceil(remaining/f) of them.
			f := tc.neg.Of(11)
			wantMore := int(math.Ceil(w.Failure/f + 1e-12))
			if w.Failure == 0 {
				wantMore = 1
			}
			n := 0
			for w.Limit() == 11 {
				w.Failed(epoch)
				n++
			}
			if n != wantMore {
				t.Fatalf("next step after %d more failures, want %d", n, wantMore)
			}
		})
	}
}

func TestOneLonelyFailureCostsAWholeStep(t *testing.T) {
	// README, "Limitations of less-than-1 per delivery feedback": one
	// negative event drops the window by one, as a whole 1/f sequence
	// would; and it wipes the positive feedback gathered so far.
	w := window(5, 20, inverse, inverse, 1)
	for i := 0; i < 4; i++ {
		w.Succeeded(noSafety, epoch)
	}
	w.Failed(epoch)
	if w.Limit() != 4 || w.Success != 0 {
		t.Fatalf("window %d success %g after 4 successes and a failure, want 4 and 0", w.Limit(), w.Success)
	}
	// The climb back starts from nothing: 4 successes at window 4.
	for i := 0; i < 3; i++ {
		w.Succeeded(noSafety, epoch)
	}
	if w.Limit() != 4 {
		t.Fatalf("window %d after 3 successes at 4, want still 4", w.Limit())
	}
	w.Succeeded(noSafety, epoch)
	if w.Limit() != 5 {
		t.Fatalf("window %d after 4 successes at 4, want 5", w.Limit())
	}
}

func TestSafetyRule(t *testing.T) {
	// No positive feedback unless concurrency < busy + initial.
	w := window(5, 20, fixed1, inverse, 1)
	w.Concurrency = 10
	for _, busy := range []int{0, 4, 5} {
		w.Succeeded(busy, epoch)
		if w.Limit() != 10 || w.Success != 0 {
			t.Fatalf("busy %d: window %d success %g, want feedback withheld", busy, w.Limit(), w.Success)
		}
	}
	w.Succeeded(6, epoch)
	if w.Limit() != 11 {
		t.Fatalf("busy 6: window %d, want 11", w.Limit())
	}
	// Withheld feedback still ends a run of failed cohorts: the delivery
	// worked.
	w.FailCohorts = 0.5
	w.Succeeded(0, epoch)
	if w.FailCohorts != 0 {
		t.Fatalf("fail_cohorts %g after a success, want 0", w.FailCohorts)
	}
}

func TestLimitBounds(t *testing.T) {
	w := window(5, 20, fixed1, fixed1, 0)
	w.Concurrency = 19
	w.Succeeded(noSafety, epoch)
	w.Succeeded(noSafety, epoch)
	if w.Limit() != 20 || w.Success != 0 {
		t.Fatalf("window %d success %g, want clamped at maxthr 20 with nothing gathered", w.Limit(), w.Success)
	}
	w.Concurrency = 2
	for i := 0; i < 10; i++ {
		w.Failed(epoch)
	}
	if w.Limit() != 1 {
		t.Fatalf("window %d after many failures with dead detection off, want 1", w.Limit())
	}
	if w.Dead() {
		t.Fatal("failed_cohort_limit 0 must never declare the destination dead")
	}
	if w := window(30, 20, inverse, inverse, 1); w.Limit() != 20 {
		t.Fatalf("initial 30 under maxthr 20: window %d", w.Limit())
	}
}

func TestCohortFailureDeclaresDead(t *testing.T) {
	// Window 5, f = 1/N, cohort limit 1: fail_cohorts grows by 1/window per
	// failure, the window shrinking as it goes: 1/5 + 4 × 1/4 ≥ 1 on the
	// fifth failure. Before that the destination lives.
	w := window(5, 20, inverse, inverse, 1)
	want := []int{4, 4, 4, 4}
	for i, c := range want {
		if w.Failed(epoch) {
			t.Fatalf("dead after %d failures, fail_cohorts %g", i+1, w.FailCohorts)
		}
		if w.Limit() != c {
			t.Fatalf("failure %d: window %d, want %d", i+1, w.Limit(), c)
		}
	}
	if !w.Failed(epoch) || !w.Dead() || w.Limit() != 0 {
		t.Fatalf("5th failure: window %d fail_cohorts %g, want dead", w.Limit(), w.FailCohorts)
	}
	// Failures of deliveries still in flight change nothing more.
	if w.Failed(epoch) || w.Limit() != 0 {
		t.Fatal("a dead destination's failure changed it")
	}

	// At window 1 one failed delivery is a whole pseudo-cohort: with limit 1
	// it is dead at once (qmgr_queue.c's >=; the README pseudocode's >
	// would need a second one), with limit 2 after the second.
	w = window(1, 20, inverse, inverse, 1)
	if !w.Failed(epoch) {
		t.Fatal("window 1, limit 1: one failure must declare it dead")
	}
	w = window(1, 20, inverse, inverse, 2)
	if w.Failed(epoch) || !w.Failed(epoch) {
		t.Fatal("window 1, limit 2: dead exactly at the second failure")
	}

	// A success in between starts the count over.
	w = window(5, 20, inverse, inverse, 1)
	for i := 0; i < 4; i++ {
		w.Failed(epoch)
	}
	w.Succeeded(noSafety, epoch)
	for i := 0; i < 3; i++ {
		if w.Failed(epoch) {
			t.Fatalf("dead %d failures after a success", i+1)
		}
	}
}

func TestRevive(t *testing.T) {
	dead := func() Window {
		w := window(5, 20, inverse, inverse, 1)
		for !w.Dead() {
			w.Failed(epoch)
		}
		return w
	}
	// At the retry time, with no agent at work: the initial concurrency,
	// not a single probe (qmgr_queue_unthrottle: "best concurrency is
	// anyone's guess").
	w := dead()
	w.Revive(0)
	if w.Limit() != 5 || w.FailCohorts != 0 || w.Success != 0 || w.Failure != 0 {
		t.Fatalf("revived to %+v, want window 5 and fresh cycles", w)
	}
	// By the success of a delivery in flight: as many as are at work.
	w = dead()
	w.Succeeded(2, epoch)
	if w.Limit() != 2 || w.Dead() {
		t.Fatalf("revived by a success with 2 busy: window %d, want 2", w.Limit())
	}
	// A revived destination that still refuses dies again after one more
	// pseudo-cohort.
	w = dead()
	w.Revive(0)
	n := 0
	for !w.Failed(epoch) {
		n++
	}
	if n+1 != 5 {
		t.Fatalf("revived destination died again after %d failures, want 5", n+1)
	}
	// Revive leaves a live window alone.
	w = window(5, 20, inverse, inverse, 1)
	w.Succeeded(noSafety, epoch)
	before := w
	w.Revive(3)
	if w != before {
		t.Fatalf("Revive changed a live window: %+v → %+v", before, w)
	}
}

func TestStateRestore(t *testing.T) {
	w := window(5, 20, inverse, inverse, 1)
	if !w.Fresh() {
		t.Fatal("new window not fresh")
	}
	w.Succeeded(noSafety, epoch)
	if w.Fresh() {
		t.Fatal("window with gathered feedback reported fresh")
	}
	st := w.State()
	v := window(5, 20, inverse, inverse, 1)
	v.Restore(st)
	if v != w {
		t.Fatalf("restored %+v, want %+v", v, w)
	}
	// A state learned under a higher maxthr is clamped to today's.
	small := window(5, 8, inverse, inverse, 1)
	small.Restore(WindowState{Concurrency: 15})
	if small.Limit() != 8 {
		t.Fatalf("restored window %d over maxthr 8", small.Limit())
	}
	// Values no window can reach are ignored.
	for _, bad := range []WindowState{{Concurrency: -1}, {Concurrency: 3, Success: 1.5}, {Concurrency: 3, Failure: -0.1}, {Concurrency: 3, FailCohorts: -1}} {
		v := window(5, 20, inverse, inverse, 1)
		v.Restore(bad)
		if !v.Fresh() {
			t.Fatalf("Restore(%+v) took an impossible state", bad)
		}
	}
}

// reference is the README's pseudocode transcribed line by line, naive on
// purpose, with the places where qmgr_queue.c (and so Window) differs
// marked "code", and the rounding allowance both make marked "both".
type reference struct {
	concurrency                   int
	success, failure, failCohorts float64
	limit, initial, cohortLimit   int
	g, f                          func(n float64) float64
}

func (r *reference) afterSuccess(busy int) {
	r.failCohorts = 0
	if r.concurrency == 0 { // code: qmgr_queue_unthrottle's dead case
		r.concurrency = r.initial
		if busy > 0 {
			r.concurrency = busy
		}
		r.success, r.failure = 0, 0
		return
	}
	// Safety: don't apply positive feedback unless
	// concurrency < busy_refcount + init_dest_concurrency.
	if !(r.concurrency < busy+r.initial) {
		return
	}
	if r.concurrency >= r.limit { // code: no feedback at the limit
		return
	}
	r.success += r.g(float64(r.concurrency))
	for r.success >= 1-1e-9 { // both: rounding
		r.concurrency += 1
		r.failure = 0
		r.success -= 1
	}
	if r.success < 0 {
		r.success = 0
	}
	if r.concurrency > r.limit {
		r.concurrency = r.limit
	}
}

func (r *reference) afterFailure() {
	if r.concurrency > 0 {
		r.failCohorts += 1.0 / float64(r.concurrency)
		// code: >= (README: >), and a limit of 0 disables it.
		if r.cohortLimit > 0 && r.failCohorts >= float64(r.cohortLimit)-1e-9 {
			r.concurrency = 0
		}
	}
	if r.concurrency > 0 {
		r.failure -= r.f(float64(r.concurrency))
		for r.failure < -1e-9 { // both: rounding
			r.concurrency -= 1
			r.failure += 1
			r.success = 0
		}
		if r.failure < 0 {
			r.failure = 0
		}
		if r.concurrency < 1 {
			r.concurrency = 1
		}
	}
}

func TestWindowAgainstPseudocode(t *testing.T) {
	styles := []config.Feedback{inverse, invSqrt, fixed1, {Kind: config.FeedbackFixed, Value: 0.25},
		{Kind: config.FeedbackInverse, Value: 0.5}}
	rng := rand.New(rand.NewSource(1))
	for run := 0; run < 300; run++ {
		pos, neg := styles[rng.Intn(len(styles))], styles[rng.Intn(len(styles))]
		limit := 1 + rng.Intn(25)
		initial := min(1+rng.Intn(8), limit)
		cohorts := rng.Intn(3)
		w := window(initial, limit, pos, neg, cohorts)
		r := reference{concurrency: initial, limit: limit, initial: initial, cohortLimit: cohorts, g: pos.Of, f: neg.Of}
		pFail := rng.Float64()
		for step := 0; step < 500; step++ {
			if rng.Float64() < pFail {
				w.Failed(epoch)
				r.afterFailure()
			} else {
				busy := rng.Intn(limit + 1)
				w.Succeeded(busy, epoch)
				r.afterSuccess(busy)
			}
			if w.Concurrency != r.concurrency || w.Success != r.success || w.Failure != r.failure || w.FailCohorts != r.failCohorts {
				t.Fatalf("run %d step %d (pos %v neg %v limit %d initial %d cohorts %d): window %+v, pseudocode %+v",
					run, step, pos, neg, limit, initial, cohorts, w, r)
			}
		}
	}
}

// TestSlowStart: with slow_start a new destination's window opens at one
// session and takes one more each time as many deliveries as it allows
// got through, until the initial window: never more than one session
// past what has been shown to work. A failure above 1 ends the slow
// start, weighed as a delivery of the initial window's pseudo-cohort (so
// the destination is not declared dead sooner than Postfix's would be)
// and teaching no ceiling (one failure below the initial window cannot
// tell a limit from noise); a window past its slow start is not fresh
// (the destination was reached). A failure at 1 leaves the slow start
// going; the destination dies after as many in a row as the initial
// window. Without slow_start the window opens at the initial window.
func TestSlowStart(t *testing.T) {
	c := config.Default().Defaults
	c.SlowStart = true
	w := NewWindow(&c)
	var trace []int
	for range 12 {
		trace = append(trace, w.Limit())
		w.Succeeded(w.Limit(), epoch)
	}
	trace = append(trace, w.Limit())
	want := []int{1, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5}
	if fmt.Sprint(trace) != fmt.Sprint(want) {
		t.Fatalf("windows %v, want %v", trace, want)
	}
	if w.Starting || w.Fresh() {
		t.Fatalf("after the slow start: %+v", w)
	}

	w = NewWindow(&c)
	if !w.Fresh() || !w.Starting {
		t.Fatalf("new window %+v: want fresh, in slow start", w)
	}
	w.Succeeded(1, epoch)
	w.Succeeded(2, epoch) // at 2, half a step
	if w.Failed(epoch) {
		t.Fatal("one failure in slow start declared the destination dead")
	}
	if w.Starting || w.Limit() != 1 || w.FailCohorts != 1.0/5 || w.Success != 0 || w.Ceiling != 0 {
		t.Fatalf("after a failure at 2 in slow start: %+v", w)
	}

	// A failure at 1 teaches no ceiling (one session refused is no
	// concurrency limit) and the slow start goes on; as many in a row as
	// the initial window declare the destination dead, as Postfix's
	// initial window of refused sessions would.
	w = NewWindow(&c)
	for i := 1; i < 5; i++ {
		if w.Failed(epoch) || w.Ceiling != 0 || !w.Starting || w.Limit() != 1 {
			t.Fatalf("after %d failures of the first session: %+v", i, w)
		}
	}
	if !w.Failed(epoch) || !w.Dead() || w.Starting {
		t.Fatalf("after 5 failures at 1 in slow start: %+v, want dead", w)
	}

	c.SlowStart = false
	if w := NewWindow(&c); w.Limit() != 5 || w.Starting {
		t.Fatalf("without slow start: %+v", w)
	}
}

package core_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkOperatorViews measures what the operator views cost the core's
// goroutine with 10 k and 1 M recipients in core (messages of 5 recipients
// at 5 of 1250 domains, arriving over 200 s, some of them fed): mailq's
// rings and threads, the gauges behind SHOW COUNTERS and the metrics, WHY
// of one message, SHOW THREAD of one destination, and qshape. Issue 9: at
// 1 M each must stay far under mailq's 100 ms bound, and none may grow
// with the recipients in core (only with threads, agents, or one thread's
// or message's own size).
func BenchmarkOperatorViews(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		q := newQueue(b, "preemptive", 5, 1, 1250)
		for q.queued() < n {
			q.arrive()
			if q.next%5 == 0 {
				q.now = q.now.Add(5 * time.Millisecond)
			}
		}
		for range 1000 {
			q.step()
		}
		last := strconv.FormatInt(q.next-1, 10) // a message in core
		views := []struct {
			name string
			view func()
		}{
			{"mailq", func() { q.s.Rings(q.now) }},
			{"gauges", func() { q.s.Gauges(q.now, 20) }},
			{"why", func() {
				if _, err := q.s.Message(q.now, last); err != nil {
					b.Fatal(err)
				}
			}},
			{"why-gone", func() { q.s.Message(q.now, "999") }}, // a message no longer in core
			{"thread", func() { q.s.ThreadVertices(q.now, "smtp", "d7.test") }},
			{"qshape", func() {
				q.s.Shape(q.now, []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute}, 20)
			}},
		}
		for _, v := range views {
			b.Run(v.name+"/queued="+strconv.Itoa(n), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ResetTimer()
				t0 := threadCPU()
				for range b.N {
					v.view()
				}
				b.ReportMetric(float64((threadCPU()-t0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestOperatorViewsDoNotWalkRecipients is BenchmarkOperatorViews' claim in
// a form that does not depend on the machine: the views allocate as much
// with 100 000 recipients in core as with 10 000 over the same
// destinations. A view that collected the vertices of each thread, or the
// set of their messages, as mailq did before issue 9 (4 537 allocations
// at 10 000, 6 184 at 100 000), fails it; a walk that allocates nothing
// is the benchmark's to show.
func TestOperatorViewsDoNotWalkRecipients(t *testing.T) {
	allocs := func(n int) map[string]float64 {
		q := newQueue(t, "preemptive", 5, 1, 250)
		for q.queued() < n {
			q.arrive()
			q.now = q.now.Add(time.Millisecond)
		}
		for range 200 {
			q.step()
		}
		out := map[string]float64{}
		for name, view := range map[string]func(){
			"mailq":  func() { q.s.Rings(q.now) },
			"gauges": func() { q.s.Gauges(q.now, 20) },
			"qshape": func() { q.s.Shape(q.now, []time.Duration{time.Minute, time.Hour}, 20) },
		} {
			out[name] = testing.AllocsPerRun(5, view)
		}
		return out
	}
	small, large := allocs(10_000), allocs(100_000)
	for name, a := range small {
		if b := large[name]; b > a*1.1+10 {
			t.Errorf("%s: %.0f allocations with 100 000 recipients in core, %.0f with 10 000: it grows with the queue", name, b, a)
		}
	}
	t.Logf("allocations, 10 000 → 100 000 recipients: %v → %v", small, large)
}

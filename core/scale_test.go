package core_test

import (
	"flag"
	"fmt"
	"math/rand"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"zsched/core"
	"zsched/vertex"

	"golang.org/x/sys/unix"
)

var bigMemory = flag.Bool("memory", false, "measure heap per in-core recipient at 1 M recipients (slow)")

// scaleConfig is the drain benchmark's clause.
const scaleConfig = `
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
maxring = 16
maxthr = 20
overfeed = 8
`

// queue is a driver for the core alone: messages of rcpts recipients,
// perHost of them at each of consecutive domains of domains (1 per domain
// is the drain benchmark's shape), and agents that deliver every job line
// at once.
type queue struct {
	s       *core.Core
	now     time.Time
	rcpts   int
	perHost int
	domains int
	next    int64        // next inum
	pending []core.Write // job lines written and not yet answered
	done    int          // jobs answered
	report  []byte       // scratch for report lines
}

func newQueue(tb testing.TB, order string, rcpts, perHost, domains int, keys ...string) *queue {
	c := cfg(tb, scaleConfig+"order = \""+order+"\"\n"+strings.Join(keys, ""))
	return &queue{
		s:       core.New(c, nil, rand.New(rand.NewSource(1))),
		now:     time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		rcpts:   rcpts,
		perHost: perHost,
		domains: domains,
		next:    1000,
	}
}

// arrive queues one message.
func (q *queue) arrive() {
	inum := q.next
	q.next++
	a := core.Arrival{Inum: inum, Path: strconv.FormatInt(inum, 10), ID: strconv.FormatInt(inum, 10), Arrival: q.now}
	hosts := q.rcpts / q.perHost
	for h := range hosts {
		d := (int(inum)*hosts + h) % q.domains
		host := "d" + strconv.Itoa(d) + ".test"
		g := core.Group{Channel: "smtp", Host: host}
		for r := range q.perHost {
			i := h*q.perHost + r
			g.Rcpts = append(g.Rcpts, vertex.Rcpt{Offset: q.offset(i), User: fmt.Sprintf("u%d.%d@%s", inum, i, host)})
		}
		a.Groups = append(a.Groups, g)
	}
	if err := q.s.Arrive(q.now, a); err != nil {
		panic(err)
	}
}

// offset is the r line offset of recipient i of a message.
func (q *queue) offset(i int) int64 { return int64(100 + 40*i) }

// answer reports every recipient of the job line "inum\thost" delivered,
// working out which they are from the line alone, so that the driver's
// cost does not grow with the queue.
func (q *queue) answer(w core.Write) {
	path, host, _ := strings.Cut(w.Line, "\t")
	inum, _ := strconv.Atoi(path)
	d, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(host, "d"), ".test"))
	hosts := q.rcpts / q.perHost
	h := ((d-inum*hosts)%q.domains + q.domains) % q.domains
	for r := range q.perHost {
		b := append(q.report[:0], path...)
		b = append(b, '/')
		b = strconv.AppendInt(b, q.offset(h*q.perHost+r), 10)
		b = append(b, "\t\tok3 delivered"...)
		q.report = b
		q.s.AgentLine(q.now, w.Agent, string(b))
	}
	q.s.AgentLine(q.now, w.Agent, "#hungry")
	q.done++
}

// step carries out the core's actions: new agents say #hungry, and one
// written job line (the oldest) is answered.
func (q *queue) step() {
	q.now = q.now.Add(time.Microsecond)
	r := q.s.Ready()
	for _, sp := range r.Spawns {
		q.s.AgentLine(q.now, sp.Agent, "#hungry")
	}
	for _, w := range r.Writes {
		if w.Line != "#idle" {
			q.pending = append(q.pending, w)
		}
	}
	q.s.Advance()
	if len(q.pending) == 0 {
		r := q.s.Ready()
		if len(r.Writes)+len(r.Spawns) == 0 {
			panic("nothing to do")
		}
		q.pending = append(q.pending, r.Writes...)
		for _, sp := range r.Spawns {
			q.s.AgentLine(q.now, sp.Agent, "#hungry")
		}
		q.s.Advance()
		return
	}
	w := q.pending[0]
	q.pending[0] = core.Write{}
	q.pending = q.pending[1:]
	q.answer(w)
}

// BenchmarkDispatch measures the core's cost per vertex dispatched — a
// job line written, its report taken, the agent fed again — with 10 k and
// with 1 M recipients queued (messages of 5 recipients at 5 of 1000
// domains, the drain benchmark's shape): the queue is filled, then a slice
// of it drained, refilled (untimed) whenever half of it has gone. The two
// figures should be within 1.5× of each other: every cost on the path is
// constant or logarithmic in the queue.
func BenchmarkDispatch(b *testing.B) {
	for _, order := range []string{"preemptive", "fifo"} {
		for _, n := range []int{10_000, 1_000_000} {
			b.Run("order="+order+"/queued="+strconv.Itoa(n), func(b *testing.B) {
				benchDispatch(b, order, n)
			})
		}
		// Each message's recipients to one agent after another (its
		// borrowed sessions), against the rows above at 10 000.
		b.Run("order="+order+"/feed=message/queued=10000", func(b *testing.B) {
			benchDispatch(b, order, 10_000, "feed = \"message\"\n")
		})
	}
}

func benchDispatch(b *testing.B, order string, n int, keys ...string) {
	q := newQueue(b, order, 5, 1, 1000, keys...)
	fill := func() {
		for q.queued() < n {
			q.arrive()
		}
	}
	fill()
	// Warm up: every agent started and fed.
	for range 1000 {
		q.step()
	}
	fill()
	// The machine is shared: besides wall time, report the CPU time of
	// this thread alone, which other processes inflate less (GC work on
	// other threads is not in it).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	b.ResetTimer()
	t0 := threadCPU()
	for done := 0; done < b.N; done++ {
		if q.queued() < n/2 {
			cpu += threadCPU() - t0
			b.StopTimer()
			fill()
			b.StartTimer()
			t0 = threadCPU()
		}
		q.step()
	}
	cpu += threadCPU() - t0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// queued is how many recipients wait in core.
func (q *queue) queued() int { return int(q.next-1000)*q.rcpts - q.done*q.perHost }

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapPerRecipient queues n recipients in the benchmark's shape and
// returns the Go heap they hold, per recipient, after a GC.
func heapPerRecipient(tb testing.TB, n, rcpts, perHost int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	q := newQueue(tb, "preemptive", rcpts, perHost, 1000)
	for range n / q.rcpts {
		q.arrive()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(q.s)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// TestHeapPerRecipient measures the Go heap per in-core recipient (DESIGN
// §8 budgets 300 bytes) for two shapes: the drain benchmark's, where each
// recipient is its own vertex (the worst case: every recipient pays for a
// vertex and its place in the ring's job), and messages of 10 recipients
// at 2 domains. Quick at 50 k recipients; -memory measures at 1 M, the
// issue's figure, where the budget is the bound. The bounds are regression
// guards a few percent above what the data structures cost today (at 1 M:
// 280 and 134 bytes; at 50 k the thousand threads' fixed cost adds some
// 20). Most of the 280: the vertex 144 (its one recipient inline), the
// ring's job 45 and the message 22 (one each per message of 5), the
// thread heap's slot 16-20, the recipient's address string 24.
func TestHeapPerRecipient(t *testing.T) {
	n := 50_000
	if *bigMemory {
		n = 1_000_000
	}
	for _, tc := range []struct {
		rcpts, perHost int
		bound, bound1M float64
	}{
		{5, 1, 325, 300},
		{10, 5, 165, 150},
	} {
		bound := tc.bound
		if *bigMemory {
			bound = tc.bound1M
		}
		per := heapPerRecipient(t, n, tc.rcpts, tc.perHost)
		t.Logf("%d recipients in core, messages of %d recipients, %d per destination: %.0f bytes of heap per recipient",
			n, tc.rcpts, tc.perHost, per)
		if per > bound {
			t.Errorf("%.0f bytes of heap per in-core recipient, bound %.0f", per, bound)
		}
	}
}

package core_test

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/config"
	"zsched/core"
	"zsched/report"
	"zsched/sim"
	"zsched/vertex"
)

// The feed order (DESIGN §7) seen through the whole core: a ring served by
// one agent (maxring = 1) whose recipients each sit at their own host, so
// that every vertex is one Postfix entry and the agent's job lines are the
// README's delivery sequence.

const oneAgent = `
[[clause]]
select = "smtp/*"
command = "sink"
maxring = 1
maxthr = 1
initial_concurrency = 1
`

// unit answers every job after one simulated second: a job line is a slot.
func unit(j sim.Job) sim.Response {
	r := sim.Sink(j)
	r.Delay = time.Second
	return r
}

// rcpts returns n recipients of message tag, each at its own host.
func rcpts(tag string, n int) []string {
	rs := make([]string, n)
	for i := range rs {
		rs[i] = fmt.Sprintf("smtp/%s-%d.test/u%d", tag, i, i)
	}
	return rs
}

// sequence returns the messages of s's job lines, numbered 1, 2, … in the
// order they were enqueued.
func sequence(s *sim.Sim) []int {
	var seq []int
	for _, j := range s.JobLog {
		n, _ := strconv.ParseInt(j.Path, 10, 64)
		seq = append(seq, int(n-1000))
	}
	return seq
}

func digits(seq []int) string {
	var b strings.Builder
	for _, n := range seq {
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

func TestReadmeDeliverySequencesThroughTheCore(t *testing.T) {
	// SCHEDULER_README §"How the preemption works": a ten-recipient mail
	// followed by two two-recipient mails at slot cost 2: 11112211113311
	// when the preemption waits for all the slots (no loan, no discount),
	// 11221111331111 when it waits for 50 % (discount 50, no loan).
	for _, c := range []struct{ knobs, want string }{
		{"delivery_slot_cost = 2\ndelivery_slot_loan = 0\ndelivery_slot_discount = 0\n", "11112211113311"},
		{"delivery_slot_cost = 2\ndelivery_slot_loan = 0\ndelivery_slot_discount = 50\n", "11221111331111"},
		{"delivery_slot_cost = 0\n", "11111111112233"},
		{"order = \"fifo\"\n", "11111111112233"},
	} {
		s := sim.New(cfg(t, oneAgent+c.knobs), unit, 1)
		s.Enqueue(rcpts("a", 10)...)
		s.Enqueue(rcpts("b", 2)...)
		s.Enqueue(rcpts("c", 2)...)
		run(t, s, time.Hour)
		if got := digits(sequence(s)); got != c.want {
			t.Errorf("%q: job lines %s, want %s", c.knobs, got, c.want)
		}
	}
}

// completions returns, per message (1-based), the second its last job
// line ended, counted from the start.
func completions(s *sim.Sim) map[int]int {
	done := map[int]int{}
	for _, j := range s.JobLog {
		n, _ := strconv.ParseInt(j.Path, 10, 64)
		done[int(n-1000)] = int(j.At.Sub(sim.Epoch)/time.Second) + 1
	}
	return done
}

func TestBulkAndSmallMessagesWithDefaultKnobs(t *testing.T) {
	// The README's 1000 / 100 / 10 / 1 recipients, default knobs (cost 5,
	// loan 3, discount 50, minimum 3). FIFO delivers them at slots 1000,
	// 1100, 1110, 1111; preemption slips the small ones past the bulk one,
	// whose completion stays within the inflation bound k/(k-1).
	fifo := sim.New(cfg(t, oneAgent+"delivery_slot_cost = 0\n"), unit, 1)
	pre := sim.New(cfg(t, oneAgent), unit, 1)
	for _, s := range []*sim.Sim{fifo, pre} {
		for i, n := range []int{1000, 100, 10, 1} {
			s.Enqueue(rcpts(fmt.Sprint("m", i), n)...)
		}
		run(t, s, 10*time.Hour)
	}
	f, p := completions(fifo), completions(pre)
	t.Logf("completion slot (FIFO → preemptive): 1000 rcpts %d → %d, 100 rcpts %d → %d, 10 rcpts %d → %d, 1 rcpt %d → %d",
		f[1], p[1], f[2], p[2], f[3], p[3], f[4], p[4])
	if f[1] != 1000 || f[4] != 1111 {
		t.Fatalf("FIFO completions %v", f)
	}
	if !(p[4] < p[3] && p[3] < p[2] && p[2] < p[1]) {
		t.Errorf("the small messages do not finish first: %v", p)
	}
	if p[4] > 10 || p[3] > 100 {
		t.Errorf("the 1- and 10-recipient messages finish late: %v", p)
	}
	if limit := f[1] * 5 / 4; p[1] > limit {
		t.Errorf("bulk message done at %d, over the inflation bound %d", p[1], limit)
	}
}

func TestBlockedJobIsSkipped(t *testing.T) {
	// Two agents, every destination takes one at a time. Message 1 holds
	// slow.test for 100 s; message 3 also goes to slow.test, so while
	// message 1 is there message 3 is a blocker: it is not chosen to
	// preempt the bulk message 2 although it is older than message 4, which
	// preempts instead. Message 3 is fed the moment slow.test frees, and
	// slow.test sees its messages in order.
	c := cfg(t, `
[[clause]]
select = "smtp/*"
command = "sink"
maxring = 2
maxthr = 1
initial_concurrency = 1
delivery_slot_cost = 2
delivery_slot_loan = 0
delivery_slot_discount = 0
minimum_delivery_slots = 1
`)
	s := sim.New(c, func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Delay = time.Second
		if j.Host == "slow.test" && j.Msg.Inum == 1001 {
			r.Delay = 100 * time.Second
		}
		return r
	}, 1)
	s.Enqueue("smtp/slow.test/a")
	s.Enqueue(rcpts("bulk", 30)...)
	s.Enqueue("smtp/slow.test/c")
	s.Enqueue("smtp/d.test/d")
	run(t, s, time.Hour)
	var slow []int
	var other []int
	at := map[int]time.Duration{}
	for i, j := range s.JobLog {
		n := sequence(s)[i]
		if j.Host == "slow.test" {
			slow = append(slow, n)
		} else {
			other = append(other, n)
		}
		at[n] = j.At.Sub(sim.Epoch)
	}
	if fmt.Sprint(slow) != "[1 3]" {
		t.Errorf("slow.test fed %v, want [1 3]", slow)
	}
	if at[3] != 100*time.Second {
		t.Errorf("message 3 fed at %v, want the moment slow.test frees (100s)", at[3])
	}
	if len(other) < 3 || other[2] != 4 {
		t.Errorf("the other agent's job lines %v: message 4 should preempt the bulk message at its third slot", other)
	}
}

// arrival is one message of a random workload: it is enqueued once after
// job lines have been written (or, when the queue runs dry first, after
// an idle gap).
type arrival struct {
	after int
	size  int
}

func workload(rng *rand.Rand, msgs int) []arrival {
	var w []arrival
	total := 0
	for i := 0; i < msgs; i++ {
		size := 1 + rng.Intn(4)
		switch x := rng.Intn(20); {
		case x == 0:
			size = 60 + rng.Intn(120)
		case x < 4:
			size = 5 + rng.Intn(30)
		}
		after := 0
		if total > 0 {
			after = rng.Intn(total + total/4 + 1)
		}
		if len(w) > 0 && after < w[len(w)-1].after {
			after = w[len(w)-1].after
		}
		w = append(w, arrival{after, size})
		total += size
	}
	return w
}

// played is what drive recorded: each message's arrival second and the
// number of job lines written before it arrived.
type played struct {
	at    []int64
	after []int
}

// drive runs s on workload w: one agent, one second per job line.
func drive(t *testing.T, s *sim.Sim, w []arrival) played {
	t.Helper()
	var p played
	next := 0
	for {
		for next < len(w) && (w[next].after <= len(s.JobLog) || s.Core.Messages() == 0) {
			if s.Core.Messages() == 0 && w[next].after > len(s.JobLog) {
				// Nothing queued: time passes idle until it comes.
				s.Now = s.Now.Add(time.Duration(1+w[next].after%3) * time.Second)
			}
			p.at = append(p.at, int64(s.Now.Sub(sim.Epoch)/time.Second))
			p.after = append(p.after, len(s.JobLog))
			s.Enqueue(rcpts(fmt.Sprint("m", next), w[next].size)...)
			next++
		}
		n := len(s.JobLog)
		for len(s.JobLog) == n && s.Core.Messages() > 0 && s.Err() == nil && s.Step() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if len(s.JobLog) == n && next == len(w) {
			break
		}
	}
	s.Run(s.Now.Sub(sim.Epoch) + time.Hour)
	if p := s.Pending(); len(p) > 0 {
		t.Fatalf("%d recipients never delivered", len(p))
	}
	return p
}

// postfix is the naive reference: qmgr_job.c's job list, preemption and
// slot counting transcribed with slices and linear scans, for one agent
// whose every entry is at its own host (no blockers: the current job is
// always the first on the list). It returns the job lines "msg@host" and
// the second of each.
func postfix(w []arrival, p played, k config.Clause) ([]string, []int64) {
	type job struct {
		n, size, next         int
		q                     int64
		selected, avail, used int
		level                 int
		parent                *job
		children              []*job
	}
	var list []*job
	cost, loan, factor, minSlots := k.DeliverySlotCost, k.DeliverySlotLoan, 100-k.DeliverySlotDiscount, k.MinimumDeliverySlots
	pop := func(j *job) {
		par := j.parent
		if par != nil && j.level == par.level+1 {
			par.avail -= j.used * cost
		}
		if par != nil {
			for i, c := range par.children {
				if c == j {
					par.children = append(par.children[:i], par.children[i+1:]...)
					break
				}
			}
			j.parent = nil
		}
		for _, c := range j.children {
			c.parent = par
			if par != nil {
				par.children = append(par.children, c)
			}
		}
		j.children = nil
		j.level = 0
	}
	preempt := func(cur *job, t int64) *job {
		if cur.avail <= 0 || cur.size < minSlots*cost {
			return cur
		}
		maxSlots := (cur.size - cur.selected + cur.avail) / cost
		var best *job
		for _, j := range list[1:] {
			needed := j.size - j.selected
			if len(j.children) > 0 || needed <= 0 || needed > maxSlots {
				continue
			}
			if best == nil || (t-j.q+1)*int64(best.size) > (t-best.q+1)*int64(j.size) {
				best = j
			}
		}
		if best == nil {
			return cur
		}
		expected := best.size - best.selected
		if float64(cur.avail/cost+loan) < float64(expected*factor)/100 {
			return cur
		}
		if best.level > 0 {
			pop(best)
		}
		for i, j := range list {
			if j == best {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		list = append([]*job{best}, list...) // cur is the head
		best.parent = cur
		cur.children = append(cur.children, best)
		best.level = cur.level + 1
		cur.avail -= expected * cost
		best.used = -expected
		return best
	}
	var lines []string
	var times []int64
	next := 0
	var clock int64
	for picks := 0; ; picks++ {
		for next < len(w) && (p.after[next] <= picks || len(list) == 0) {
			list = append(list, &job{n: next + 1, size: w[next].size, q: p.at[next]})
			if p.at[next] > clock {
				clock = p.at[next]
			}
			next++
		}
		if len(list) == 0 {
			return lines, times
		}
		cur := list[0]
		if cost >= 2 {
			cur = preempt(cur, clock)
		}
		lines = append(lines, fmt.Sprintf("%d@m%d-%d.test", cur.n, cur.n-1, cur.next))
		times = append(times, clock)
		cur.next++
		cur.selected++
		cur.avail++
		cur.used++
		if cur.next == cur.size {
			if cur.level > 0 {
				pop(cur)
			}
			for _, c := range cur.children {
				c.parent = nil
			}
			cur.children = nil
			list = list[1:]
		}
		clock++
	}
}

func TestMatchesPostfixTranscription(t *testing.T) {
	runs := 40
	if testing.Short() {
		runs = 10
	}
	preempted := 0
	for run := 0; run < runs; run++ {
		rng := rand.New(rand.NewSource(int64(run)))
		knobs := fmt.Sprintf("delivery_slot_cost = %d\ndelivery_slot_loan = %d\ndelivery_slot_discount = %d\nminimum_delivery_slots = %d\n",
			[]int{2, 3, 5, 8}[rng.Intn(4)], rng.Intn(4), []int{0, 50, 100}[rng.Intn(3)], rng.Intn(4))
		c := cfg(t, oneAgent+knobs)
		w := workload(rng, 20+rng.Intn(40))
		s := sim.New(c, unit, 1)
		s.Check = run%4 == 0
		p := drive(t, s, w)
		want, at := postfix(w, p, c.Clauses[0])
		if len(s.JobLog) != len(want) {
			t.Fatalf("run %d (%s): %d job lines, the transcription %d", run, knobs, len(s.JobLog), len(want))
		}
		fifo := true
		for i, j := range s.JobLog {
			n, _ := strconv.ParseInt(j.Path, 10, 64)
			got := fmt.Sprintf("%d@%s", n-1000, j.Host)
			if got != want[i] || j.At.Sub(sim.Epoch) != time.Duration(at[i])*time.Second {
				t.Fatalf("run %d (%s): job line %d is %s at %v, the transcription says %s at %ds",
					run, strings.ReplaceAll(knobs, "\n", " "), i+1, got, j.At.Sub(sim.Epoch), want[i], at[i])
			}
			if i > 0 && n < mustInum(s.JobLog[i-1].Path) {
				fifo = false
			}
		}
		if !fifo {
			preempted++
		}
	}
	if preempted < runs/2 {
		t.Errorf("only %d of %d runs saw any preemption", preempted, runs)
	}
}

func mustInum(p string) int64 {
	n, _ := strconv.ParseInt(p, 10, 64)
	return n
}

func TestInflationBound(t *testing.T) {
	// SCHEDULER_README: if one slot is set free for every k slots used,
	// a job's delivery is inflated by at most k/(k-1), however deep the
	// preemption recurses. With one agent FIFO delivers a job's E entries
	// in E consecutive slots; here every job's span, first job line to
	// last, must stay within E·k/(k-1) over random arrivals — for the
	// bound itself (no loan, no discount) and for the default knobs.
	runs := 30
	if testing.Short() {
		runs = 8
	}
	for _, knobs := range []string{
		"delivery_slot_loan = 0\ndelivery_slot_discount = 0\nminimum_delivery_slots = 0\n",
		"",
	} {
		for _, k := range []int{2, 3, 5} {
			worst, worstAt := 0.0, ""
			for run := 0; run < runs; run++ {
				rng := rand.New(rand.NewSource(int64(run)))
				w := workload(rng, 20+rng.Intn(40))
				s := sim.New(cfg(t, oneAgent+fmt.Sprintf("delivery_slot_cost = %d\n", k)+knobs), unit, 1)
				drive(t, s, w)
				first, last := map[int]int{}, map[int]int{}
				for i, n := range sequence(s) {
					if _, ok := first[n]; !ok {
						first[n] = i
					}
					last[n] = i
				}
				for i, a := range w {
					n := i + 1
					span := last[n] - first[n] + 1
					if span*(k-1) > a.size*k {
						t.Errorf("k=%d %q run %d: message %d (%d entries) spans %d slots, over %d·%d/%d",
							k, knobs, run, n, a.size, span, a.size, k, k-1)
					}
					if r := float64(span) / float64(a.size); a.size >= 10 && r > worst {
						worst, worstAt = r, fmt.Sprintf("%d entries over %d slots", a.size, span)
					}
				}
			}
			t.Logf("k=%d %q: worst span/entries %.2f (%s), bound %.2f", k, strings.TrimSpace(strings.ReplaceAll(knobs, "\n", " ")), worst, worstAt, float64(k)/float64(k-1))
		}
	}
}

func TestRandomOrderIsSeededShuffle(t *testing.T) {
	order := func(seed int64) string {
		s := sim.New(cfg(t, oneAgent+"order = \"random\"\n"), unit, seed)
		for i := 0; i < 30; i++ {
			s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i))
		}
		run(t, s, time.Hour)
		if p := s.Pending(); len(p) > 0 {
			t.Fatalf("seed %d: %d recipients left", seed, len(p))
		}
		return fmt.Sprint(sequence(s))
	}
	a, b, c := order(1), order(1), order(2)
	if a != b {
		t.Errorf("same seed, different orders:\n%s\n%s", a, b)
	}
	if a == c {
		t.Errorf("seeds 1 and 2 give the same order %s", a)
	}
	fifo := make([]int, 30)
	for i := range fifo {
		fifo[i] = i + 1
	}
	if a == fmt.Sprint(fifo) {
		t.Errorf("random order is FIFO: %s", a)
	}
}

func TestAgeOrderFeedsOldestFileFirst(t *testing.T) {
	// Message 1 keeps the only agent busy while messages 2–5 are picked
	// up; their files are older the later they come. ageorder feeds the
	// oldest file first, fifo the first picked up.
	for _, c := range []struct{ order, want string }{
		{"age", "[1 5 4 3 2]"},
		{"fifo", "[1 2 3 4 5]"},
	} {
		s := sim.New(cfg(t, oneAgent+"order = \""+c.order+"\"\n"), unit, 1)
		s.Enqueue("smtp/first.test/u")
		for i := 2; i <= 5; i++ {
			s.Add(&sim.Msg{
				Arrival: sim.Epoch.Add(-time.Duration(i) * time.Hour),
				Rcpts:   []*sim.Rcpt{{Offset: 100, Channel: "smtp", Host: fmt.Sprintf("h%d.test", i), User: "u", Status: ' '}},
			})
		}
		run(t, s, time.Hour)
		if got := fmt.Sprint(sequence(s)); got != c.want {
			t.Errorf("order %s: %s, want %s", c.order, got, c.want)
		}
	}
}

// bench is a scheduler fed by a minimal synchronous driver: agents answer
// every job line at once with ok for each recipient and #hungry, and every
// message that completes is replaced by one of the same shape at fresh
// hosts, so the number of queued vertices stays where it started.
type bench struct {
	s       *core.Core
	now     time.Time
	rng     *rand.Rand
	hosts   int
	next    int64
	shapes  map[int64]int              // inum → vertices
	offsets map[int64]map[string]int64 // inum → host → offset
	lines   []core.Write
	fed     int
}

func newBench(b *testing.B, vertices, hosts int) *bench {
	c := cfg(b, `
[[clause]]
select = "smtp/*"
command = "sink"
maxring = 4
maxthr = 2
initial_concurrency = 1
`)
	x := &bench{
		s:       core.New(c, nil, rand.New(rand.NewSource(1))),
		now:     sim.Epoch,
		rng:     rand.New(rand.NewSource(2)),
		hosts:   hosts,
		shapes:  map[int64]int{},
		offsets: map[int64]map[string]int64{},
	}
	for n := 0; n < vertices; {
		size := 1 + x.rng.Intn(4)
		switch r := x.rng.Intn(100); {
		case r == 0:
			size = 50 + x.rng.Intn(150)
		case r < 10:
			size = 5 + x.rng.Intn(20)
		}
		size = min(size, vertices-n)
		x.arrive(size)
		n += size
	}
	x.drain()
	return x
}

func (x *bench) arrive(size int) {
	x.next++
	inum := x.next
	a := core.Arrival{Inum: inum, Path: strconv.FormatInt(inum, 10), Arrival: x.now}
	offs := map[string]int64{}
	for i := 0; i < size; i++ {
		h := "h" + strconv.Itoa(x.rng.Intn(x.hosts)) + ".test"
		if _, dup := offs[h]; dup {
			continue
		}
		offs[h] = int64(100 + 40*i)
		a.Groups = append(a.Groups, core.Group{Channel: "smtp", Host: h, Rcpts: []vertex.Rcpt{{Offset: offs[h], User: "u"}}})
	}
	x.shapes[inum] = size
	x.offsets[inum] = offs
	if err := x.s.Arrive(x.now, a); err != nil {
		panic(err)
	}
}

// drain carries out the core's actions until it has nothing more to say;
// it stops early once stop job lines were fed (stop < 0: never).
func (x *bench) step(stop int) {
	for {
		r := x.s.Ready()
		for _, sp := range r.Spawns {
			x.lines = append(x.lines, core.Write{Agent: sp.Agent, Line: "#start"})
		}
		x.lines = append(x.lines, r.Writes...)
		for _, c := range r.Completes {
			size := x.shapes[c.Inum]
			delete(x.shapes, c.Inum)
			delete(x.offsets, c.Inum)
			x.arrive(size)
		}
		x.s.Advance()
		if len(x.lines) == 0 || (stop >= 0 && x.fed >= stop) {
			return
		}
		w := x.lines[0]
		x.lines = x.lines[1:]
		x.now = x.now.Add(time.Millisecond)
		switch {
		case w.Line == "#start", w.Line == "#idle":
			x.s.AgentLine(x.now, w.Agent, "#hungry")
		case w.Line == "":
		default:
			path, host, _ := strings.Cut(w.Line, "\t")
			inum, _ := strconv.ParseInt(path, 10, 64)
			x.fed++
			l := report.Line{Inum: inum, Offset: x.offsets[inum][host], Status: report.OK, Text: "ok"}
			x.s.AgentLine(x.now, w.Agent, l.String())
			x.s.AgentLine(x.now, w.Agent, "#hungry")
		}
	}
}

func (x *bench) drain() { x.step(0) }

func BenchmarkPickPerSlot(b *testing.B) {
	// One slot = one job line: the preemption attempt and the pick, the
	// agent's report and #hungry, and (amortized) one vertex arriving to
	// keep the queue at its size. cpu-ns/op is the process's CPU time per
	// slot, steadier than wall time on a shared machine.
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		var x *bench
		b.Run(fmt.Sprintf("vertices=%d", n), func(b *testing.B) {
			if x == nil {
				x = newBench(b, n, 10_000)
			}
			cpu0 := cpuTime()
			b.ResetTimer()
			x.step(x.fed + b.N)
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package core_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/report"
	"zsched/sim"
	"zsched/vertex"
)

// logBuf is a core logger's output, kept for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the logged lines that contain every one of subs.
func (l *logBuf) lines(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// logged replaces a fresh simulation's core with one that logs into a
// buffer (sim.New's logs nowhere), with the core's observations as
// sim.Format writes them.
func logged(s *sim.Sim, c *config.Config, seed int64) *logBuf {
	buf := &logBuf{}
	log := hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Debug})
	s.Core = core.New(c, log, rand.New(rand.NewSource(seed)))
	s.OnReady = func(r *core.Ready) {
		buf.Write([]byte(sim.Format(&core.Ready{Observations: r.Observations})))
	}
	return buf
}

// TestBrokenTransportIsThrottled is issue 16's fork storm in simulation: an
// agent that dies on its first job, 300 messages to 300 destinations, 30
// seconds. Before: one agent per recipient (300 starts) and the windows
// grew. Now: the first batch fails, the ring waits 1s, then probes one agent
// at a time with a doubling back-off; the failures are negative feedback;
// WHY and the ring view say why; an agent that works clears the throttle
// and everything goes.
func TestBrokenTransportIsThrottled(t *testing.T) {
	c := cfg(t, smtp)
	broken := true
	s := sim.New(c, func(j sim.Job) sim.Response {
		if broken {
			return sim.Response{Crash: true}
		}
		return sim.Sink(j)
	}, 1)
	log := logged(s, c, 1)
	s.Check = true
	for i := range 300 {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u%d", i, i))
	}
	s.Advance(30 * time.Second)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	// The first agent of each id is when it was started.
	started := map[int]time.Duration{}
	for _, l := range s.JobLog {
		if _, ok := started[l.Agent]; !ok {
			started[l.Agent] = l.At.Sub(sim.Epoch)
		}
	}
	var probes []time.Duration
	for _, at := range started {
		if at > 0 {
			probes = append(probes, at)
		}
	}
	sortDurations(probes)
	n := s.Core.Counters().Spawned
	t.Logf("30s: %d agents started (%d at once, then probes at %v), %d throttles", n, int(n)-len(probes), probes, s.Core.Counters().Throttles)
	if n > 10+4 {
		t.Fatalf("%d agents started in 30s for a transport that dies at once, want the first batch (maxring 10) and 4 probes", n)
	}
	if want := []time.Duration{time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second}; fmt.Sprint(probes) != fmt.Sprint(want) {
		t.Errorf("probes at %v, want %v (back-off 1s, doubling)", probes, want)
	}
	if got := s.Core.Counters().Throttles; got != 5 {
		t.Errorf("%d throttles, want 5 (the first failure, then each probe)", got)
	}
	if got := len(log.lines("agent failed; its transport is throttled already")); got != 9 {
		t.Errorf("%d failures noted under a running throttle, want 9 (the rest of the first batch)", got)
	}
	// Negative feedback, never growth.
	for _, r := range s.Core.Rings(s.Now) {
		for _, th := range r.Threads {
			if th.Window > 2 {
				t.Errorf("%s: window %d grew past its initial 2 on agents that died", th.Host, th.Window)
			}
		}
		if !r.Throttled.After(s.Now) || !strings.Contains(r.ThrottleText, "with 1 jobs outstanding") {
			t.Errorf("ring view: throttled until %v (%q), want a back-off running at %v", r.Throttled, r.ThrottleText, s.Now)
		}
	}
	if g := s.Core.Gauges(s.Now, 0); g.Throttled != 1 {
		t.Errorf("gauge: %d rings throttled, want 1", g.Throttled)
	}
	// A recipient no agent has tried waits for the transport.
	mv, err := s.Core.Message(s.Now, "1300")
	if err != nil {
		t.Fatal(err)
	}
	if w := mv.Vertices[0].Why; w.Reason != core.ReasonTransport || !strings.HasPrefix(w.String(), "transport unavailable until ") {
		t.Errorf("WHY: %v %q, want transport unavailable until …", w.Reason, w.String())
	}

	// The command is fixed: the next probe works and the ring opens.
	broken = false
	run(t, s, 3*time.Hour)
	checkAllDelivered(t, s, 300)
	if len(log.lines("transport works ")) != 1 {
		t.Error("the throttle was not cleared by the agent that worked")
	}
	for _, r := range s.Core.Rings(s.Now) {
		if !r.Throttled.IsZero() || r.Probing {
			t.Errorf("ring still throttled after an agent worked: %+v", r)
		}
	}
}

func sortDurations(d []time.Duration) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

// driven is a core driven by hand, for exits no simulated agent makes.
type driven struct {
	t   *testing.T
	s   *core.Core
	now time.Time
}

func driveCore(t *testing.T, doc string) *driven {
	log := hclog.New(&hclog.LoggerOptions{Output: testLogWriter{t}, Level: hclog.Debug})
	return &driven{t: t, s: core.New(cfg(t, doc), log, rand.New(rand.NewSource(1))), now: sim.Epoch}
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// ready takes the core's actions (copied: the slices are the core's again
// after Advance).
func (d *driven) ready() core.Ready {
	r := d.s.Ready()
	c := core.Ready{
		Spawns:    append([]core.Spawn(nil), r.Spawns...),
		Writes:    append([]core.Write(nil), r.Writes...),
		Stops:     append([]core.Stop(nil), r.Stops...),
		Outcomes:  append([]core.Outcome(nil), r.Outcomes...),
		Throttles: append([]core.Throttle(nil), r.Throttles...),
		Rereads:   append([]core.Reread(nil), r.Rereads...),
	}
	// The files are as the test left them: no agent marked a recipient,
	// so a re-read finds what the core holds still pending.
	for _, rr := range r.Rereads {
		m, err := d.s.Message(d.now, fmt.Sprint(rr.Inum))
		if err != nil {
			d.s.Reread(d.now, rr.Inum, nil)
			continue
		}
		a := core.Arrival{Inum: m.Inum, Path: m.Path, ID: m.ID, Arrival: m.Arrival}
		for _, v := range m.Vertices {
			a.Groups = append(a.Groups, core.Group{Channel: v.Channel, Host: v.Host, Rcpts: v.Rcpts})
		}
		d.s.Reread(d.now, rr.Inum, &a)
	}
	d.s.Advance()
	return c
}

// TestAgentDeadBeforeHungryThrottlesItsRing: exiting before the first
// #hungry (a usage error, a missing library) and failing to start are
// transport failures even with nothing fed yet; a killed agent is not.
func TestAgentDeadBeforeHungryThrottlesItsRing(t *testing.T) {
	d := driveCore(t, smtp+"transport_retry_time = \"3s\"\n")
	arrive := func(inum int64, host string) {
		a := core.Arrival{Inum: inum, Path: fmt.Sprint(inum), ID: fmt.Sprint(inum), Arrival: d.now,
			Groups: []core.Group{{Channel: "smtp", Host: host, Rcpts: []vertex.Rcpt{{Offset: 100, User: "u@" + host}}}}}
		if err := d.s.Arrive(d.now, a); err != nil {
			t.Fatal(err)
		}
	}
	arrive(1001, "a.test")
	r := d.ready()
	if len(r.Spawns) != 1 {
		t.Fatalf("%d spawns, want 1", len(r.Spawns))
	}
	first := r.Spawns[0].Agent
	d.s.AgentExited(d.now, first, "agent exited: exit status 64")
	r = d.ready()
	if len(r.Throttles) != 1 || r.Throttles[0].Agent != first || r.Throttles[0].Backoff != time.Second ||
		!strings.Contains(r.Throttles[0].Reason, "exit status 64 before its first #hungry") {
		t.Fatalf("throttles %+v, want one of 1s for agent %d before its first #hungry", r.Throttles, first)
	}
	if len(r.Spawns) != 0 {
		t.Fatalf("a new agent was started at once: %+v", r.Spawns)
	}
	// New mail does not reopen the ring. (More destinations: each probe
	// below takes one job, which then waits for its retry time.)
	arrive(1002, "b.test")
	for i := range 8 {
		arrive(int64(2001+i), fmt.Sprintf("h%d.test", i))
	}
	if r = d.ready(); len(r.Spawns) != 0 {
		t.Fatalf("an arrival started an agent under the throttle: %+v", r.Spawns)
	}
	if w := d.s.NextWakeup(); !w.Equal(d.now.Add(time.Second)) {
		t.Fatalf("next wakeup %v, want the end of the back-off %v", w, d.now.Add(time.Second))
	}
	// The back-off ends: one probe, no more, though two threads want one.
	d.now = d.now.Add(time.Second)
	d.s.Tick(d.now)
	r = d.ready()
	if len(r.Spawns) != 1 {
		t.Fatalf("%d agents started at the end of the back-off, want one probe (nine threads want one)", len(r.Spawns))
	}
	probe := r.Spawns[0].Agent
	// It cannot even be started: throttled again, twice as long.
	d.s.AgentExited(d.now, probe, "start failed: exec: no such file")
	r = d.ready()
	if len(r.Throttles) != 1 || r.Throttles[0].Backoff != 2*time.Second {
		t.Fatalf("throttles %+v, want one of 2s", r.Throttles)
	}
	// Up to transport_retry_time.
	for _, want := range []time.Duration{3 * time.Second, 3 * time.Second} {
		d.now = d.now.Add(d.s.NextWakeup().Sub(d.now))
		d.s.Tick(d.now)
		r = d.ready()
		if len(r.Spawns) != 1 {
			t.Fatalf("%d spawns at the end of a back-off", len(r.Spawns))
		}
		d.s.AgentExited(d.now, r.Spawns[0].Agent, "agent exited")
		if r = d.ready(); len(r.Throttles) != 1 || r.Throttles[0].Backoff != want {
			t.Fatalf("throttles %+v, want one of %v", r.Throttles, want)
		}
	}
	// A probe that works clears the throttle: the other thread gets its
	// agent at once.
	d.now = d.s.NextWakeup()
	d.s.Tick(d.now)
	r = d.ready()
	if len(r.Spawns) != 1 || len(r.Writes) != 1 {
		t.Fatalf("spawns %+v writes %+v, want one probe with one job", r.Spawns, r.Writes)
	}
	probe = r.Spawns[0].Agent
	inum, host, _ := strings.Cut(r.Writes[0].Line, "\t")
	d.s.AgentLine(d.now, probe, "#hungry")
	d.s.AgentLine(d.now, probe, (&report.Line{Inum: atoi(t, inum), Offset: 100, Status: report.OK3, Text: "ok"}).String())
	d.s.AgentLine(d.now, probe, "#hungry")
	r = d.ready()
	if got := len(r.Spawns) + len(r.Writes); got == 0 {
		t.Fatalf("nothing fed after the probe to %s worked", host)
	}
	for _, rv := range d.s.Rings(d.now) {
		if !rv.Throttled.IsZero() || rv.Probing {
			t.Fatalf("ring still throttled: %+v", rv)
		}
	}
}

func atoi(t *testing.T, s string) int64 {
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKilledAgentDoesNotThrottle: jobtimeout kills a hung agent: its jobs
// are rescheduled, its ring is not throttled.
func TestKilledAgentDoesNotThrottle(t *testing.T) {
	hang := true
	s := sim.New(cfg(t, smtp+"jobtimeout = \"2m\"\n"), func(j sim.Job) sim.Response {
		if hang {
			hang = false
			return sim.Response{Hang: true}
		}
		return sim.Sink(j)
	}, 1)
	s.Enqueue("smtp/a.test/x")
	run(t, s, time.Hour)
	if c := s.Core.Counters(); c.Killed != 1 || c.Throttles != 0 {
		t.Fatalf("killed %d, throttles %d: want one kill, no throttle", c.Killed, c.Throttles)
	}
}

// TestWarningPerJobDoesNotKill: an agent that writes a line that is not
// protocol with every job (a real ZMailer agent's warning on its shared
// stderr) is not killed every 100 jobs; its words are logged with the clause
// and the destination, rate-limited. One that floods within a job still is.
func TestWarningPerJobDoesNotKill(t *testing.T) {
	c := cfg(t, strings.Replace(smtp, "maxring = 10", "maxring = 1", 1))
	flood := false
	s := sim.New(c, func(j sim.Job) sim.Response {
		r := sim.Sink(j)
		r.Say = []string{"smtp: warning: cannot read /etc/zmailer/smtp.conf"}
		if flood {
			r.Say = make([]string, 101)
			for i := range r.Say {
				r.Say[i] = "spew"
			}
		}
		return r
	}, 1)
	log := logged(s, c, 1)
	for i := range 250 {
		s.Enqueue(fmt.Sprintf("smtp/a.test/u%d", i))
	}
	run(t, s, time.Hour)
	checkAllDelivered(t, s, 250)
	if k := s.Core.Counters().Killed; k != 0 {
		t.Fatalf("%d agents killed for a warning per job over 250 jobs", k)
	}
	said := log.lines("misformed line from agent", "cannot read /etc/zmailer/smtp.conf")
	if len(said) == 0 || len(said) > 10 {
		t.Fatalf("%d warnings logged for 250 in the same minute, want 1..10", len(said))
	}
	if !strings.Contains(said[0], `clause="smtp/*"`) || !strings.Contains(said[0], "channel=smtp") || !strings.Contains(said[0], "host=a.test") {
		t.Errorf("logged without the clause and destination: %s", said[0])
	}
	// A minute later the count of what was left out comes with the next.
	s.Advance(s.Now.Sub(sim.Epoch) + 2*time.Minute)
	s.Enqueue("smtp/a.test/late")
	run(t, s, 4*time.Hour)
	if got := log.lines("cannot read /etc/zmailer/smtp.conf", "suppressed=240"); len(got) != 1 {
		t.Errorf("%d lines tell of the 240 warnings left out, want 1", len(got))
	}

	flood = true
	s.Enqueue("smtp/a.test/flood")
	run(t, s, 8*time.Hour)
	if k := s.Core.Counters().Killed; k == 0 {
		t.Fatal("an agent writing 101 misformed lines in one job was not killed")
	}
}

// TestResyncForeverIsNotALoop: an agent that answers every job with
// #resync (a read-only spool, the wrong channel) makes no attempt: the
// window does not grow on it, its jobs wait for the retry schedule after one
// immediate re-try, and it is logged at info, rate-limited.
func TestResyncForeverIsNotALoop(t *testing.T) {
	c := cfg(t, smtp)
	s := sim.New(c, func(j sim.Job) sim.Response { return sim.Response{Resync: true} }, 1)
	log := logged(s, c, 1)
	s.Check = true
	for i := range 50 {
		s.Enqueue(fmt.Sprintf("smtp/a.test/u%d", i))
	}
	s.Advance(time.Hour)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	th, ok := s.Core.Thread(s.Now, "smtp", "a.test")
	if !ok {
		t.Fatal("thread gone")
	}
	first := 0
	for _, l := range s.JobLog {
		if l.At.Equal(sim.Epoch) {
			first++
		}
	}
	said := log.lines("[INFO]", "agent cannot use its job (#resync)")
	t.Logf("1h: %d job lines (%d in the first instant), window %d, %d info lines", len(s.JobLog), first, th.Window, len(said))
	if th.Window > 2 {
		t.Errorf("window %d grew past its initial 2 on jobs never attempted", th.Window)
	}
	if first > 2*50 {
		t.Errorf("%d job lines at once for 50 messages, want at most 2 each (one immediate re-try)", first)
	}
	if len(said) == 0 || len(said) > 10*60 {
		t.Errorf("%d info lines for the resyncs, want some, at most 10 a minute", len(said))
	}
	if !strings.Contains(said[0], `clause="smtp/*"`) || !strings.Contains(said[0], "host=a.test") {
		t.Errorf("logged without the clause and destination: %s", said[0])
	}
}

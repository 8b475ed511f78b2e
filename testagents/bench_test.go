package testagents

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/agent"
	"zsched/ctlfile"
)

// BenchmarkSinkProcess measures the agent side of a drain alone: real sink
// processes, started as the scheduler starts them (GOMAXPROCS=1, as the
// drain benchmark runs them), each fed job lines as fast as it asks with
// overfeed 8, one recipient per job as in cmd/bench (5 recipients
// per message, each at its own domain). It reports the sinks' CPU time per
// job (their rusage, user and system), which the drain benchmark can only
// give as a sum over a run that also times the scheduler.
//
//	go test -run NONE -bench SinkProcess -benchtime 20000x ./testagents
func BenchmarkSinkProcess(b *testing.B) {
	for _, mode := range []agent.Stdio{agent.Socketpair, agent.Pipes, agent.PTY} {
		b.Run(mode.String(), func(b *testing.B) { benchSink(b, mode, 4) })
	}
}

func benchSink(b *testing.B, mode agent.Stdio, procs int) {
	const rcpts, overfeed = 5, 8
	sp := &ctlfile.Spool{Root: b.TempDir(), Hash: 2, NoSync: true}
	if err := sp.Init(); err != nil {
		b.Fatal(err)
	}
	var jobs []string
	m := &ctlfile.Message{Sender: "bench@example.org", Header: []byte("From: bench@example.org\nSubject: bench\n"),
		Body: []byte("This is a benchmark message.\n")}
	for i := 0; len(jobs) < b.N; i++ {
		m.Rcpts = m.Rcpts[:0]
		for r := range rcpts {
			host := "d" + strconv.Itoa(i*rcpts+r) + ".test"
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: host, User: "u@" + host})
		}
		rel, err := sp.Enqueue(m)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range m.Rcpts {
			jobs = append(jobs, rel+"\t"+a.Host)
		}
	}
	jobs = jobs[:b.N]

	log := hclog.New(&hclog.LoggerOptions{Output: benchLog{b}, Level: hclog.Warn})
	events := make(chan agent.Event, 1024)
	ps := make([]*agent.Proc, procs)
	hungry := make([]int, procs) // #hungry lines: one before every read
	sent := make([]int, procs)
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
	b.ResetTimer()
	for i := range ps {
		p, err := agent.Start(i, agent.Spec{Argv: []string{agents["sink"], "-c", "smtp"}, Env: []string{"GOMAXPROCS=1"},
			Dir: sp.TransportDir(), Stdio: mode, UID: -1, GID: -1}, events, log)
		if err != nil {
			b.Fatal(err)
		}
		ps[i] = p
	}
	next, done, reports, exited := 0, 0, 0, 0
	for exited < procs {
		ev := <-events
		switch ev.Kind {
		case agent.Line:
			switch {
			case ev.Line == "#hungry":
				if hungry[ev.ID]++; hungry[ev.ID] > 1 {
					done++
				}
				var lines []string
				for next < len(jobs) && sent[ev.ID]-(hungry[ev.ID]-1) <= overfeed {
					lines = append(lines, jobs[next])
					next++
					sent[ev.ID]++
				}
				ps[ev.ID].Write(lines...)
				if done == len(jobs) {
					for _, p := range ps {
						p.End()
					}
				}
			case strings.HasPrefix(ev.Line, "#"):
				b.Errorf("agent %d: %s", ev.ID, ev.Line)
			default:
				reports++
			}
		case agent.TooLong:
			b.Errorf("agent %d: line too long", ev.ID)
		case agent.Exited:
			exited++
			if ev.Err != nil {
				b.Errorf("agent %d: %v", ev.ID, ev.Err)
			}
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
	if reports != len(jobs) {
		b.Errorf("%d reports for %d jobs", reports, len(jobs))
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "agent-µs/job")
	b.ReportMetric(float64(after.Nvcsw-before.Nvcsw)/float64(b.N), "agent-cs/job")
}

// benchLog routes the agent package's log to the benchmark's.
type benchLog struct{ b *testing.B }

func (w benchLog) Write(p []byte) (int, error) {
	w.b.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

package ctlfile

import (
	"strconv"
	"syscall"
	"testing"
	"time"
)

// benchSpool queues n 5-recipient messages in a 2-level hashed spool, as
// the scheduler's bench does, and returns the spool and the control files.
func benchSpool(b *testing.B, s *Spool, n int) []string {
	b.Helper()
	m := &Message{Sender: "bench@example.org", Header: []byte("From: bench@example.org\nSubject: bench\n"),
		Body: []byte("This is a benchmark message.\n")}
	rels := make([]string, 0, n)
	for i := range n {
		m.Rcpts = m.Rcpts[:0]
		for r := range 5 {
			d := strconv.Itoa((i*5 + r) % 1000)
			m.Rcpts = append(m.Rcpts, Address{Channel: "smtp", Host: "d" + d + ".test",
				User: "u" + strconv.Itoa(i) + "." + strconv.Itoa(r) + "@d" + d + ".test"})
		}
		rel, err := s.Enqueue(m)
		if err != nil {
			b.Fatal(err)
		}
		rels = append(rels, rel)
	}
	return rels
}

func newBenchSpool(b *testing.B) *Spool {
	b.Helper()
	s := &Spool{Root: b.TempDir(), Hash: 2, NoSync: true}
	if err := s.Init(); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSpoolRead is the scheduler's per-message read: the control file
// and the body's mtime.
func BenchmarkSpoolRead(b *testing.B) {
	s := newBenchSpool(b)
	rels := benchSpool(b, s, 2000)
	b.ReportAllocs()
	var cpu cpuMeter
	cpu.start()
	i := 0
	for b.Loop() {
		if _, err := s.Read(rels[i%len(rels)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	cpu.stop()
	cpu.report(b)
}

// BenchmarkSpoolRemove is the scheduler's per-message removal: the
// control file and the body (Enqueue names the body as the control file),
// each checked to be the file read. Files are queued and read in rounds
// outside the timer.
func BenchmarkSpoolRemove(b *testing.B) {
	s := newBenchSpool(b)
	const round = 1000
	b.ReportAllocs()
	b.ResetTimer()
	var cpu cpuMeter
	for done := 0; done < b.N; {
		b.StopTimer()
		rels := benchSpool(b, s, min(round, b.N-done))
		// The scheduler removes what it read: the identities to check.
		files := make([]Files, len(rels))
		for i, rel := range rels {
			f, err := s.Read(rel)
			if err != nil {
				b.Fatal(err)
			}
			files[i] = f.Files(rel)
		}
		b.StartTimer()
		cpu.start()
		for _, m := range files {
			if err := s.Remove(m); err != nil {
				b.Fatal(err)
			}
		}
		cpu.stop()
		done += len(rels)
	}
	cpu.report(b)
}

// cpuMeter sums the process's CPU time (user + system) over the timed
// parts of a benchmark: on a shared machine wall time per op mostly
// measures the neighbours.
type cpuMeter struct{ from, total time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (c *cpuMeter) start() { c.from = processCPU() }
func (c *cpuMeter) stop()  { c.total += processCPU() - c.from }

func (c *cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(c.total.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkScan is one pass over a 2-level hashed spool of 20 000 control
// files, 1 024 names at a time, as the scan and the census take it:
// ns/op and allocations per pass.
func BenchmarkScan(b *testing.B) {
	s := newBenchSpool(b)
	const n = 20_000
	benchSpool(b, s, n)
	names := make([]string, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sc := s.NewScanner()
		got := 0
		for {
			var done bool
			var err error
			names, done, err = sc.Next(names[:0], 1024)
			if err != nil {
				b.Fatal(err)
			}
			got += len(names)
			if done {
				break
			}
		}
		sc.Close()
		if got != n {
			b.Fatalf("scan found %d of %d", got, n)
		}
	}
}

package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// RunStats are a run's figures that the log lines "queue read at start",
// "startup read over" and "queue drained" show, kept as data for the
// benchmark (cmd/bench, through run -stats), so that nothing parses the
// log. A part is nil until its moment came.
type RunStats struct {
	StartupRead *StartupRead `json:"startup_read,omitempty"`
	StartupEnd  *StartupEnd  `json:"startup_end,omitempty"`
	Drained     *Drained     `json:"drained,omitempty"`
}

// StartupRead is the first pass over the queue at start.
type StartupRead struct {
	Files          int     `json:"files"`
	Seconds        float64 `json:"seconds"`
	FilesPerSecond int     `json:"files_per_second"`
	JobsDispatched uint64  `json:"jobs_dispatched"` // by the end of the pass
}

// StartupEnd is when delivery opened to the configured limits.
type StartupEnd struct {
	Reason         string  `json:"reason"`
	FilesRead      int     `json:"files_read"`
	Seconds        float64 `json:"seconds"`
	JobsDispatched uint64  `json:"jobs_dispatched"`
}

// Drained is the end of a -drain run.
type Drained struct {
	Delivered     int64         `json:"delivered"`
	Failed        int64         `json:"failed"`
	Deferred      int64         `json:"deferred"`
	AgentsStarted int64         `json:"agents_started"`
	Dispatched    uint64        `json:"dispatched"`
	DispatchP50   time.Duration `json:"dispatch_p50_ns"`
	DispatchP99   time.Duration `json:"dispatch_p99_ns"`
}

// Stats returns the run's figures so far. Call it after Run returned (or
// from OnDrained).
func (d *Daemon) Stats() RunStats { return d.stats }

// StatsFile is what `scheduler run -stats FILE` writes and the benchmark
// (cmd/bench) reads: the run's figures and what the scheduler process
// itself had used when the queue drained.
type StatsFile struct {
	RunStats
	Self ProcessUsage `json:"self"`
}

// ProcessUsage is a process's own CPU time and peak RSS; -1 where unknown
// (never sampled, or /proc unreadable).
type ProcessUsage struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSKiB int64   `json:"peak_rss_kib"`
}

// WriteStatsFile writes st to path as JSON; a run that never drained has
// no usage sampled.
func WriteStatsFile(path string, st StatsFile) error {
	if st.Drained == nil {
		st.Self = ProcessUsage{-1, -1}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	return nil
}

// ReadStatsFile reads what WriteStatsFile wrote.
func ReadStatsFile(path string) (StatsFile, error) {
	var st StatsFile
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("stats: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("stats %s: %w", path, err)
	}
	return st, nil
}

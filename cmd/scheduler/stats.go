package main

import (
	"encoding/json"
	"fmt"
	"os"

	"zsched/daemon"
)

// runStats is what `run -stats FILE` writes: the daemon's figures and
// what the scheduler process itself had used when the queue drained.
type runStats struct {
	daemon.RunStats
	Self selfUsage `json:"self"`
}

// selfUsage is the process's own CPU time and peak RSS; -1 where unknown
// (never sampled, or /proc unreadable).
type selfUsage struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSKiB int64   `json:"peak_rss_kib"`
}

func writeStats(path string, st runStats) error {
	if st.Drained == nil {
		st.Self = selfUsage{-1, -1}
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("scheduler: stats: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("scheduler: stats: %w", err)
	}
	return nil
}

func readStats(path string) (runStats, error) {
	var st runStats
	b, err := os.ReadFile(path)
	if err != nil {
		return st, fmt.Errorf("scheduler: stats: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("scheduler: stats %s: %w", path, err)
	}
	return st, nil
}

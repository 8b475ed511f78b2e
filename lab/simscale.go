package lab

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"zsched/config"
	"zsched/model"
	"zsched/replay"
	"zsched/trace"
)

// ScaleResult is the simulator's speed on a synthetic day of traffic.
type ScaleResult struct {
	Recipients, Dests int
	TraceFile         string
	TraceBytes        int64
	TraceLines        int
	Generate          time.Duration // simulating the truth and writing its log
	Read              time.Duration // reading the log and inferring the model
	Simulate          time.Duration // one configuration
	Events, Checks    int64
	PeakHeap          uint64
	Result            replay.Result
}

// ScaleConfig is the configuration the scale run simulates: the defaults,
// with room in core for the day's backlog.
const ScaleConfig = "[scheduler]\npostoffice = \"/nonexistent\"\n\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"smtp\"\n"

// Scale writes a synthetic day (replay.Day: recipients over dests) as a
// zsched outcome log in dir — by simulating its true destinations up to an
// hour after the day — then times what `scheduler simulate` does with it:
// read it, infer the model, and replay it to the end with a core check
// every check events.
func Scale(dir string, recipients, dests, check int, progress io.Writer) (ScaleResult, error) {
	res := ScaleResult{Recipients: recipients, Dests: dests, TraceFile: filepath.Join(dir, "day.log")}
	cfg, err := config.Parse("scale.toml", []byte(ScaleConfig))
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	day := replay.Day{Recipients: recipients, Dests: dests, Seed: 1}
	if _, err := os.Stat(res.TraceFile); err != nil {
		began := time.Now()
		f, err := os.Create(res.TraceFile)
		if err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		w := day.Workload()
		_, err = replay.Run(cfg, w, day.Truth(), replay.Options{Name: "truth", Seed: 1, Until: w.End.Add(time.Hour), Trace: bw})
		if err == nil {
			err = bw.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
		res.Generate = time.Since(began)
	}
	fi, err := os.Stat(res.TraceFile)
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	res.TraceBytes = fi.Size()

	runtime.GC()
	began := time.Now()
	f, err := os.Open(res.TraceFile)
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	ld, err := replay.Load(trace.NewReader(f, trace.Zsched, trace.Options{}), model.Options{}, 5)
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	res.Read = time.Since(began)
	res.TraceLines = ld.Stats.Lines
	var peak uint64
	var ms runtime.MemStats
	began = time.Now()
	last := began
	r, err := replay.Run(cfg, ld.Workload, ld.Model, replay.Options{Name: "scheduler.toml", Seed: 1, Check: check, Top: 5,
		ProgressEvery: 200_000, Progress: func(p replay.Progress) {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			if progress != nil && time.Since(last) > 5*time.Second {
				last = time.Now()
				fmt.Fprintf(progress, "scale: %d of %d messages arrived, simulated %s, %d events\n",
					p.Arrived, p.Messages, p.Now.Sub(ld.Workload.Start).Round(time.Second), p.Events)
			}
		}})
	res.Simulate = time.Since(began)
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	res.Events, res.Checks, res.PeakHeap, res.Result = r.Events, r.Checks, peak, r
	return res, nil
}

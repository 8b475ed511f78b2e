// Command bench is zsched's whole-process drain benchmark: it generates a
// queue of messages × recipients over domains in one process (no fsync: a
// benchmark queue), runs `scheduler run -drain -stats FILE` on it with the
// sink agent, and prints throughput, wall and CPU time (the scheduler's own
// and its agents'), their context switches, peak RSS, the rate at which
// the queue was read at start, and dispatch latency: the figures from the
// run's FILE, the switches and the CPU in all from wait4's usage.
//
//	make bench                       # builds bin/scheduler and the agents, runs bin/bench
//	bin/bench -messages 100000 -rcpts 1 -scheduler OTHER/bin/scheduler
//
// It builds nothing: it times the scheduler program it is given (default
// bin/scheduler, as `make build` leaves it) with testagents/bin/sink.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"zsched/ctlfile"
	"zsched/daemon"
	"zsched/lab"
)

func main() {
	switch err := bench(os.Args[1:], os.Stdout, os.Stderr); {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case isUsage(err):
		os.Exit(2) // the flag package has said what and printed the usage
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// isUsage tells a flag error, which the flag set has already reported.
func isUsage(err error) bool {
	var fe flagError
	return errors.As(err, &fe)
}

// flagError is a flag set's parse error.
type flagError struct{ error }

func (e flagError) Unwrap() error { return e.error }

// bench runs the benchmark the flags in args describe.
func bench(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var q lab.BenchQueue
	q.Flags(fs)
	agentPath := fs.String("agent", "", "agent `program` (default: testagents/bin/sink)")
	schedPath := fs.String("scheduler", "bin/scheduler", "scheduler `program` to time (compare builds by giving each)")
	maxring := fs.Int("maxring", 4, "agents in the ring (maxring): on 2 cores 4 agents, each fed many lines at once, cost less CPU per recipient than 16")
	maxthr := fs.Int("maxthr", 20, "agents per destination (maxthr)")
	overfeed := fs.Int("overfeed", 32, "job lines outstanding per agent beyond one (overfeed)")
	feed := fs.String("feed", "thread", "what an agent is fed after a job (the clause's feed): thread, or message for the same message's other recipients first")
	msgLimit := fs.Int("msglimit", 20000, "message_active_limit: messages in core")
	rcptLimit := fs.Int("rcptlimit", 20000, "recipient_active_limit: recipients in core")
	hash := fs.Int("hash", 2, "hash directory levels of the queue (0, 1 or 2); 2 keeps directories small, which makes unlink cheap")
	nice := fs.Int("nice", 0, "niceness of the agents (the clause's nice): above 0 gives the scheduler, which every agent waits on, the larger share of a busy CPU")
	logLevel := fs.String("log", "info", "scheduler log level (info logs every outcome, as in production)")
	keep := fs.Bool("keep", false, "keep the postoffice and log")
	generateOnly := fs.Bool("generate", false, "only generate the queue and its config, print where, and keep them")
	cpuprofile := fs.String("cpuprofile", "", "write the scheduler's CPU profile to `file`")
	tracePath := fs.String("trace", "", "write the scheduler's Go execution trace to `file` (go tool trace; the scheduler must know run -trace)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return flagError{err}
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("bench: unexpected arguments %q", fs.Args())
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return flagError{err}
	}
	if q.Messages < 1 || q.Rcpts < 1 || q.Domains < 1 {
		return errors.New("bench: -messages, -rcpts and -domains must be at least 1")
	}
	var self string
	if !*generateOnly {
		var err error
		if self, err = findScheduler(*schedPath); err != nil {
			return err
		}
	}
	agent := *agentPath
	if agent == "" {
		var err error
		if agent, err = findSink(); err != nil {
			return err
		}
	} else if strings.ContainsRune(agent, '/') {
		// The scheduler starts agents in postoffice/transport.
		var err error
		if agent, err = filepath.Abs(agent); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "zsched-bench-")
	if err != nil {
		return err
	}
	if !*keep && !*generateOnly {
		defer os.RemoveAll(dir)
	}
	po := filepath.Join(dir, "postoffice")
	cfgPath := filepath.Join(dir, "scheduler.toml")
	cfg := fmt.Sprintf(`[scheduler]
postoffice = %q
log_level = %q
maxta = %d
message_active_limit = %d
recipient_active_limit = %d

# GOMAXPROCS=1: the sink is one goroutine; more Ps only add idle
# threads that the Go runtime wakes and parks around every blocking read.
[[clause]]
select = "smtp/*"
command = ["GOMAXPROCS=1", %q, "-c", "smtp"]
maxring = %d
maxthr = %d
initial_concurrency = %d
overfeed = %d
feed = %q
nice = %d
`, po, *logLevel, *maxring+8, *msgLimit, *rcptLimit, agent, *maxring, *maxthr, min(5, *maxthr), *overfeed, *feed, *nice)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}

	spool := &ctlfile.Spool{Root: po, Hash: *hash, NoSync: true}
	if err := spool.Init(); err != nil {
		return err
	}
	start := time.Now()
	if err := q.Write(spool, ""); err != nil {
		return fmt.Errorf("bench: generate: %w", err)
	}
	total := q.Messages * q.Rcpts
	fmt.Fprintf(stdout, "queue: %d messages × %d recipients over %d domains (%d recipients) generated in %.2fs\n",
		q.Messages, q.Rcpts, q.Domains, total, time.Since(start).Seconds())
	if *generateOnly {
		fmt.Fprintf(stdout, "generated: scheduler run -drain -config %s\n", cfgPath)
		return nil
	}
	// The queue was written without fsync: have the kernel write it out
	// now, so its writeback does not run beside the scheduler and skew the
	// startup read, which then finds the queue as a restart would.
	syscall.Sync()

	statsPath := filepath.Join(dir, "stats.json")
	runArgs := []string{"run", "-drain", "-config", cfgPath, "-stats", statsPath}
	if *cpuprofile != "" {
		runArgs = append(runArgs, "-cpuprofile", *cpuprofile)
	}
	if *tracePath != "" {
		runArgs = append(runArgs, "-trace", *tracePath)
	}
	cmd := exec.Command(self, runArgs...)
	logFile, err := os.Create(filepath.Join(dir, "scheduler.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	logw := bufio.NewWriterSize(logFile, 256<<10)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	// The log is kept for reading, never parsed: the figures come from
	// the run's -stats file.
	_, cerr := io.Copy(logw, pipe)
	werr := cmd.Wait()
	wall := time.Since(start)
	logw.Flush()
	if werr != nil {
		return fmt.Errorf("bench: scheduler: %w (log: %s)", werr, logFile.Name())
	}
	if cerr != nil {
		return fmt.Errorf("bench: scheduler's log: %w", cerr)
	}
	st, err := daemon.ReadStatsFile(statsPath)
	if err != nil {
		return fmt.Errorf("bench: %w (a scheduler without run -stats?)", err)
	}
	selfCPU, selfRSS := st.Self.CPUSeconds, st.Self.PeakRSSKiB
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	fmt.Fprintf(stdout, "drain: %d recipients in %.2fs wall: %.0f recipients/s\n", total, wall.Seconds(), float64(total)/wall.Seconds())
	// wait4's usage covers the scheduler and the agents it waited for.
	fmt.Fprintf(stdout, "cpu: %.2fs (%.0f%% of one core)", cpu, 100*cpu/wall.Seconds())
	if selfCPU >= 0 {
		fmt.Fprintf(stdout, ": scheduler %.2fs (%.1f µs/recipient), agents %.2fs (%.1f µs/recipient)",
			selfCPU, 1e6*selfCPU/float64(total), cpu-selfCPU, 1e6*(cpu-selfCPU)/float64(total))
	}
	fmt.Fprintln(stdout)
	// Every voluntary switch is a thread or process that went to sleep
	// and was woken again: on a VM each wake of an idle CPU costs tens of
	// µs in which that CPU does nothing, the drain's idle share.
	fmt.Fprintf(stdout, "context switches: %d voluntary (%.2f per recipient), %d involuntary\n",
		ru.Nvcsw, float64(ru.Nvcsw)/float64(total), ru.Nivcsw)
	fmt.Fprintf(stdout, "memory: peak RSS %d MiB", ru.Maxrss/1024)
	if selfRSS >= 0 {
		fmt.Fprintf(stdout, " (scheduler alone %d MiB)", selfRSS/1024)
	}
	fmt.Fprintln(stdout)
	if s := st.StartupRead; s != nil {
		fmt.Fprintf(stdout, "startup: %d control files read in %vs (%d files/s); %d job lines dispatched by then\n",
			s.Files, s.Seconds, s.FilesPerSecond, s.JobsDispatched)
	}
	if s := st.StartupEnd; s != nil {
		// startup_maxring held delivery back until then (daemon/intake.go).
		fmt.Fprintf(stdout, "startup limit: agents per ring at most startup_maxring until %vs (%s); %d job lines dispatched by then\n",
			s.Seconds, s.Reason, s.JobsDispatched)
	}
	if s := st.Drained; s != nil {
		fmt.Fprintf(stdout, "dispatch latency (due → job line written): p50 %s, p99 %s; delivered %d, agents started %d\n",
			s.DispatchP50, s.DispatchP99, s.Delivered, s.AgentsStarted)
	}
	if *keep {
		fmt.Fprintf(stdout, "kept: %s\n", dir)
	}
	return nil
}

// findSink looks for the sink agent where `make build` puts it.
func findSink() (string, error) {
	cands := []string{"testagents/bin/sink"}
	if self, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(self), "..", "testagents", "bin", "sink"))
	}
	for _, c := range cands {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return filepath.Abs(c)
		}
	}
	return "", errors.New("bench: no sink agent found; run `make build` or give -agent")
}

// findScheduler checks the scheduler program to time, before any queue is
// generated: the benchmark builds nothing.
func findScheduler(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("bench: no scheduler program at %s; run `make build` or give -scheduler", path)
	}
	return abs, nil
}

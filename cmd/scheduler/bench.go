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
	"regexp"
	"strings"
	"syscall"
	"time"

	"zsched/ctlfile"
)

// cmdBench is the whole-process drain benchmark: it generates a queue of
// messages × recipients over domains in one process (no fsync: a benchmark
// queue), then runs `scheduler run -drain` on it with the sink agent and
// prints throughput, wall and CPU time, peak RSS and dispatch latency.
func cmdBench(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	messages := fs.Int("messages", 20000, "messages to queue")
	rcpts := fs.Int("rcpts", 5, "recipients per message")
	domains := fs.Int("domains", 1000, "destination domains")
	agentPath := fs.String("agent", "", "agent `program` (default: testagents/bin/sink)")
	maxring := fs.Int("maxring", 16, "agents in the ring (maxring)")
	maxthr := fs.Int("maxthr", 20, "agents per destination (maxthr)")
	overfeed := fs.Int("overfeed", 8, "job lines outstanding per agent beyond one (overfeed)")
	logLevel := fs.String("log", "info", "scheduler log level (info logs every outcome, as in production)")
	keep := fs.Bool("keep", false, "keep the postoffice and log")
	cpuprofile := fs.String("cpuprofile", "", "write the scheduler's CPU profile to `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	agent := *agentPath
	if agent == "" {
		var err error
		if agent, err = findSink(); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "zsched-bench-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	po := filepath.Join(dir, "postoffice")
	cfgPath := filepath.Join(dir, "scheduler.toml")
	cfg := fmt.Sprintf(`[scheduler]
postoffice = %q
log_level = %q
maxta = %d

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp"]
maxring = %d
maxthr = %d
initial_concurrency = %d
overfeed = %d
`, po, *logLevel, *maxring+8, agent, *maxring, *maxthr, min(5, *maxthr), *overfeed)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}

	spool := &ctlfile.Spool{Root: po, NoSync: true}
	if err := spool.Init(); err != nil {
		return err
	}
	start := time.Now()
	m := &ctlfile.Message{Sender: "bench@example.org", Header: []byte("From: bench@example.org\nSubject: bench\n"),
		Body: []byte("This is a benchmark message.\n")}
	for i := 0; i < *messages; i++ {
		m.Rcpts = m.Rcpts[:0]
		for r := 0; r < *rcpts; r++ {
			d := (i*(*rcpts) + r) % *domains
			m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: fmt.Sprintf("d%d.test", d), User: fmt.Sprintf("u%d.%d@d%d.test", i, r, d)})
		}
		if _, err := spool.Enqueue(m); err != nil {
			return fmt.Errorf("bench: generate: %w", err)
		}
	}
	gen := time.Since(start)
	total := *messages * *rcpts
	fmt.Fprintf(stdout, "queue: %d messages × %d recipients over %d domains (%d recipients) generated in %.2fs\n",
		*messages, *rcpts, *domains, total, gen.Seconds())

	self, err := os.Executable()
	if err != nil {
		return err
	}
	runArgs := []string{"run", "-drain", "-config", cfgPath}
	if *cpuprofile != "" {
		runArgs = append(runArgs, "-cpuprofile", *cpuprofile)
	}
	cmd := exec.Command(self, runArgs...)
	logFile, err := os.Create(filepath.Join(dir, "scheduler.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	summary := ""
	sc := bufio.NewScanner(pipe)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "queue drained") {
			summary = line
		}
		fmt.Fprintln(logFile, line)
	}
	werr := cmd.Wait()
	wall := time.Since(start)
	if werr != nil {
		return fmt.Errorf("bench: scheduler: %w (log: %s)", werr, logFile.Name())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := func(r *syscall.Rusage) float64 {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano()).Seconds()
	}
	field := func(k string) string {
		if m := regexp.MustCompile(k + `=(\S+)`).FindStringSubmatch(summary); m != nil {
			return m[1]
		}
		return "?"
	}
	fmt.Fprintf(stdout, "drain: %d recipients in %.2fs wall: %.0f recipients/s\n", total, wall.Seconds(), float64(total)/wall.Seconds())
	// wait4's usage covers the scheduler and the agents it waited for.
	fmt.Fprintf(stdout, "cpu: scheduler and agents %.2fs (%.0f%% of one core); peak RSS %d MiB\n",
		cpu(ru), 100*cpu(ru)/wall.Seconds(), ru.Maxrss/1024)
	fmt.Fprintf(stdout, "dispatch latency (due → job line written): p50 %s, p99 %s; delivered %s, agents started %s\n",
		field("dispatch_p50"), field("dispatch_p99"), field("delivered"), field("agents_started"))
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

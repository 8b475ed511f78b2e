package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"zsched/ctlfile"
	"zsched/daemon"
	"zsched/postfix"
	"zsched/smtpclient"
)

// Transport is what delivers the mail in a comparison with Postfix.
type Transport uint8

const (
	// Null: zsched's testagents/sink, which acknowledges every recipient,
	// against Postfix's discard(8). The schedulers' own cost.
	Null Transport = iota
	// SMTP: smtp-ta against Postfix's smtp(8), both delivering to one
	// smtp-sink on 127.0.0.1.
	SMTP
)

func (t Transport) String() string {
	if t == SMTP {
		return "smtp"
	}
	return "null"
}

// Versus drains one queue with zsched and with Postfix, back to back,
// Runs times each, interleaved (zsched first in odd rounds, Postfix first
// in even ones), and measures each drain: wall time from the start of the
// scheduler (zsched's process, Postfix's qmgr) to the last queue file
// removed, and the CPU time of all of the side's processes.
//
// The queue is the same on both sides, and cmd/bench's: BenchQueue.
// zsched's is
// written as control files (no fsync) before each run. Postfix's is
// injected once over SMTP into an instance without qmgr (smtpd and
// cleanup write it into the incoming queue), and its queue files are
// copied into a fresh instance before each run; there master is then told
// to start qmgr. Each side's queue is synced to disk before its clock
// starts, so the drain reads it as after a restart. Neither preparation
// is timed.
//
// Both sides keep the defaults they ship with, except what the
// comparison needs: zsched runs one clause (maxring Maxring, overfeed
// Overfeed, maxthr 20, initial concurrency 5: Postfix's defaults for the
// last two); Postfix runs with its defaults (100 processes, 20 per
// destination, 5 initially, 20 000 messages in the active queue, connection
// cache on demand). Under SMTP every domain is its own destination on
// both sides (zsched: one thread per domain; Postfix: one queue per
// next hop, the domain), and every destination's server is the one
// smtp-sink, reached without DNS: smtp-ta through a route map
// ("* [127.0.0.1]:port"), Postfix's smtp(8) through a native host lookup
// (smtp_host_lookup = native, DNS disabled) in its chroot, whose
// etc/hosts names every domain 127.0.0.1.
type Versus struct {
	BenchQueue
	Transport Transport
	// Relay (SMTP only) sends all mail through one relay, the sink, on
	// both sides: Postfix's relayhost; zsched's queue names the relay as
	// every recipient's host, as ZMailer's router does for a smarthost.
	// Each side then has one destination, and one SMTP transaction
	// carries a message's recipients together.
	Relay bool
	Runs  int
	// Scheduler is the scheduler program (cmd/scheduler); Agent the
	// agent program: testagents/sink (Null) or smtp-ta (SMTP).
	Scheduler, Agent string
	// Maxring and Overfeed are the clause's; Procs, when positive, sets
	// GOMAXPROCS for the agents.
	Maxring, Overfeed, Procs int
	// Feed is the clause's feed ("thread" when empty, or "message").
	Feed string
	// Timeout bounds each drain.
	Timeout time.Duration
	// Progress, when set, gets a line as each step ends.
	Progress io.Writer
	// Only, when "zsched" or "postfix", runs that side alone (to profile
	// it); the report then has no ratio.
	Only string
	// AgentArgs are added to the agent's command line (smtp-ta's -l, say).
	AgentArgs []string
	// Keep keeps every run's directory (logs, Postfix's maillog).
	Keep bool
	// CPUProfile, when set, has the scheduler write its CPU profile of
	// round N's drain to CPUProfile.N.
	CPUProfile string
}

// feed is the clause's feed: Feed, or the default.
func (v Versus) feed() string {
	if v.Feed == "" {
		return "thread"
	}
	return v.Feed
}

// Recipients is the size of the queue in recipients.
func (v Versus) Recipients() int { return v.Messages * v.Rcpts }

// DrainRun is one drain by one side.
type DrainRun struct {
	Side    string // "zsched" or "postfix"
	Round   int    // from 1
	Elapsed time.Duration
	// CPU is the side's processes' CPU time (user and system): zsched's
	// scheduler and its agents; Postfix's master and every daemon it ran.
	CPU time.Duration
	// Sched is zsched's scheduler alone (at the moment it logged the
	// drain's end; to 10 ms), -1 for Postfix.
	Sched time.Duration
	// Sink is smtp-sink's CPU time during the drain (SMTP), the server's
	// side of the sessions; 0 for Null.
	Sink time.Duration
}

// VersusReport is the outcome of Versus.Run.
type VersusReport struct {
	Versus
	Drains                []DrainRun // in the order run
	LoadBefore, LoadAfter string     // /proc/loadavg around the runs
	PostfixVersion        string
	Inject                time.Duration // building Postfix's queue, once
}

// Run prepares the queues and drains them.
func (v Versus) Run(ctx context.Context) (*VersusReport, error) {
	if v.Messages < 1 || v.Rcpts < 1 || v.Domains < 1 || v.Runs < 1 {
		return nil, errors.New("lab: versus: messages, recipients, domains and runs must be at least 1")
	}
	if v.Only != "" && v.Only != "zsched" && v.Only != "postfix" {
		return nil, fmt.Errorf("lab: versus: only %q: want zsched or postfix", v.Only)
	}
	if v.Timeout <= 0 {
		v.Timeout = 10 * time.Minute
	}
	rep := &VersusReport{Versus: v, LoadBefore: loadavg(), PostfixVersion: postfixVersion()}
	dir, err := os.MkdirTemp("", "zsched-versus-")
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if v.Keep {
		v.progress("keeping %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// Postfix's daemons drop privileges and must reach their directories.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	var sink *postfix.Sink
	if v.Transport == SMTP {
		// The server that accepts everything, fast, with PIPELINING;
		// nothing dumped.
		if sink, err = postfix.StartSink("", 0); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		defer sink.Stop()
	}
	var tmpl string
	if v.Only != "zsched" {
		t0 := time.Now()
		if tmpl, err = v.postfixQueue(ctx, dir); err != nil {
			return nil, err
		}
		rep.Inject = time.Since(t0)
		v.progress("postfix queue: %d messages injected over SMTP in %.1fs", v.Messages, rep.Inject.Seconds())
	}
	for round := 1; round <= v.Runs; round++ {
		sides := []string{"zsched", "postfix"}
		if round%2 == 0 {
			slices.Reverse(sides)
		}
		if v.Only != "" {
			sides = []string{v.Only}
		}
		for _, side := range sides {
			var r DrainRun
			var err error
			if side == "zsched" {
				r, err = v.drainZsched(ctx, dir, round, sink)
			} else {
				r, err = v.drainPostfix(ctx, dir, tmpl, round, sink)
			}
			if err != nil {
				return rep, err
			}
			rep.Drains = append(rep.Drains, r)
			v.progress("round %d %-7s %8.0f recipients/s  %.2fs  CPU %.1f µs/recipient", round, side,
				r.Rate(v.Recipients()), r.Elapsed.Seconds(), perRcpt(r.CPU, v.Recipients()))
		}
	}
	rep.LoadAfter = loadavg()
	return rep, nil
}

func (v Versus) progress(format string, args ...any) {
	if v.Progress != nil {
		fmt.Fprintf(v.Progress, format+"\n", args...)
	}
}

// Rate is recipients per second.
func (r DrainRun) Rate(rcpts int) float64 { return float64(rcpts) / r.Elapsed.Seconds() }

func perRcpt(d time.Duration, rcpts int) float64 {
	return float64(d.Microseconds()) / float64(rcpts)
}

const relayHost = "relay.test"

// zschedQueue writes the queue as control files without fsync (a
// benchmark's queue).
func (v Versus) zschedQueue(po string) error {
	spool := &ctlfile.Spool{Root: po, Hash: 2, NoSync: true}
	if err := spool.Init(); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	host := ""
	if v.Relay {
		host = relayHost
	}
	return v.Write(spool, host)
}

// zschedConfig is the scheduler's configuration: one clause for the
// queue's channel.
func (v Versus) zschedConfig(po, routes string) string {
	argv := []string{}
	if v.Procs > 0 {
		argv = append(argv, "GOMAXPROCS="+strconv.Itoa(v.Procs))
	}
	argv = append(argv, v.Agent, "-c", "smtp")
	if v.Transport == SMTP {
		argv = append(argv, "-h", "lab.test", "-routes", routes)
	}
	argv = append(argv, v.AgentArgs...)
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`[scheduler]
postoffice = %q
log_level = "info"
maxta = %d
message_active_limit = 20000
recipient_active_limit = 20000

[[clause]]
select = "smtp/*"
command = [%s]
maxring = %d
maxthr = 20
initial_concurrency = 5
overfeed = %d
feed = %q
`, po, v.Maxring+8, strings.Join(quoted, ", "), v.Maxring, v.Overfeed, v.feed())
}

// drainZsched writes zsched's queue and runs `scheduler run -drain` on it.
func (v Versus) drainZsched(ctx context.Context, dir string, round int, sink *postfix.Sink) (DrainRun, error) {
	r := DrainRun{Side: "zsched", Round: round, Sched: -1}
	rd := filepath.Join(dir, "zsched-"+strconv.Itoa(round))
	if !v.Keep {
		defer os.RemoveAll(rd)
	}
	po := filepath.Join(rd, "postoffice")
	if err := os.MkdirAll(rd, 0o755); err != nil {
		return r, fmt.Errorf("lab: %w", err)
	}
	routes := filepath.Join(rd, "routes")
	if sink != nil {
		if err := os.WriteFile(routes, []byte("* [127.0.0.1]:"+strconv.Itoa(sink.Port)+"\n"), 0o644); err != nil {
			return r, fmt.Errorf("lab: %w", err)
		}
	}
	cfg := filepath.Join(rd, "scheduler.toml")
	if err := os.WriteFile(cfg, []byte(v.zschedConfig(po, routes)), 0o644); err != nil {
		return r, fmt.Errorf("lab: %w", err)
	}
	if err := v.zschedQueue(po); err != nil {
		return r, err
	}
	syscall.Sync()

	logPath := filepath.Join(rd, "scheduler.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return r, fmt.Errorf("lab: %w", err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(ctx, v.Timeout)
	defer cancel()
	// The run's figures come as data (-stats), not from its log: the
	// drain's counts, and the CPU the scheduler had used itself when the
	// queue drained (its agents still running then).
	statsPath := filepath.Join(rd, "stats.json")
	args := []string{"run", "-drain", "-config", cfg, "-stats", statsPath}
	if v.CPUProfile != "" {
		args = append(args, "-cpuprofile", v.CPUProfile+"."+strconv.Itoa(round))
	}
	cmd := exec.CommandContext(ctx, v.Scheduler, args...)
	// The scheduler writes its log to the file itself, as Postfix's
	// postlogd does: no reader of ours sits in between.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sink0 := sinkCPU(sink)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("lab: start the scheduler: %w", err)
	}
	werr := cmd.Wait()
	r.Elapsed = time.Since(start)
	r.Sink = sinkCPU(sink) - sink0
	if werr != nil {
		return r, fmt.Errorf("lab: scheduler: %w (log: %s)", werr, tailOf(logPath))
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	// wait4's usage covers the scheduler and the agents it waited for.
	r.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	st, err := daemon.ReadStatsFile(statsPath)
	if err != nil {
		return r, fmt.Errorf("lab: %w (log: %s)", err, tailOf(logPath))
	}
	dr := st.Drained
	if dr == nil {
		return r, fmt.Errorf("lab: the scheduler's figures have no drain (log: %s)", tailOf(logPath))
	}
	if st.Self.CPUSeconds >= 0 {
		r.Sched = time.Duration(st.Self.CPUSeconds * float64(time.Second))
	}
	if dr.Delivered != int64(v.Recipients()) || dr.Failed != 0 || dr.Deferred != 0 {
		return r, fmt.Errorf("lab: zsched delivered %d of %d recipients, failed %d, deferred %d", dr.Delivered, v.Recipients(), dr.Failed, dr.Deferred)
	}
	return r, nil
}

// tailOf is the end of a log file, for an error message.
func tailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return path + ":\n" + string(b)
}

func sinkCPU(s *postfix.Sink) time.Duration {
	if s == nil {
		return 0
	}
	c, _ := procCPU(s.Pid())
	return c
}

// postfixConfig is the instance that drains the queue: held until the
// queue is in place, then qmgr with Postfix's defaults, delivering through
// discard(8) or smtp(8).
func (v Versus) postfixConfig(dir string, sink *postfix.Sink) postfix.Config {
	cfg := postfix.Config{Dir: dir, Hold: true}
	switch {
	case v.Transport == SMTP && v.Relay:
		cfg.Main = []string{
			"default_transport = smtp",
			"relayhost = [127.0.0.1]:" + strconv.Itoa(sink.Port),
			"smtp_dns_support_level = disabled",
			"smtp_helo_name = lab.test",
		}
		cfg.Master = []string{"smtp      unix - - y - - smtp"}
	case v.Transport == SMTP:
		var hosts strings.Builder
		hosts.WriteString("127.0.0.1 localhost\n")
		for d := range v.Domains {
			fmt.Fprintf(&hosts, "127.0.0.1 d%d.test\n", d)
		}
		cfg.Main = []string{
			"default_transport = smtp",
			"smtp_tcp_port = " + strconv.Itoa(sink.Port),
			"smtp_host_lookup = native",
			"smtp_dns_support_level = disabled",
			"smtp_helo_name = lab.test",
		}
		// chroot = y, as Debian ships smtp(8): its host lookups read the
		// queue directory's etc/hosts.
		cfg.Master = []string{"smtp      unix - - y - - smtp"}
		cfg.Files = map[string]string{"etc/hosts": hosts.String(), "etc/nsswitch.conf": "hosts: files\n"}
	}
	return cfg
}

// postfixQueue injects the queue over SMTP into a Postfix without qmgr and
// moves the queue files it wrote to a template directory, returning its
// path. The injecting instance runs on tmpfs where there is one
// (/dev/shm): cleanup fsyncs every queue file, which on this disk would
// make the preparation take longer than the drains; the files are the
// same wherever they were written, and every drain copies them to a queue
// on dir's file system.
func (v Versus) postfixQueue(ctx context.Context, dir string) (string, error) {
	base := dir
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if base, err = os.MkdirTemp("/dev/shm", "zsched-versus-"); err != nil {
			return "", fmt.Errorf("lab: %w", err)
		}
		if err := os.Chmod(base, 0o755); err != nil {
			return "", fmt.Errorf("lab: %w", err)
		}
	}
	in, err := postfix.Start(postfix.Config{Dir: filepath.Join(base, "inject"), Hold: true})
	if err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	defer os.RemoveAll(in.Dir)
	defer in.Stop()
	// Sessions at once keep cleanup processes busy while others wait.
	const sessions = 8
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for w := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = v.inject(ctx, in.Addr, w, sessions)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	if err := in.Stop(); err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	tmpl := filepath.Join(dir, "template")
	if err := os.Mkdir(tmpl, 0o700); err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	if err := copyQueue(filepath.Join(in.QueueDir(), "incoming"), tmpl); err != nil {
		return "", err
	}
	if base != dir {
		os.RemoveAll(base)
	}
	ents, err := os.ReadDir(tmpl)
	if err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	if len(ents) != v.Messages {
		return "", fmt.Errorf("lab: Postfix's incoming queue holds %d files after injecting %d messages", len(ents), v.Messages)
	}
	return tmpl, nil
}

// inject sends messages w, w+n, w+2n, ... over one session.
func (v Versus) inject(ctx context.Context, addr string, w, n int) error {
	c, err := smtpclient.Dial(ctx, smtpclient.Target{Addr: addr}, smtpclient.Options{HeloName: "lab.test", TLS: smtpclient.TLSNone})
	if err != nil {
		return fmt.Errorf("lab: inject: %w", err)
	}
	defer c.Quit()
	msg := benchHeader + "\n" + benchBody
	env := smtpclient.Envelope{From: benchSender}
	for i := w; i < v.Messages; i += n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		env.Rcpts = env.Rcpts[:0]
		for r := range v.Rcpts {
			_, a := v.Rcpt(i, r)
			env.Rcpts = append(env.Rcpts, smtpclient.Rcpt{Addr: a})
		}
		tx, err := c.Send(env, strings.NewReader(msg))
		if err != nil {
			return fmt.Errorf("lab: inject message %d: %w", i, err)
		}
		if tx.Accepted() != v.Rcpts || tx.Final.Class() != 2 {
			return fmt.Errorf("lab: inject message %d: %d of %d recipients accepted, final reply %q", i, tx.Accepted(), v.Rcpts, tx.Final)
		}
	}
	return nil
}

// drainPostfix starts a held instance, copies the queue files into its
// incoming queue and starts qmgr; the drain is over when qmgr has logged
// the removal of every queue file.
func (v Versus) drainPostfix(ctx context.Context, dir, tmpl string, round int, sink *postfix.Sink) (DrainRun, error) {
	r := DrainRun{Side: "postfix", Round: round, Sched: -1}
	pd := filepath.Join(dir, "postfix-"+strconv.Itoa(round))
	if !v.Keep {
		defer os.RemoveAll(pd)
	}
	in, err := postfix.Start(v.postfixConfig(pd, sink))
	if err != nil {
		return r, fmt.Errorf("lab: %w", err)
	}
	defer in.Stop()
	if err := copyQueue(tmpl, filepath.Join(in.QueueDir(), "incoming")); err != nil {
		return r, err
	}
	syscall.Sync()
	tail, err := in.Tail()
	if err != nil {
		return r, fmt.Errorf("lab: %w", err)
	}
	cpu0, err := groupCPU(in.Pgid())
	if err != nil {
		return r, err
	}
	sink0 := sinkCPU(sink)
	start := time.Now()
	if err := in.StartQmgr(); err != nil {
		return r, fmt.Errorf("lab: %w", err)
	}
	deadline := start.Add(v.Timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var p postfix.Progress
	for p.Removed < v.Messages {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
		if p, err = tail.Read(); err != nil {
			return r, fmt.Errorf("lab: %w", err)
		}
		if p.Bounced > 0 || time.Now().After(deadline) {
			return r, fmt.Errorf("lab: postfix: %d of %d messages done, %d recipients sent, %d deferred, %d bounced; first warning: %s",
				p.Removed, v.Messages, p.Sent, p.Deferred, p.Bounced, p.First)
		}
	}
	r.Elapsed = time.Since(start)
	cpu1, err := groupCPU(in.Pgid())
	if err != nil {
		return r, err
	}
	r.CPU = cpu1 - cpu0
	r.Sink = sinkCPU(sink) - sink0
	// Each smtp(8) logs its deliveries before qmgr removes the file; the
	// lines may reach postlogd in either order.
	for end := time.Now().Add(5 * time.Second); p.Sent < v.Recipients() && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
		if p, err = tail.Read(); err != nil {
			return r, fmt.Errorf("lab: %w", err)
		}
	}
	if p.Sent != v.Recipients() || p.Deferred != 0 {
		return r, fmt.Errorf("lab: postfix sent %d of %d recipients, deferred %d; first warning: %s", p.Sent, v.Recipients(), p.Deferred, p.First)
	}
	return r, nil
}

// copyQueue copies Postfix queue files with their owner and mode into dst.
func copyQueue(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	for _, e := range ents {
		if err := copyQueueFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyQueueFile(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	_, err = f.Write(data)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && err == nil {
		err = f.Chown(int(st.Uid), int(st.Gid))
	}
	if err == nil {
		// The umask may have taken bits off: Postfix reads the owner's
		// execute bit as "complete".
		err = f.Chmod(fi.Mode().Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

func postfixVersion() string {
	out, err := exec.Command("postconf", "-h", "-d", "mail_version").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

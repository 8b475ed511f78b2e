package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"zsched/control"
)

// The operator commands: each is one command on the control socket of the
// running scheduler.

// operatorCmd is an operator command: its arguments, its usage, and the
// control line it sends.
type operatorCmd struct {
	synopsis string
	summary  string
	args     [2]int // min, max arguments (-1: any)
	line     func(args []string) string
	// failed tells a reply that is "+" on the wire but means nothing was
	// done (MAILQ v2's ETRN answers "+OK" either way), and what to say.
	failed func(args []string, rep control.Reply) (string, bool)
}

// The operator commands of queue.go (queue, cat, kill, hold, release,
// flush) come after these: they take many messages and the whole spool.
var operatorOrder = []string{"mailq", "qshape", "why", "etrn", "reload"}

var operatorCommands = map[string]operatorCmd{
	"mailq": {"[-Q|-QQ|-QQQ|-s|-counters|-json|-dest CHANNEL/HOST]",
		"threads, agents and queue (ZMailer's thread report)", [2]int{0, 0},
		func([]string) string { return control.VerbShowThreads }, nil},
	"qshape": {"[N]", "recipients by host and age in minutes (Postfix qshape), top N hosts", [2]int{0, 1},
		func(a []string) string { return strings.Join(append([]string{control.VerbShowQshape}, a...), " ") }, nil},
	"why": {"ID", "why each recipient of a message waits (ID: queue id, or its control file's name)", [2]int{1, 1},
		func(a []string) string { return control.VerbWhy + " " + a[0] }, nil},
	"etrn": {"HOST|@DOMAIN", "start the queueonly threads of a host (@: the domain and its subdomains)", [2]int{1, 1},
		func(a []string) string { return control.VerbETRN + " " + a[0] },
		func(a []string, rep control.Reply) (string, bool) {
			if strings.Contains(rep.Text, "didn't start anything") {
				return fmt.Sprintf("nothing started for %s: no thread of it is waiting (not queued, held, or already running)", a[0]), true
			}
			return "", false
		}},
	"reload": {"", "re-read the configuration (as SIGHUP); fails when it is refused", [2]int{0, 0},
		func([]string) string { return control.VerbReload }, nil},
}

// cmdOperator runs one operator command against the running scheduler.
func cmdOperator(name string, args []string, stdout, stderr io.Writer) error {
	spec := operatorCommands[name]
	fs, path := newFlags(name, strings.TrimSpace("[-config FILE] [-socket PATH] "+spec.synopsis), stderr)
	socket := fs.String("socket", "", "control socket `path` (default: control_socket of the configuration)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the scheduler")
	var line string
	if name == "mailq" {
		// MAILQ v2's levels, as ZMailer's mailq -Q…-QQQQ, and zsched's views.
		views := []struct{ flag, line, usage string }{
			{"Q", control.VerbShowThreads, "the thread report (the default; ZMailer's mailq -Q)"},
			{"QQ", control.VerbShowShort, "ring headers and summaries only (ZMailer's -QQ)"},
			{"QQQ", control.VerbShowSNMP, "the two global summary lines, uptime in seconds (ZMailer's -QQQ)"},
			{"s", control.VerbShowSNMP, "a summary of the queue: the global lines (as -QQQ)"},
			{"QQQQ", control.VerbShowCounters, "running totals and gauges (ZMailer's -QQQQ; as -counters)"},
			{"counters", control.VerbShowCounters, "running totals and gauges"},
			{"json", control.VerbShowJSON, "rings, threads and agents as one JSON document"},
		}
		set := make([]*bool, len(views))
		for i, v := range views {
			set[i] = fs.Bool(v.flag, false, v.usage)
		}
		dest := fs.String("dest", "", "one destination's recipients, `channel/host` (SHOW THREAD; ZMailer's -c channel -h host)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		n := 0
		for i, v := range views {
			if *set[i] {
				n++
				line = v.line
			}
		}
		if *dest != "" {
			n++
			ch, host, ok := strings.Cut(*dest, "/")
			if !ok || ch == "" || host == "" || strings.ContainsAny(*dest, " \t") {
				return usagef("mailq: -dest %q: want channel/host", *dest)
			}
			line = control.VerbShowThread + " " + ch + " " + host
		}
		if n > 1 {
			return usagef("mailq: give one view at most")
		}
	} else if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) < spec.args[0] || (spec.args[1] >= 0 && len(rest) > spec.args[1]) {
		fs.Usage()
		return usagef("%s: wrong number of arguments", name)
	}
	if line == "" {
		line = spec.line(rest)
	}
	c, err := dialScheduler(name, *socket, *path, *timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	rep, err := c.Do(line)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !rep.OK {
		return fmt.Errorf("%s: %s", name, rep.Text)
	}
	if spec.failed != nil {
		if why, failed := spec.failed(rest, rep); failed {
			fmt.Fprintln(stdout, rep.Text)
			return fmt.Errorf("%s: %s", name, why)
		}
	}
	if rep.Multi {
		for _, l := range rep.Lines {
			fmt.Fprintln(stdout, l)
		}
		return nil
	}
	fmt.Fprintln(stdout, rep.Text)
	return nil
}

// dialScheduler connects to the running scheduler at socket, or at the
// control_socket of the configuration at cfgPath; a scheduler that is not
// running is said so, with where the socket came from.
func dialScheduler(name, socket, cfgPath string, timeout time.Duration) (*control.Client, error) {
	how := "control_socket of " + configPath(cfgPath)
	if socket == "" {
		cfg, err := loadConfig(cfgPath)
		if err != nil {
			return nil, err
		}
		socket = cfg.Scheduler.ControlSocket
	} else {
		how = "-socket"
	}
	c, err := control.Dial(socket, timeout)
	if err != nil {
		if errors.Is(err, control.ErrNotRunning) {
			return nil, fmt.Errorf("%s: the scheduler is not running (nothing listens on %s, the %s)", name, socket, how)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

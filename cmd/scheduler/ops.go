package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"zsched/config"
	"zsched/control"
)

// The operator commands: each is one command on the control socket of the
// running scheduler.

// opsCommands maps subcommands to their usage and the control line they
// send (built from the arguments).
var opsCommands = map[string]struct {
	usage string
	args  [2]int // min, max arguments (-1: any)
	line  func(args []string) string
}{
	"mailq": {"mailq [-json]: threads, agents and queue (ZMailer's thread report)", [2]int{0, 0},
		func([]string) string { return "SHOW QUEUE THREADS" }},
	"qshape": {"qshape [N]: recipients by host and age in minutes (Postfix qshape), top N hosts", [2]int{0, 1},
		func(a []string) string { return strings.TrimSpace("SHOW QSHAPE " + strings.Join(a, " ")) }},
	"why": {"why ID: why each recipient of a message waits (ID: path under transport/, or inode number)", [2]int{1, 1},
		func(a []string) string { return "WHY " + a[0] }},
	"etrn": {"etrn HOST|@DOMAIN: start the queueonly threads of a host (@: the domain and its subdomains)", [2]int{1, 1},
		func(a []string) string { return "ETRN " + a[0] }},
	"flush": {"flush [CHANNEL/HOST]: retry now, ending back-offs (ZMailer globs allowed)", [2]int{0, 1},
		func(a []string) string { return strings.TrimSpace("FLUSH " + strings.Join(a, " ")) }},
	"hold": {"hold CHANNEL/HOST | hold ID: hold a destination or a message", [2]int{1, 1},
		func(a []string) string { return holdLine("HOLD", a[0]) }},
	"release": {"release CHANNEL/HOST | release ID: end a hold", [2]int{1, 1},
		func(a []string) string { return holdLine("RELEASE", a[0]) }},
	"kill": {"kill ID: remove a message and its files, without a DSN", [2]int{1, 1},
		func(a []string) string { return "KILL MSG " + a[0] }},
	"reload": {"reload: re-read the configuration (as SIGHUP)", [2]int{0, 0},
		func([]string) string { return "RELOAD" }},
}

// holdLine tells a destination (channel/host: two non-empty parts, the
// second not a number) from a message id (a path such as A/12345, or an
// inode number).
func holdLine(verb, arg string) string {
	ch, host, ok := strings.Cut(arg, "/")
	isPath := strings.Trim(host, "0123456789/ABCDEFGHIJKLMNOPQRSTUVWXYZ") == "" && len(ch) == 1 && ch >= "A" && ch <= "Z"
	if ok && ch != "" && host != "" && !isPath {
		return verb + " THREAD " + arg
	}
	return verb + " MSG " + arg
}

func opsUsage(w io.Writer) {
	for _, name := range []string{"mailq", "qshape", "why", "etrn", "flush", "hold", "release", "kill", "reload"} {
		fmt.Fprintf(w, "  %s\n", opsCommands[name].usage)
	}
}

// cmdOps runs one operator command against the running scheduler.
func cmdOps(name string, args []string, stdout, stderr io.Writer) error {
	spec := opsCommands[name]
	fs, path := flags(name, stderr)
	socket := fs.String("socket", "", "control socket `path` (default: control_socket of the configuration)")
	jsonOut := false
	if name == "mailq" {
		fs.BoolVar(&jsonOut, "json", false, "print the queue as one JSON document")
	}
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the scheduler")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: scheduler %s\n", spec.usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) < spec.args[0] || (spec.args[1] >= 0 && len(rest) > spec.args[1]) {
		fs.Usage()
		return fmt.Errorf("%s: wrong number of arguments", name)
	}
	if *socket == "" {
		cfg, err := config.Load(*path)
		if err != nil {
			return err
		}
		*socket = cfg.Scheduler.ControlSocket
	}
	line := spec.line(rest)
	if jsonOut {
		line = "SHOW QUEUE JSON"
	}
	c, err := control.Dial(*socket, *timeout)
	if err != nil {
		if errors.Is(err, control.ErrNotRunning) {
			return fmt.Errorf("%s: the scheduler is not running (nothing listens on %s)", name, *socket)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	defer c.Close()
	rep, err := c.Do(line)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !rep.OK {
		return fmt.Errorf("%s: %s", name, rep.Text)
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

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"zsched/control"
)

// The queue-management commands (issue 17): the whole spool listed
// (`queue`, as postqueue -p/-j), a message decoded (`cat`, as postcat),
// and kill, hold, release and flush on many messages at once (as
// postsuper): ids as arguments or on standard input ("-"), or selected by
// destination (-dest GLOB) or sender (-from ADDR), or ALL; -n says what
// would be done and does nothing. Each prints a line per message touched
// and a count, and exits 1 when anything failed or nothing matched.

// idsPerRequest bounds the ids sent in one control line (its limit is 4 KiB).
const idsPerRequest = 100

// streamCmd sends one command and prints its listing as it comes.
func streamCmd(c *control.Client, name, line string, stdout io.Writer) error {
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	rep, err := c.StreamDo(line, func(l string) error {
		w.WriteString(l)
		return w.WriteByte('\n')
	})
	if err != nil {
		return fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "control: "))
	}
	if !rep.OK {
		return fmt.Errorf("%s: %s", name, rep.Text)
	}
	if rep.Text != "" {
		fmt.Fprintln(w, rep.Text)
	}
	return nil
}

// cmdQueue is `scheduler queue`.
func cmdQueue(args []string, stdout, stderr io.Writer) error {
	fs, path := newFlags("queue", "[-config FILE] [-socket PATH] [-json] [-dest GLOB] [-from ADDR] [-held] [-deferred]", stderr)
	socket := fs.String("socket", "", "control socket `path` (default: control_socket of the configuration)")
	jsonOut := fs.Bool("json", false, "one JSON document with a top-level \"messages\" array")
	dest := fs.String("dest", "", "only messages with a recipient at a destination matching `GLOB` (channel/host, host, @domain)")
	from := fs.String("from", "", "only messages from `ADDR` (a glob; <> for the null sender)")
	held := fs.Bool("held", false, "only held messages")
	deferred := fs.Bool("deferred", false, "only messages with a deferred recipient")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for each line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("queue: unexpected arguments %q", fs.Args())
	}
	words := []string{control.VerbShowMessages}
	if *jsonOut {
		words = append(words, "json")
	}
	if *held {
		words = append(words, "held")
	}
	if *deferred {
		words = append(words, "deferred")
	}
	if *dest != "" {
		words = append(words, "dest="+*dest)
	}
	if *from != "" {
		words = append(words, "from="+*from)
	}
	c, err := dialScheduler("queue", *socket, *path, *timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	return streamCmd(c, "queue", strings.Join(words, " "), stdout)
}

// cmdCat is `scheduler cat`.
func cmdCat(args []string, stdout, stderr io.Writer) error {
	fs, path := newFlags("cat", "[-config FILE] [-socket PATH] [-body] ID", stderr)
	socket := fs.String("socket", "", "control socket `path` (default: control_socket of the configuration)")
	body := fs.Bool("body", false, "print the body too")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the scheduler")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("cat: want one message id")
	}
	line := control.VerbShowMsg + " " + fs.Arg(0)
	if *body {
		line += " body"
	}
	c, err := dialScheduler("cat", *socket, *path, *timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	return streamCmd(c, "cat", line, stdout)
}

// isMessageID tells a message id (a queue id, a control file's name or
// path) from a destination pattern.
func isMessageID(s string) bool {
	base := s
	for range 2 {
		if len(base) > 2 && base[0] >= 'A' && base[0] <= 'Z' && base[1] == '/' {
			base = base[2:]
		}
	}
	name, gen, dotted := strings.Cut(base, ".")
	if name == "" || strings.Trim(name, "0123456789") != "" {
		return false
	}
	return !dotted || gen != "" && strings.Trim(gen, "0123456789abcdefghjkmnpqrstvwxyz") == ""
}

// cmdBulk is kill, hold, release and flush.
func cmdBulk(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	synopsis := map[string]string{
		"kill":    "[-config FILE] [-socket PATH] [-n] [-dest GLOB] [-from ADDR] [ALL] [ID... | -]",
		"hold":    "[-config FILE] [-socket PATH] [-n] [-dest GLOB] [-from ADDR] [ID... | -] | CHANNEL/HOST",
		"release": "[-config FILE] [-socket PATH] [-n] [-dest GLOB] [-from ADDR] [ALL] [ID... | -] | CHANNEL/HOST",
		"flush":   "[-config FILE] [-socket PATH] [-n] [-dest GLOB] [-from ADDR] [ID... | -] | [CHANNEL/HOST | HOST]",
	}[name]
	fs, path := newFlags(name, synopsis, stderr)
	socket := fs.String("socket", "", "control socket `path` (default: control_socket of the configuration)")
	dry := fs.Bool("n", false, "print what would be affected; change nothing")
	dest := fs.String("dest", "", "the messages with a recipient at a destination matching `GLOB`")
	from := fs.String("from", "", "the messages from `ADDR` (a glob; <> for the null sender)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for each line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ids, patterns []string
	all := false
	for _, a := range fs.Args() {
		switch {
		case a == "-":
			sc := bufio.NewScanner(stdin)
			for sc.Scan() {
				if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
					ids = append(ids, strings.Fields(l)[0])
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("%s: standard input: %w", name, err)
			}
		case a == "ALL" && (name == "kill" || name == "release"):
			all = true
		case a == "ALL":
			// Not a host named "all": holding or flushing everything
			// is said with a pattern ("*"), on purpose.
			return usagef("%s: ALL is for kill and release; to %s every destination say '*'", name, name)
		case isMessageID(a):
			ids = append(ids, a)
		case name == "kill":
			return usagef("%s: %q is not a message id (use -dest for destinations)", name, a)
		default:
			patterns = append(patterns, a)
		}
	}
	selects := *dest != "" || *from != "" || all
	if len(ids) == 0 && len(patterns) == 0 && !selects && name != "flush" {
		return usagef("%s: no message named or selected", name)
	}
	c, err := dialScheduler(name, *socket, *path, *timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	verb := map[string]string{"kill": control.VerbKillMsgs, "hold": control.VerbHoldMsgs, "release": control.VerbReleaseMsgs, "flush": control.VerbFlushMsgs}[name]
	var opts []string
	if *dry {
		opts = append(opts, "dry")
	}
	var failed []error
	// Destination patterns: hold, release and flush of destinations.
	for _, p := range patterns {
		destVerb := map[string]string{"hold": control.VerbHoldThread, "release": control.VerbReleaseThread, "flush": control.VerbFlush}[name]
		line := destVerb + " " + p
		if *dry {
			fmt.Fprintf(stdout, "%s %s: would be %s (destination pattern; -n changes nothing)\n", name, p, name)
			continue
		}
		if (name == "hold" || name == "release") && !strings.Contains(p, "/") {
			p = "*/" + p // a bare host: every channel, as flush and etrn take it
			line = destVerb + " " + p
		}
		rep, err := c.Do(line)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", name, err)
		case !rep.OK:
			failed = append(failed, fmt.Errorf("%s: %s", name, rep.Text))
		default:
			fmt.Fprintln(stdout, rep.Text)
		}
	}
	if name == "flush" && len(ids) == 0 && len(patterns) == 0 && !selects {
		rep, err := c.Do(control.VerbFlush)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintln(stdout, rep.Text)
		return nil
	}
	if selects {
		words := append([]string{verb}, opts...)
		if all {
			words = append(words, "all")
		}
		if *dest != "" {
			words = append(words, "dest="+*dest)
		}
		if *from != "" {
			words = append(words, "from="+*from)
		}
		err := streamCmd(c, name, strings.Join(words, " "), stdout)
		if all && name == "release" && !*dry {
			// ALL ends the destination holds too; it failed only if
			// nothing at all was held.
			if rep, rerr := c.Do(control.VerbReleaseThread + " */*"); rerr == nil && rep.OK {
				fmt.Fprintln(stdout, rep.Text)
				if err != nil && strings.Contains(err.Error(), "nothing matched") {
					err = nil
				}
			}
		}
		if err != nil {
			failed = append(failed, err)
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), idsPerRequest)
		words := append(append([]string{verb}, opts...), ids[:n]...)
		ids = ids[n:]
		if err := streamCmd(c, name, strings.Join(words, " "), stdout); err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}

// queueCommands are this file's commands, for the command table.
func queueCommands() []command {
	bulk := func(name string) func([]string, io.Reader, io.Writer, io.Writer) error {
		return func(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
			return cmdBulk(name, args, stdin, stdout, stderr)
		}
	}
	return []command{
		{"queue", "every message in the spool, in core or on disk, with each recipient's state (postqueue -p/-j)",
			func(args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return cmdQueue(args, stdout, stderr)
			}, true},
		{"cat", "a message's control file decoded, its headers, and with -body its body (postcat)",
			func(args []string, _ io.Reader, stdout, stderr io.Writer) error { return cmdCat(args, stdout, stderr) }, true},
		{"kill", "remove messages and their files, without a DSN (ids, -, -dest, -from, ALL; -n: say what)", bulk("kill"), true},
		{"hold", "hold messages (ids, -, -dest, -from), or a destination pattern (also mail that arrives later)", bulk("hold"), true},
		{"release", "end holds: of messages (ids, -, -dest, -from, ALL) or of a destination pattern", bulk("release"), true},
		{"flush", "retry now: messages (ids, -, -dest, -from), or destinations (a pattern; none: all)", bulk("flush"), true},
	}
}

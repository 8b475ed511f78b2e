package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"time"

	"zsched/ctlfile"
)

// notifyTimeout bounds the NEW datagram: a scheduler that is stopped, or
// too busy to drain its notify socket, does not hold enqueue up; the
// message is queued either way and its scan finds it.
const notifyTimeout = 250 * time.Millisecond

func cmdEnqueue(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs, path := newFlags("enqueue", "[flags] RCPT...", stderr)
	channel := fs.String("channel", "smtp", "channel for recipients given as plain addresses")
	from := fs.String("from", "", "envelope sender, user@domain (empty or <>: the null sender)")
	subject := fs.String("subject", "zsched test message", "Subject header")
	bodyFile := fs.String("body", "", "body `file` (\"-\": standard input; default: a one-line body)")
	notify := fs.String("notify", "", "DSN NOTIFY for every recipient, e.g. SUCCESS,FAILURE")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(fs.Output(), `
RCPT is channel/host/address (the address may be a bare local part, as for
local/localhost/root), or an address user@domain (channel from -channel,
host = its domain). Addresses are checked as SMTP envelope addresses
(RFC 5321: local part at most 64 octets, domain 255); nothing is queued
when one is wrong.
`)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("enqueue: no recipients")
	}
	if !validChannel(*channel) {
		return usagef("enqueue: -channel %q: want letters, digits, '-', '_' or '.'", *channel)
	}
	sender, err := parseSender(*from)
	if err != nil {
		return usageError{err}
	}
	m := &ctlfile.Message{Sender: sender}
	var to []string
	for _, r := range fs.Args() {
		a, err := parseRcpt(r, *channel)
		if err != nil {
			return usageError{err}
		}
		a.Notify = *notify
		m.Rcpts = append(m.Rcpts, a)
		to = append(to, a.User)
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	fromHdr := sender
	if fromHdr == "" {
		fromHdr = "MAILER-DAEMON"
	}
	m.Header = []byte(fmt.Sprintf("From: %s\nTo: %s\nSubject: %s\n", fromHdr, strings.Join(to, ", "), *subject))
	switch *bodyFile {
	case "":
		m.Body = []byte("This message was queued by scheduler enqueue.\n")
	case "-":
		if m.Body, err = io.ReadAll(stdin); err != nil {
			return fmt.Errorf("enqueue: body: %w", err)
		}
	default:
		if m.Body, err = os.ReadFile(*bodyFile); err != nil {
			return fmt.Errorf("enqueue: body: %w", err)
		}
	}
	// A mistyped postoffice must not become a new, empty spool nobody reads.
	for _, d := range []string{"queue", "transport"} {
		if fi, err := os.Stat(filepath.Join(cfg.Scheduler.Postoffice, d)); err != nil || !fi.IsDir() {
			return fmt.Errorf("enqueue: %s has no %s/ directory: not a postoffice (a mistyped path? scheduler init makes one)",
				cfg.Scheduler.Postoffice, d)
		}
	}
	spool := &ctlfile.Spool{Root: cfg.Scheduler.Postoffice, Hash: cfg.Scheduler.Hash}
	rel, err := spool.Enqueue(m)
	if err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	fmt.Fprintln(stdout, rel)
	if err := notifyScheduler(cfg.Scheduler.NotifySocket, rel, notifyTimeout); err != nil {
		fmt.Fprintf(stderr, "scheduler: enqueue: %s queued; the scheduler was not notified (%v): its next scan finds the message\n", rel, err)
	}
	return nil
}

// notifyScheduler sends "NEW rel" to the scheduler's notify socket. The
// send gives up after timeout: a full socket buffer (a stopped or busy
// scheduler) would otherwise block it for good.
func notifyScheduler(socket, rel string, timeout time.Duration) error {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return unwrapOp(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("NEW " + rel)); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fmt.Errorf("its notify socket stayed full for %v", timeout)
		}
		return unwrapOp(err)
	}
	return nil
}

func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

// RFC 5321 §4.5.3.1: the longest local part, domain and path.
const (
	maxLocal  = 64
	maxDomain = 255
	maxPath   = 254 // 256 with the angle brackets
)

// parseRcpt reads "channel/host/address" or "address".
func parseRcpt(s, channel string) (ctlfile.Address, error) {
	f := strings.SplitN(s, "/", 3)
	if len(f) < 3 {
		addr, _, domain, err := parseMailbox(s, true)
		if err != nil {
			return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: %w", s, err)
		}
		return ctlfile.Address{Channel: channel, Host: strings.ToLower(domain), User: addr}, nil
	}
	ch, host, user := f[0], f[1], f[2]
	if ch == "" || host == "" || user == "" {
		return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: empty channel, host or address", s)
	}
	if !validChannel(ch) {
		return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: channel %q: want letters, digits, '-', '_' or '.'", s, ch)
	}
	if err := checkDomain(host); err != nil {
		return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: host %q: %w", s, host, err)
	}
	if strings.ContainsRune(unquoted(user), '/') {
		// "a/b/c/d@example.com" is not channel a, host b: one '/' too many.
		return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: more than two '/': write channel/host/address, "+
			"or quote a local part that has '/' (\"c/d\"@example.com)", s)
	}
	addr, _, _, err := parseMailbox(user, false)
	if err != nil {
		return ctlfile.Address{}, fmt.Errorf("enqueue: recipient %q: address %q: %w", s, user, err)
	}
	return ctlfile.Address{Channel: ch, Host: strings.ToLower(host), User: addr}, nil
}

// parseSender checks -from: empty or "<>" is the null sender.
func parseSender(s string) (string, error) {
	if s == "" || s == "<>" {
		return "", nil
	}
	addr, _, _, err := parseMailbox(s, true)
	if err != nil {
		return "", fmt.Errorf("enqueue: sender %q: %w", s, err)
	}
	return addr, nil
}

// parseMailbox checks an envelope address: "local@domain", also written
// "<local@domain>"; with needDomain false a bare local part (a local
// channel's user) is accepted too. It returns the address without angle
// brackets, and its local part and domain.
func parseMailbox(s string, needDomain bool) (addr, local, domain string, err error) {
	in := strings.TrimSpace(s)
	if in != s || in == "" {
		return "", "", "", errors.New("empty, or blanks around it")
	}
	if strings.HasPrefix(in, "<") != strings.HasSuffix(in, ">") {
		return "", "", "", errors.New("unbalanced angle brackets")
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(in, "<"), ">")
	if strings.ContainsAny(inner, "<>") {
		return "", "", "", errors.New("angle brackets inside the address")
	}
	for _, r := range inner {
		if r < ' ' || r == 0x7f {
			return "", "", "", errors.New("control characters in the address")
		}
	}
	if !strings.Contains(unquoted(inner), "@") {
		if needDomain {
			return "", "", "", errors.New("want user@domain")
		}
		if err := checkLocal(inner); err != nil {
			return "", "", "", err
		}
		return inner, inner, "", nil
	}
	a, err := mail.ParseAddress("<" + inner + ">")
	if err != nil {
		return "", "", "", fmt.Errorf("not an address: %v", strings.TrimPrefix(err.Error(), "mail: "))
	}
	domain = a.Address[strings.LastIndexByte(a.Address, '@')+1:]
	// The local part as written: net/mail unquotes it.
	local = inner[:strings.LastIndexByte(inner, '@')]
	if len(local) > maxLocal {
		return "", "", "", fmt.Errorf("local part of %d octets: RFC 5321 allows %d", len(local), maxLocal)
	}
	if err := checkDomain(domain); err != nil {
		return "", "", "", fmt.Errorf("domain %q: %w", domain, err)
	}
	if len(inner) > maxPath {
		return "", "", "", fmt.Errorf("%d octets: RFC 5321 allows %d", len(inner), maxPath)
	}
	return inner, local, domain, nil
}

// checkLocal checks a bare local part: a dot-atom or a quoted string.
func checkLocal(s string) error {
	if len(s) > maxLocal {
		return fmt.Errorf("local part of %d octets: RFC 5321 allows %d", len(s), maxLocal)
	}
	if _, err := mail.ParseAddress("<" + s + "@x.invalid>"); err != nil {
		return fmt.Errorf("not a local part: %v", strings.TrimPrefix(err.Error(), "mail: "))
	}
	return nil
}

// checkDomain checks a host name (labels of letters, digits and hyphens,
// or UTF-8 for SMTPUTF8) or an address literal ([192.0.2.1], [IPv6:…]).
func checkDomain(d string) error {
	if len(d) > maxDomain {
		return fmt.Errorf("%d octets: RFC 5321 allows %d", len(d), maxDomain)
	}
	if strings.HasPrefix(d, "[") {
		lit, ok := strings.CutSuffix(d[1:], "]")
		if ip := strings.TrimPrefix(lit, "IPv6:"); ok && net.ParseIP(ip) != nil && (ip == lit) == (strings.Count(ip, ":") == 0) {
			return nil
		}
		return errors.New("not an address literal ([192.0.2.1] or [IPv6:2001:db8::1])")
	}
	if d == "" {
		return errors.New("empty")
	}
	for _, label := range strings.Split(strings.TrimSuffix(d, "."), ".") {
		if label == "" || len(label) > 63 {
			return errors.New("empty label, or one over 63 octets")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q begins or ends with '-'", label)
		}
		for _, r := range label {
			if r < 0x80 && !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("%q is not allowed in a host name", r)
			}
		}
	}
	return nil
}

// validChannel: a channel is a word of the control file's r line.
func validChannel(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// unquoted is s without its quoted strings: what is left is syntax.
func unquoted(s string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && in:
			i++
		case c == '"':
			in = !in
		case !in:
			b.WriteByte(c)
		}
	}
	return b.String()
}

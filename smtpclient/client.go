// Package smtpclient owns the client side of SMTP for zsched's transport
// agent: finding a destination's servers (MX, then A/AAAA, or a static
// route), opening a session (greeting, EHLO, opportunistic STARTTLS), and
// running mail transactions with the extensions the server offers
// (PIPELINING, SIZE, 8BITMIME, SMTPUTF8, DSN). It reports every server reply
// as data; mapping replies to the scheduler's status words is the agent's
// business.
//
// Why not net/smtp: it is frozen, sends one command at a time (no
// PIPELINING), has no SIZE, RET, ENVID, NOTIFY or ORCPT parameters, and
// hides per-recipient replies behind the first error. The wire framing
// here is small: replies are parsed by readReply (bounded line length, so a
// hostile server cannot make us buffer without limit) and the message is
// written through dotWriter (dot-stuffing, CRLF; net/textproto's, a run
// of bytes at a time rather than one).
package smtpclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// TLSPolicy says when a session uses STARTTLS, with Postfix's level names.
type TLSPolicy uint8

const (
	TLSMay     TLSPolicy = iota // STARTTLS when offered, unverified; plaintext if it fails (default)
	TLSNone                     // never
	TLSEncrypt                  // STARTTLS required, certificate not verified
	TLSVerify                   // STARTTLS required, certificate verified for the server's name
)

var tlsPolicyNames = [...]string{TLSMay: "may", TLSNone: "none", TLSEncrypt: "encrypt", TLSVerify: "verify"}

func (p TLSPolicy) String() string {
	if int(p) < len(tlsPolicyNames) {
		return tlsPolicyNames[p]
	}
	return "TLSPolicy(" + strconv.Itoa(int(p)) + ")"
}

// ErrTLSPolicy is wrapped by ParseTLSPolicy's error.
var ErrTLSPolicy = errors.New("smtpclient: unknown TLS policy")

// ParseTLSPolicy parses "none", "may", "encrypt" or "verify".
func ParseTLSPolicy(s string) (TLSPolicy, error) {
	for i, n := range tlsPolicyNames {
		if strings.EqualFold(s, n) {
			return TLSPolicy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want none, may, encrypt or verify)", ErrTLSPolicy, s)
}

// Options configure a session. The zero value works: HELO name
// "localhost", opportunistic TLS, RFC 5321 timeouts.
type Options struct {
	HeloName string
	TLS      TLSPolicy
	// TLSConfig is the base configuration for STARTTLS (root CAs for
	// TLSVerify, tests' pools); ServerName is set per target. nil means
	// the system defaults.
	TLSConfig *tls.Config
	// Timeouts; zero means Postfix's defaults: connect 30s, greeting
	// 300s, commands 300s, the reply after the final dot 600s.
	DialTimeout, GreetingTimeout, CommandTimeout, DataTimeout time.Duration
	// Dial opens the TCP connection; nil means a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (o *Options) timeout(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Stage names the step of a session that failed.
type Stage uint8

const (
	StageConnect Stage = iota + 1
	StageGreeting
	StageHello
	StageStartTLS
	StageReset
	StageMail
	StageRcpt
	StageData
	StageDot
	StageNoop
	StageQuit
)

var stageNames = [...]string{
	StageConnect: "connect", StageGreeting: "greeting", StageHello: "EHLO",
	StageStartTLS: "STARTTLS", StageReset: "RSET", StageMail: "MAIL", StageRcpt: "RCPT",
	StageData: "DATA", StageDot: "end of data", StageNoop: "NOOP", StageQuit: "QUIT",
}

func (s Stage) String() string {
	if int(s) < len(stageNames) && stageNames[s] != "" {
		return stageNames[s]
	}
	return "Stage(" + strconv.Itoa(int(s)) + ")"
}

// Error is a session step that failed: a network or protocol error (Err
// set, Reply zero), or a reply that ends the session or the attempt.
type Error struct {
	Stage  Stage
	Target Target
	Reply  Reply // zero when no reply was read
	Err    error // nil when Reply says it all
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("smtpclient: ")
	if e.Target.Addr != "" {
		b.WriteString(e.Target.String())
		b.WriteString(": ")
	}
	b.WriteString(e.Stage.String())
	if !e.Reply.IsZero() {
		b.WriteString(": ")
		b.WriteString(e.Reply.String())
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ErrCommand is returned by Send, before anything is sent, for an envelope
// that cannot be written as SMTP commands (a CR, LF or NUL in an address
// or parameter).
var ErrCommand = errors.New("smtpclient: envelope not representable in SMTP")

// Conn is one SMTP session. It is not safe for concurrent use.
type Conn struct {
	target Target
	opts   Options
	nc     net.Conn
	raw    *rawConn // the TCP connection under nc, when raw calls can reach it
	r      *bufio.Reader
	w      *bufio.Writer
	dot    dotWriter
	greet  Reply
	ext    map[string]string // EHLO keywords, upper case, to their parameters
	tls    bool
	closed bool
	// dirty: a transaction may be open on the server (a MAIL was sent and
	// no final reply closed it), so the next one starts with RSET.
	dirty bool
}

// Dial opens a session to t: TCP connect, greeting, EHLO (HELO if EHLO is
// refused), and STARTTLS as the policy asks. A 4xx or 5xx greeting, a 421
// at any step, or a TLS failure the policy does not allow is an *Error.
// Under TLSMay a failed TLS handshake is retried once in plaintext on a new
// connection, as Postfix does.
func Dial(ctx context.Context, t Target, o Options) (*Conn, error) {
	c, err := dial(ctx, t, o, o.TLS)
	var e *Error
	if o.TLS == TLSMay && errors.As(err, &e) && e.Stage == StageStartTLS && e.Reply.IsZero() {
		return dial(ctx, t, o, TLSNone)
	}
	return c, err
}

func dial(ctx context.Context, t Target, o Options, policy TLSPolicy) (*Conn, error) {
	dialer := o.Dial
	if dialer == nil {
		d := &net.Dialer{}
		dialer = d.DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, o.timeout(o.DialTimeout, 30*time.Second))
	nc, err := dialer(dctx, "tcp", t.Addr)
	cancel()
	if err != nil {
		return nil, &Error{Stage: StageConnect, Target: t, Err: err}
	}
	nc = newRawConn(nc)
	c := &Conn{target: t, opts: o, nc: nc}
	c.raw, _ = nc.(*rawConn)
	c.setConn(nc)
	c.deadline(o.timeout(o.GreetingTimeout, 300*time.Second))
	c.greet, err = readReply(c.r)
	if err != nil {
		c.Close()
		return nil, &Error{Stage: StageGreeting, Target: t, Err: err}
	}
	if c.greet.Class() != 2 {
		c.quitAndClose()
		return nil, &Error{Stage: StageGreeting, Target: t, Reply: c.greet}
	}
	if err := c.hello(); err != nil {
		return nil, err
	}
	if policy == TLSNone {
		return c, nil
	}
	if _, ok := c.ext["STARTTLS"]; !ok {
		if policy == TLSMay {
			return c, nil
		}
		c.quitAndClose()
		return nil, &Error{Stage: StageStartTLS, Target: t, Err: errors.New("server does not offer STARTTLS, which the TLS policy requires")}
	}
	rep, err := c.cmd(StageStartTLS, "STARTTLS")
	if err != nil {
		return nil, err
	}
	if rep.Class() != 2 {
		if policy == TLSMay && !rep.ShutsDown() {
			return c, nil // the session is still usable in plaintext
		}
		c.quitAndClose()
		return nil, &Error{Stage: StageStartTLS, Target: t, Reply: rep}
	}
	cfg := &tls.Config{}
	if o.TLSConfig != nil {
		cfg = o.TLSConfig.Clone()
	}
	cfg.ServerName = t.tlsName()
	cfg.InsecureSkipVerify = policy != TLSVerify
	tc := tls.Client(nc, cfg)
	c.deadline(o.timeout(o.CommandTimeout, 300*time.Second))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, &Error{Stage: StageStartTLS, Target: t, Err: err}
	}
	c.setConn(tc)
	c.tls = true
	if err := c.hello(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Conn) setConn(nc net.Conn) {
	c.nc = nc
	c.r = bufio.NewReaderSize(nc, maxReplyLine)
	c.w = bufio.NewWriter(nc)
}

func (c *Conn) deadline(d time.Duration) { c.nc.SetDeadline(time.Now().Add(d)) }

// hello sends EHLO, or HELO when the server refuses EHLO with a 5xx.
func (c *Conn) hello() error {
	name := c.opts.HeloName
	if name == "" {
		name = "localhost"
	}
	rep, err := c.cmd(StageHello, "EHLO "+name)
	if err != nil {
		return err
	}
	if rep.Class() == 5 {
		if rep, err = c.cmd(StageHello, "HELO "+name); err != nil {
			return err
		}
		c.ext = map[string]string{}
	} else if rep.Class() == 2 {
		c.ext = map[string]string{}
		for _, l := range rep.Lines[1:] {
			k, v, _ := strings.Cut(l, " ")
			c.ext[strings.ToUpper(k)] = v
		}
	}
	if rep.Class() != 2 {
		c.quitAndClose()
		return &Error{Stage: StageHello, Target: c.target, Reply: rep}
	}
	return nil
}

// cmd sends one command and reads its reply. A network or protocol error,
// or a 421, closes the connection and returns an *Error.
func (c *Conn) cmd(stage Stage, line string) (Reply, error) {
	if c.closed {
		return Reply{}, &Error{Stage: stage, Target: c.target, Err: net.ErrClosed}
	}
	c.deadline(c.opts.timeout(c.opts.CommandTimeout, 300*time.Second))
	c.w.WriteString(line)
	c.w.WriteString("\r\n")
	if err := c.w.Flush(); err != nil {
		c.Close()
		return Reply{}, &Error{Stage: stage, Target: c.target, Err: err}
	}
	return c.reply(stage)
}

// reply reads one reply for stage; see cmd.
func (c *Conn) reply(stage Stage) (Reply, error) {
	rep, err := readReply(c.r)
	if err != nil {
		c.Close()
		return Reply{}, &Error{Stage: stage, Target: c.target, Err: err}
	}
	if rep.ShutsDown() {
		c.Close()
		return rep, &Error{Stage: stage, Target: c.target, Reply: rep}
	}
	return rep, nil
}

// Target is the server this session talks to.
func (c *Conn) Target() Target { return c.target }

// Greeting is the server's 220 reply.
func (c *Conn) Greeting() Reply { return c.greet }

// Extension reports whether the server announced an EHLO keyword (case
// insensitive), and its parameters.
func (c *Conn) Extension(name string) (string, bool) {
	v, ok := c.ext[strings.ToUpper(name)]
	return v, ok
}

// SizeLimit is the server's SIZE limit; 0 means none announced or none set.
func (c *Conn) SizeLimit() int64 {
	v, ok := c.ext["SIZE"]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// TLS reports whether the session runs over TLS.
func (c *Conn) TLS() bool { return c.tls }

// Closed reports whether the connection is gone (closed by us, by a 421, or
// by a network or protocol error); the session cannot be used again.
func (c *Conn) Closed() bool { return c.closed }

// Stale reports whether an idle session has been given up by the server:
// it closed the connection, or sent something unasked (Postfix sends
// "421 4.4.2 timeout exceeded" before it drops an idle client). A stale
// session is closed. Call it before reusing a session after a pause. On a
// TCP connection it costs one non-blocking system call and never waits;
// elsewhere it waits at most a millisecond.
func (c *Conn) Stale() bool {
	if c.closed {
		return true
	}
	if c.r.Buffered() > 0 {
		c.Close()
		return true
	}
	if c.raw != nil {
		if c.tls && c.peekBefore(time.Unix(1, 0)) {
			// A record TLS had already read and decrypted.
			c.Close()
			return true
		}
		if readable, ok := c.raw.pending(); ok {
			if readable {
				c.Close()
				return true
			}
			return false
		}
	}
	if c.peekBefore(time.Now().Add(time.Millisecond)) {
		c.Close()
		return true
	}
	return c.closed
}

// peekBefore reports whether a byte (or the end of the stream, or an
// error other than the deadline) can be read before the deadline. With a
// deadline in the past only what is already buffered is seen, without a
// system call.
func (c *Conn) peekBefore(deadline time.Time) bool {
	c.nc.SetReadDeadline(deadline)
	_, err := c.r.Peek(1)
	c.nc.SetReadDeadline(time.Time{})
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false // nothing to read: alive, as far as one can tell
	}
	return true
}

// LocalAddr and RemoteAddr are the connection's endpoints.
func (c *Conn) LocalAddr() net.Addr  { return c.nc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Close closes the connection without QUIT.
func (c *Conn) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.nc.Close()
}

func (c *Conn) quitAndClose() {
	if !c.closed {
		c.deadline(5 * time.Second)
		c.w.WriteString("QUIT\r\n")
		if c.w.Flush() == nil {
			readReply(c.r)
		}
	}
	c.Close()
}

// Quit ends the session politely and closes the connection.
func (c *Conn) Quit() error {
	if c.closed {
		return nil
	}
	rep, err := c.cmd(StageQuit, "QUIT")
	c.Close()
	if err != nil {
		return err
	}
	if rep.Class() != 2 {
		return &Error{Stage: StageQuit, Target: c.target, Reply: rep}
	}
	return nil
}

// Noop sends NOOP, which keeps an idle session open and proves it alive.
// Any failure closes the session.
func (c *Conn) Noop() error {
	rep, err := c.cmd(StageNoop, "NOOP")
	if err != nil {
		return err
	}
	if rep.Class() != 2 {
		c.quitAndClose()
		return &Error{Stage: StageNoop, Target: c.target, Reply: rep}
	}
	return nil
}

// Envelope is one mail transaction's envelope.
type Envelope struct {
	From  string // the reverse path without brackets; "" is the null sender <>
	Rcpts []Rcpt
	// Size is the message size in octets as sent (CRLF line ends); when
	// positive and the server offers SIZE it is declared (RFC 1870).
	Size     int64
	EightBit bool // the message has 8-bit octets: BODY=8BITMIME when offered
	UTF8     bool // an address needs SMTPUTF8: the SMTPUTF8 parameter when offered
	// RET and ENVID (RFC 3461) are sent when the server offers DSN.
	RET, ENVID string
}

// Rcpt is one recipient. Notify and ORCPT (RFC 3461, as the control file's
// N line holds them) are sent when the server offers DSN.
type Rcpt struct {
	Addr, Notify, ORCPT string
}

// Tx is what a transaction's commands got back. A zero Reply means the
// command was not sent, or the session broke before its reply came.
type Tx struct {
	MailCmd  string
	Mail     Reply
	RcptCmds []string
	Rcpts    []Reply // one per Envelope.Rcpts
	Data     Reply   // the reply to DATA
	Final    Reply   // the reply after the final dot
	// Pipelined says the commands went out as one PIPELINING group.
	Pipelined bool
}

// Accepted is the number of recipients the server accepted.
func (tx *Tx) Accepted() int {
	n := 0
	for _, r := range tx.Rcpts {
		if r.Class() == 2 {
			n++
		}
	}
	return n
}

// Send runs one mail transaction: MAIL, every RCPT and DATA (as one
// PIPELINING group when the server offers it), then the message from msg
// if any recipient was accepted. msg is plain text with LF or CRLF line
// ends; it is dot-stuffed here. Replies, good or bad, are in the Tx; the
// error is non-nil only when the session broke (network or protocol error,
// or a 421), and then the Conn is closed and the Tx holds the replies that
// came before.
func (c *Conn) Send(env Envelope, msg io.Reader) (*Tx, error) {
	tx := &Tx{Rcpts: make([]Reply, len(env.Rcpts)), RcptCmds: make([]string, len(env.Rcpts))}
	if c.dirty {
		rep, err := c.cmd(StageReset, "RSET")
		if err != nil {
			return tx, err
		}
		if rep.Class() != 2 {
			c.quitAndClose()
			return tx, &Error{Stage: StageReset, Target: c.target, Reply: rep}
		}
		c.dirty = false
	}
	tx.MailCmd = c.mailCmd(env)
	for i, r := range env.Rcpts {
		tx.RcptCmds[i] = c.rcptCmd(r)
	}
	for _, s := range append([]string{tx.MailCmd}, tx.RcptCmds...) {
		if strings.ContainsAny(s, "\r\n\x00") {
			// A line break would let an address inject commands.
			return tx, fmt.Errorf("%w: %q", ErrCommand, s)
		}
	}
	c.dirty = true
	var err error
	if _, ok := c.ext["PIPELINING"]; ok {
		tx.Pipelined = true
		err = c.sendPipelined(tx)
	} else {
		err = c.sendLockstep(tx)
	}
	if err != nil {
		return tx, err
	}
	if tx.Data.Code != 354 {
		return tx, nil
	}
	if tx.Accepted() == 0 {
		// A server that answers DATA with 354 after refusing every
		// recipient (RFC 2920 §3.1 says it must not): end the empty
		// message at once.
		msg = strings.NewReader("")
	}
	c.deadline(c.opts.timeout(c.opts.DataTimeout, 600*time.Second))
	c.dot = dotWriter{w: c.w}
	if _, err := io.Copy(&c.dot, msg); err != nil {
		c.Close()
		return tx, &Error{Stage: StageDot, Target: c.target, Err: err}
	}
	if err := c.dot.Close(); err != nil { // writes ".\r\n" and flushes
		c.Close()
		return tx, &Error{Stage: StageDot, Target: c.target, Err: err}
	}
	tx.Final, err = c.reply(StageDot)
	if err != nil {
		return tx, err
	}
	if tx.Final.Class() == 2 && tx.Accepted() > 0 {
		c.dirty = false // the transaction is complete; no RSET needed
	}
	return tx, nil
}

func (c *Conn) sendPipelined(tx *Tx) error {
	c.deadline(c.opts.timeout(c.opts.CommandTimeout, 300*time.Second))
	c.w.WriteString(tx.MailCmd + "\r\n")
	for _, rc := range tx.RcptCmds {
		c.w.WriteString(rc + "\r\n")
	}
	c.w.WriteString("DATA\r\n")
	if err := c.w.Flush(); err != nil {
		c.Close()
		return &Error{Stage: StageMail, Target: c.target, Err: err}
	}
	var err error
	if tx.Mail, err = c.reply(StageMail); err != nil {
		return err
	}
	for i := range tx.Rcpts {
		if tx.Rcpts[i], err = c.reply(StageRcpt); err != nil {
			return err
		}
	}
	tx.Data, err = c.reply(StageData)
	return err
}

func (c *Conn) sendLockstep(tx *Tx) error {
	var err error
	if tx.Mail, err = c.cmd(StageMail, tx.MailCmd); err != nil || tx.Mail.Class() != 2 {
		return err
	}
	for i, rc := range tx.RcptCmds {
		if tx.Rcpts[i], err = c.cmd(StageRcpt, rc); err != nil {
			return err
		}
	}
	if tx.Accepted() == 0 {
		return nil
	}
	tx.Data, err = c.cmd(StageData, "DATA")
	return err
}

func (c *Conn) mailCmd(env Envelope) string {
	var b strings.Builder
	b.WriteString("MAIL FROM:<")
	b.WriteString(env.From)
	b.WriteByte('>')
	if _, ok := c.ext["SIZE"]; ok && env.Size > 0 {
		b.WriteString(" SIZE=")
		b.WriteString(strconv.FormatInt(env.Size, 10))
	}
	if _, ok := c.ext["8BITMIME"]; ok && env.EightBit {
		b.WriteString(" BODY=8BITMIME")
	}
	if _, ok := c.ext["SMTPUTF8"]; ok && env.UTF8 {
		b.WriteString(" SMTPUTF8")
	}
	if _, ok := c.ext["DSN"]; ok {
		if env.RET != "" {
			b.WriteString(" RET=")
			b.WriteString(env.RET)
		}
		if env.ENVID != "" {
			b.WriteString(" ENVID=")
			b.WriteString(env.ENVID)
		}
	}
	return b.String()
}

func (c *Conn) rcptCmd(r Rcpt) string {
	s := "RCPT TO:<" + r.Addr + ">"
	if _, ok := c.ext["DSN"]; ok {
		if r.Notify != "" {
			s += " NOTIFY=" + r.Notify
		}
		if r.ORCPT != "" {
			s += " ORCPT=" + r.ORCPT
		}
	}
	return s
}

package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"zsched/cluster"
)

// Scheduler is the [scheduler] table: settings of the whole daemon.
type Scheduler struct {
	Postoffice           string   // required; a relative path is relative to the config file's directory
	Hash                 int      // 0, 1 or 2: A–Z directory levels for files the scheduler writes (enqueue, DSNs)
	ScanInterval         Duration // directory scan backstop; default 10s
	LogLevel             string   // trace|debug|info|warn|error; default info
	LogFormat            string   // text|json; default text
	ControlSocket        string   // default <postoffice>/transport/.scheduler.sock
	ControlGroup         string   // group allowed on the control socket; "" = owner only
	ControlListen        string   // MAILQ v2 TCP listener; "" = off; a bare port or ":port" = loopback
	ControlAuth          string   // auth file for ControlListen (user:password:ATTRS:addresses); required with it
	NotifySocket         string   // default <postoffice>/transport/.scheduler.notify
	MetricsListen        string   // "" = off; loopback only unless MetricsPublic
	MetricsPublic        bool     // allow MetricsListen off loopback
	MaxTA                int      // global agent cap; default 1000
	ForkRate             int      // new agents per second; default 100
	StateLog             string   // per-attempt log file; "" = none
	MessageActiveLimit   int      // messages in core; default 20000 (qmgr_message_active_limit)
	RecipientActiveLimit int      // recipients in core; default 20000 (qmgr_message_recipient_limit)
	StartupMaxRing       int      // agents per ring while the queue found at start is read; default 2; 0 = no limit
	ShutdownTimeout      Duration // how long TERM waits for agents; default 10s
	DelayWarningTime     Duration // a message still queued this long warns senders who asked for NOTIFY=DELAY; 0 = off (default, as Postfix)
	LearnedMax           int      // destinations whose learned state is kept after their thread went away; default 20000; 0 = none
	LearnedTTL           Duration // how long that state is kept; default 1h (a dead destination's at least until its retry time)
	MaxControlSize       int      // largest control file read, bytes; a larger one is quarantined unread; default 64 MiB
}

// Clause is one [[clause]] after the overlay: built-in defaults, then the file's
// [defaults], then the clause's own keys. Names follow ZMailer's scheduler.conf
// where it has the knob and Postfix's otherwise.
type Clause struct {
	Select  string  // "channelglob/hostglob", or "channelglob" meaning host "*"
	Line    int     // line of its [[clause]] header (0 for built-ins and [defaults])
	Command Command // the agent command line; required after the overlay
	Stdio   Stdio   // default socketpair
	User    string  // agent user (name or uid); "" = the scheduler's own
	Group   string  // agent group (name or gid); "" = the scheduler's own

	Interval Duration // retry unit; default 1m (ZMailer's shipped */* value)
	Retries  []int    // factors of Interval; default Fibonacci 1..34; 0 = retry at once ("jackhammer"); at most 100
	Skew     int      // retry alignment divisor; default 5; >= 1
	Expiry   Duration // default 5d; 0 = never
	Expiry2  Duration // grace after Expiry even without attempts; default 2d
	IdleMax  Duration // how long an idle agent is kept; default 3 × Interval

	MaxChannel int  // agents per channel, across rings; default 1000
	MaxRing    int  // agents per ring; default 20
	MaxThr     int  // destination concurrency limit: the window's ceiling; default 20
	Overfeed   int  // extra job lines outstanding per agent; default 0
	QueueOnly  bool // threads start only by ETRN
	AgeOrder   bool // ZMailer's flag; true exactly when Order == OrderAge
	Order      Order
	Nice       int      // -20..19, applied to the agent
	JobTimeout Duration // a busy agent silent this long is killed; default 10m
	// TransportRetryTime is the longest a ring waits, after its agents
	// failed at start, before it tries a new one; the wait starts at 1s and
	// doubles. Default 60s (Postfix: transport_retry_time).
	TransportRetryTime Duration
	// Feed is what an agent is fed after a job: FeedThread (default), its
	// own thread's next vertex; FeedMessage, first the same message's other
	// due vertices in the ring (each on its own thread, within its
	// window), so that an agent's consecutive jobs reuse one message's
	// open files. Not with a host-bound command (its agents serve one
	// host); with [cluster], each job an agent borrows on another
	// destination holds a lease of its own from the shared book.
	Feed string

	InitialConcurrency   int      // starting window; default 5, at most MaxThr
	PositiveFeedback     Feedback // default 1/concurrency
	NegativeFeedback     Feedback // default 1/concurrency
	FailedCohortLimit    int      // default 1; 0 = a destination is never declared dead
	LearnedCeiling       bool     // learn each destination's limit from its refusals; default true
	CeilingProbeFactor   int      // growth above a learned ceiling is this many times slower; default 10
	CeilingTTL           Duration // a learned ceiling is forgotten this long after it was last confirmed; default 1h
	SlowStart            bool     // a window with no feedback yet starts at 1 and grows to the initial window; default true
	DeliverySlotCost     int      // default 5; 0 = no preemption
	DeliverySlotLoan     int      // default 3
	DeliverySlotDiscount int      // percent, 0..100; default 50
	MinimumDeliverySlots int      // default 3
}

// Config is a loaded and validated scheduler.toml.
type Config struct {
	Scheduler Scheduler
	Defaults  Clause   // built-in defaults overlaid by the file's [defaults]
	Clauses   []Clause // in file order, each overlaid on Defaults
	File      string   // the file it was loaded from
	// Cluster is the [cluster] table: the nodes sharing each
	// destination's window (package window, cluster/redisbook). nil
	// without the table: nothing is shared.
	Cluster *cluster.Config

	sel []selector // Match's lowercased patterns, built by Parse

	// Where keys are written, for errors found after Parse (Errorf).
	lines       *fileLines
	clauseLines []*tableLines
}

// Errorf returns an error at the line where key is written: in clause i,
// or in [defaults] when the clause inherits it (the clause's header line
// when neither writes it); in [scheduler] when i < 0. Checks that run after
// Parse (package preflight) report through it, as Parse does.
func (c *Config) Errorf(i int, key, format string, args ...any) *Error {
	e := &Error{File: c.File, Msg: fmt.Sprintf(format, args...)}
	if i < 0 {
		e.Key = "scheduler." + key
		if c.lines != nil {
			e.Line = c.lines.table("scheduler").line(key)
		}
		return e
	}
	e.Key = "clause." + key
	if i < len(c.clauseLines) {
		tl := c.clauseLines[i]
		e.Line = tl.header
		if n, ok := tl.keys[key]; ok {
			e.Line = n
		} else if n, ok := c.lines.table("defaults").keys[key]; ok {
			e.Line, e.Key = n, "defaults."+key
		}
	}
	return e
}

// ClusterErrorf returns an error at the line where the [cluster] key is
// written (the table's header when it is not), for checks after Parse.
func (c *Config) ClusterErrorf(key, format string, args ...any) *Error {
	e := &Error{File: c.File, Key: "cluster." + key, Msg: fmt.Sprintf(format, args...)}
	if c.lines != nil {
		e.Line = c.lines.table("cluster").line(key)
	}
	return e
}

// selector is a clause's Select split, lowercased and compiled once: Match
// runs for every new destination. A malformed half is nil and matches
// nothing (Parse refuses such a clause; one built by hand may have it).
type selector struct {
	src           string
	channel, host *Pattern
}

func newSelector(sel string) selector {
	ch, host, ok := strings.Cut(sel, "/")
	if !ok {
		host = "*"
	}
	s := selector{src: sel}
	s.channel, _ = CompileGlob(strings.ToLower(ch))
	s.host, _ = CompileGlob(strings.ToLower(host))
	return s
}

func (s *selector) match(channel, host string) bool {
	return s.channel != nil && s.host != nil && s.channel.Match(channel) && s.host.Match(host)
}

// Match returns the index of the first clause whose channel glob and host glob
// match the lowercased channel and host (an empty host matches "*"), and
// whether there was one. It is a linear scan over the clauses: callers on a hot
// path cache the answer per (channel, host).
func (c *Config) Match(channel, host string) (index int, ok bool) {
	channel, host = strings.ToLower(channel), strings.ToLower(host)
	for i := range c.Clauses {
		if i < len(c.sel) && c.sel[i].src == c.Clauses[i].Select {
			if c.sel[i].match(channel, host) {
				return i, true
			}
			continue
		}
		// Clauses built or edited by hand after Parse.
		if s := newSelector(c.Clauses[i].Select); s.match(channel, host) {
			return i, true
		}
	}
	return -1, false
}

// Default returns the built-in configuration: no clauses and no postoffice.
func Default() *Config {
	return &Config{Scheduler: defaultScheduler(), Defaults: defaultClause()}
}

func defaultScheduler() Scheduler {
	var s Scheduler
	applyDefaults(&s, schedulerTable)
	return s
}

// defaultClause is clauseTable's defaults, with those derived from others
// resolved as finishClause resolves them.
func defaultClause() Clause {
	var l layer
	applyDefaults(&l, clauseTable)
	c := l.c
	c.IdleMax = Duration(mulSat(time.Duration(c.Interval), 3))
	c.AgeOrder = c.Order == OrderAge
	return c
}

// Error is a configuration error at a file, line and key.
type Error struct {
	File string // as given to Parse or Load
	Line int    // 1-based; 0 if unknown
	Key  string // dotted, e.g. "clause.maxring"; "" for syntax errors
	Msg  string

	err error // the underlying error, for errors.Is
}

// Error formats as "config: scheduler.toml:12: clause.maxring: must be >= 1".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":" + strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, such as one wrapping ErrDuration.
func (e *Error) Unwrap() error { return e.err }

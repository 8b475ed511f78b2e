package config

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"zsched/cluster"
	"zsched/internal/need"
)

// head is a minimal valid prefix: the scheduler table and a command default.
const head = `[scheduler]
postoffice = "/var/spool/postoffice"
`

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse("test.toml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return c
}

// markedLine returns the 1-based line of doc that carries the "#<-" marker, so
// the expected line in a test is where the reader sees the fault.
func markedLine(t *testing.T, doc string) int {
	t.Helper()
	for i, l := range strings.Split(doc, "\n") {
		if strings.Contains(l, "#<-") {
			return i + 1
		}
	}
	t.Fatalf("no #<- marker in\n%s", doc)
	return 0
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name, doc, key, msg string
	}{
		{"range in clause", head + `
[[clause]]
select = "smtp/*"
command = "smtp"
maxring = 0 #<-
`, "clause.maxring", "must be >= 1"},
		{"feed message with a host-bound command", head + `
[[clause]]
select = "smtp/*"
command = "smtp -h $host"
feed = "message" #<-
`, "clause.feed", "not host-bound"},
		{"feed word", head + `
[[clause]]
select = "smtp/*"
command = "smtp"
feed = "recipient" #<-
`, "clause.feed", "thread"},
		{"second clause of two", head + `
[[clause]]
select = "local/*"
command = "mailbox"
maxthr = 3

[[clause]]
select = "smtp/*"
command = "smtp"
maxthr = -1 #<-
`, "clause.maxthr", "must be >= 1"},
		{"bad duration in defaults", head + `
[defaults]
command = "x"
interval = "1x" #<-
`, "defaults.interval", "unknown unit"},
		{"zero interval", head + `
[defaults]
interval = 0 #<-
`, "defaults.interval", "greater than 0"},
		{"negative seconds", head + `
[defaults]
expiry = -1 #<-
`, "defaults.expiry", "out of range"},
		{"unknown clause key with hint", head + `
[[clause]]
select = "smtp/*"
command = "smtp"
max_ring = 5 #<-
`, "clause.max_ring", `did you mean "maxring"`},
		{"scheduler key in a clause", head + `
[[clause]]
select = "smtp/*"
command = "smtp"
maxta = 5 #<-
`, "clause.maxta", "belongs in [scheduler]"},
		{"ZMailer-only keyword", head + `
[defaults]
wakeuprestartonly = true #<-
`, "defaults.wakeuprestartonly", "not supported"},
		{"unknown scheduler key", `[scheduler]
postoffice = "/p"
scan_interval = "5s" #<-
`, "scheduler.scan_interval", `did you mean "scaninterval"`},
		{"unknown top-level key", head + `
[clauses] #<-
select = "x"
`, "clauses", "unknown key"},
		{"clause without command", head + `
[[clause]] #<-
select = "smtp/*"
maxring = 3
`, "clause.command", "no command"},
		{"clause without select", head + `
[defaults]
command = "x"
[[clause]] #<-
maxring = 3
`, "clause.select", "required"},
		{"select in defaults", head + `
[defaults]
select = "smtp/*" #<-
`, "defaults.select", "[[clause]]"},
		{"select with two slashes", head + `
[[clause]]
select = "smtp/a/b" #<-
command = "smtp"
`, "clause.select", "one '/'"},
		{"select with a bad glob", head + `
[[clause]]
select = "smtp/[a-z" #<-
command = "smtp"
`, "clause.select", "unterminated ["},
		{"select with an empty host", head + `
[[clause]]
select = "smtp/" #<-
command = "smtp"
`, "clause.select", "empty host"},
		{"discount over 100", head + `
[defaults]
delivery_slot_discount = 101 #<-
`, "defaults.delivery_slot_discount", "0..100"},
		{"slot cost 1", head + `
[defaults]
delivery_slot_cost = 1 #<-
`, "defaults.delivery_slot_cost", ">= 2"},
		{"feedback above 1", head + `
[defaults]
positive_feedback = 2 #<-
`, "defaults.positive_feedback", "(0,1]"},
		{"feedback zero", head + `
[defaults]
negative_feedback = "0/concurrency" #<-
`, "defaults.negative_feedback", "(0,1]"},
		{"feedback word", head + `
[defaults]
negative_feedback = "1/load" #<-
`, "defaults.negative_feedback", "1/sqrt_concurrency"},
		{"order enum", head + `
[defaults]
order = "lifo" #<-
`, "defaults.order", "preemptive, fifo, random, age"},
		{"stdio enum", head + `
[defaults]
stdio = "tty" #<-
`, "defaults.stdio", "socketpair, pipes, pty"},
		{"ageorder contradicts order", head + `
[defaults]
order = "fifo"
ageorder = true #<-
`, "defaults.ageorder", "contradicts"},
		{"negative retry factor", head + `
[defaults]
retries = [1, -2] #<-
`, "defaults.retries", "factor 2"},
		{"empty retries", head + `
[defaults]
retries = [] #<-
`, "defaults.retries", "at least one"},
		{"too many retries", head + `
[defaults]
retries = [` + strings.Repeat("1, ", 101) + `] #<-
`, "defaults.retries", "at most 100"},
		{"retry overflow", head + `
[defaults]
interval = "100000d"
retries = [1, 1000000] #<-
`, "defaults.retries", "overflows"},
		{"nice range", head + `
[defaults]
nice = 20 #<-
`, "defaults.nice", "-20..19"},
		{"type mismatch", head + `
[defaults]
maxring = "5" #<-
`, "defaults.maxring", "want an integer, not a string"},
		{"bad env word", head + `
[[clause]]
select = "x"
command = "1X=y prog" #<-
`, "clause.command", "environment variable name"},
		{"command of words with a number", head + `
[[clause]]
select = "x"
command = ["prog", 3] #<-
`, "clause.command", "word 2"},
		{"postoffice missing", `
[scheduler] #<-
maxta = 10
`, "scheduler.postoffice", "required"},
		{"hash range", head + `hash = 3 #<-
`, "scheduler.hash", "0..2"},
		{"log level", head + `log_level = "verbose" #<-
`, "scheduler.log_level", "trace, debug"},
		{"metrics off loopback", head + `metrics_listen = "0.0.0.0:9100" #<-
`, "scheduler.metrics_listen", "metrics_public"},
		{"metrics on all interfaces", head + `metrics_listen = ":9100" #<-
`, "scheduler.metrics_listen", "loopback"},
		{"metrics bad port", head + `metrics_listen = "127.0.0.1:http" #<-
`, "scheduler.metrics_listen", "port"},
		{"zero scaninterval", head + `scaninterval = "0s" #<-
`, "scheduler.scaninterval", "greater than 0"},
		{"clause as a table", head + `
[clause] #<-
select = "x"
`, "clause", "array of tables"},
		{"key after multi-line values", head + `control_group = """
a
b"""
statelog = '''
x'''
[[clause]]
select = "smtp/*"
command = [
  "smtp", # a comment with = and [
  "-c", "smtp",
]
retries = [
  1,
  2,
]
maxring = 0 #<-
`, "clause.maxring", "must be >= 1"},
		{"quoted key", head + `
[[clause]]
select = "x"
command = "x"
"maxring" = 0 #<-
`, "clause.maxring", ">= 1"},
		{"syntax error", head + `
[[clause]]
select = = "x" #<-
`, "", "expected value"},
		{"cluster: bad scheme", head + `
[cluster]
node = "mx1"
redis = "http://127.0.0.1:6379" #<-
`, "cluster.redis", "want redis:// or rediss://"},
		{"cluster: no redis", head + `
[cluster] #<-
node = "mx1"
`, "cluster.redis", "required"},
		{"cluster: bad lease", head + `
[cluster]
redis = "redis://127.0.0.1:6379"
lease = "30x" #<-
`, "cluster.lease", "invalid duration"},
		{"cluster: short lease", head + `
[cluster]
redis = "redis://127.0.0.1:6379"
lease = "1s" #<-
`, "cluster.lease", "at least 3s"},
		{"cluster: unknown key", head + `
[cluster]
redis = "redis://127.0.0.1:6379"
leases = "1m" #<-
`, "cluster.leases", "unknown key"},
		{"cluster: not a table", `cluster = 1 #<-
` + head, "cluster", "must be a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.doc))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse: %v, want an *Error", err)
			}
			if want := markedLine(t, tt.doc); e.Line != want || e.Key != tt.key || !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("got line %d key %q msg %q\nwant line %d key %q msg containing %q", e.Line, e.Key, e.Msg, want, tt.key, tt.msg)
			}
			if e.File != "test.toml" || !strings.HasPrefix(err.Error(), "config: test.toml:") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{File: "scheduler.toml", Line: 12, Key: "clause.maxring", Msg: "must be >= 1"}
	if got, want := e.Error(), "config: scheduler.toml:12: clause.maxring: must be >= 1"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// Every fault is reported, in line order, and each can be picked out.
func TestSeveralErrors(t *testing.T) {
	doc := head + `
[[clause]]
select = "b/*"
maxring = 0

[defaults]
nice = 99
`
	_, err := Parse("t.toml", []byte(doc))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		"config: t.toml:4: clause.command: required",
		"config: t.toml:6: clause.maxring: must be >= 1",
		"config: t.toml:9: defaults.nice: must be in -20..19",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
}

func TestErrorsWrapCause(t *testing.T) {
	_, err := Parse("t.toml", []byte(head+"[defaults]\nexpiry = \"3w\"\n"))
	if !errors.Is(err, ErrDuration) {
		t.Errorf("%v does not wrap ErrDuration", err)
	}
}

func TestDefaultsOverlay(t *testing.T) {
	// [defaults] stands last and still applies to every clause (ZMailer needed
	// */* first); clause keys win over it; derived values follow the clause.
	c := mustParse(t, head+`
[[clause]]
select = "local/*"
command = "mailbox"
interval = "5m"

[[clause]]
select = "smtp/*"
maxthr = 2
delivery_slot_cost = 0
retries = [0]

[[clause]]
select = "hold/*"
command = "hold"
order = "random"
idlemax = "1h"

[[clause]]
select = "slow/*"
command = "slow"
ageorder = false
order = "preemptive"
delivery_slot_cost = 0

[defaults]
command = "smtp -c $channel"
interval = "2m"
maxring = 7
ageorder = true
`)
	local, smtp, hold, slow := c.Clauses[0], c.Clauses[1], c.Clauses[2], c.Clauses[3]
	if local.MaxRing != 7 || smtp.MaxRing != 7 {
		t.Errorf("maxring from [defaults] not applied: %d %d", local.MaxRing, smtp.MaxRing)
	}
	if local.Command.String() != "mailbox" || smtp.Command.String() != "smtp -c $channel" {
		t.Errorf("commands %q %q", local.Command, smtp.Command)
	}
	// idlemax defaults to 3 × the clause's own interval (fixing Q7).
	if local.IdleMax.D() != 15*time.Minute || smtp.IdleMax.D() != 6*time.Minute || hold.IdleMax.D() != time.Hour {
		t.Errorf("idlemax %v %v %v", local.IdleMax, smtp.IdleMax, hold.IdleMax)
	}
	if c.Defaults.IdleMax.D() != 6*time.Minute || c.Defaults.Interval.D() != 2*time.Minute {
		t.Errorf("merged defaults: interval %v idlemax %v", c.Defaults.Interval, c.Defaults.IdleMax)
	}
	if local.Order != OrderAge || !local.AgeOrder || smtp.Order != OrderAge {
		t.Errorf("ageorder from [defaults]: %v %v", local.Order, smtp.Order)
	}
	if hold.Order != OrderRandom || hold.AgeOrder {
		t.Errorf("clause order did not override: %v ageorder %v", hold.Order, hold.AgeOrder)
	}
	// Preemption needs slot cost; with cost 0 it is plain FIFO (DESIGN §7).
	if slow.Order != OrderFIFO || slow.AgeOrder {
		t.Errorf("preemptive with cost 0 = %v", slow.Order)
	}
	if smtp.InitialConcurrency != 2 {
		t.Errorf("initial concurrency %d above maxthr 2", smtp.InitialConcurrency)
	}
	if !slices.Equal(smtp.Retries, []int{0}) {
		t.Errorf("jackhammer retries = %v", smtp.Retries)
	}
	// Clauses must not share slices: a consumer editing one must not edit another.
	local.Retries[0] = 99
	if c.Clauses[3].Retries[0] == 99 || c.Defaults.Retries[0] == 99 {
		t.Error("clauses share a retries array")
	}
	if local.Line != 4 || c.Defaults.Line != 0 {
		t.Errorf("lines %d %d", local.Line, c.Defaults.Line)
	}
}

func TestAutoOrder(t *testing.T) {
	c := mustParse(t, head+`
[defaults]
command = "x"
[[clause]]
select = "a"
[[clause]]
select = "b"
delivery_slot_cost = 0
`)
	if c.Clauses[0].Order != OrderPreemptive || c.Clauses[1].Order != OrderFIFO {
		t.Errorf("orders %v %v", c.Clauses[0].Order, c.Clauses[1].Order)
	}
}

func TestMatch(t *testing.T) {
	c := mustParse(t, head+`
[defaults]
command = "x"
[[clause]]
select = "local/*"
[[clause]]
select = "smtp/*.{se,dk}"
[[clause]]
select = "SMTP/*.Example.COM"
[[clause]]
select = "smtp/*.se" # shadowed by the clause above it
[[clause]]
select = "smtp*"
[[clause]]
select = "[a-c]x/[^m]*"
`)
	tests := []struct {
		channel, host string
		want          int
	}{
		{"local", "anything", 0},
		{"local", "", 0},
		{"smtp", "mx.se", 1}, // first match wins over clause 3
		{"smtp", "mx.example.com", 2},
		{"SMTP", "MX.EXAMPLE.COM", 2},
		{"smtp", "mx.example.org", 4},
		{"smtp", "", 4}, // no '/': any host, the empty one included
		{"smtp-etrn", "x", 4},
		{"bx", "host", 5},
		{"bx", "mx", -1},
		{"error", "x", -1},
	}
	for _, tt := range tests {
		i, ok := c.Match(tt.channel, tt.host)
		if i != tt.want || ok != (tt.want >= 0) {
			t.Errorf("Match(%q, %q) = %d, %v; want %d", tt.channel, tt.host, i, ok, tt.want)
		}
	}
	// A Config built by hand (as the core's tests do) matches the same way.
	byHand := &Config{Clauses: slices.Clone(c.Clauses)}
	for _, tt := range tests {
		if i, _ := byHand.Match(tt.channel, tt.host); i != tt.want {
			t.Errorf("hand-built Match(%q, %q) = %d, want %d", tt.channel, tt.host, i, tt.want)
		}
	}
	// Editing a Select after Parse is honoured.
	c.Clauses[0].Select = "lmtp"
	if i, _ := c.Match("local", "x"); i != -1 {
		t.Errorf("edited select still matches: %d", i)
	}
}

func TestLoadResolvesRelativePaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "scheduler.toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := `[scheduler]
postoffice = "po"
statelog = "../log/attempts"
[[clause]]
select = "a"
command = "FOO=1 bin/ta -c a"
[[clause]]
select = "b"
command = "/usr/lib/ta/smtp"
[[clause]]
select = "c"
command = "mailbox"
`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	s := c.Scheduler
	if s.Postoffice != filepath.Join(sub, "po") || s.StateLog != filepath.Join(dir, "log", "attempts") {
		t.Errorf("postoffice %q statelog %q", s.Postoffice, s.StateLog)
	}
	if s.ControlSocket != filepath.Join(sub, "po", "transport", ".scheduler.sock") ||
		s.NotifySocket != filepath.Join(sub, "po", "transport", ".scheduler.notify") {
		t.Errorf("sockets %q %q", s.ControlSocket, s.NotifySocket)
	}
	if got := c.Clauses[0].Command.Argv[0]; got != filepath.Join(sub, "bin", "ta") {
		t.Errorf("relative program = %q", got)
	}
	if got := c.Clauses[1].Command.Argv[0]; got != "/usr/lib/ta/smtp" {
		t.Errorf("absolute program = %q", got)
	}
	if got := c.Clauses[2].Command.Argv[0]; got != "mailbox" {
		t.Errorf("bare program = %q, want it left for PATH", got)
	}
	if c.File != path {
		t.Errorf("File = %q", c.File)
	}

	if _, err := Load(filepath.Join(dir, "missing.toml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v", err)
	}
}

// TestCluster: the [cluster] table reaches Config.Cluster with its
// defaults, the lease in scheduler.toml's duration syntax and a relative
// password file resolved; without the table nothing is shared.
func TestCluster(t *testing.T) {
	if c := mustParse(t, head); c.Cluster != nil {
		t.Fatalf("no [cluster]: %+v", c.Cluster)
	}
	c, err := Parse("/etc/zsched/scheduler.toml", []byte(head+`
[cluster]
redis = "rediss://user@redis.example:6380/2"
password_file = "redis.secret"
node = "mx1"
lease = "1d"
prefix = "mail:"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := cluster.Config{Redis: "rediss://user@redis.example:6380/2", PasswordFile: "/etc/zsched/redis.secret",
		Node: "mx1", Lease: 24 * time.Hour, Prefix: "mail:"}
	if c.Cluster == nil || *c.Cluster != want {
		t.Fatalf("got %+v\nwant %+v", c.Cluster, want)
	}
	c = mustParse(t, head+"[cluster]\nredis = \"redis://127.0.0.1:6379/0\"\n")
	if d := cluster.Default(); c.Cluster.Node != d.Node || c.Cluster.Lease != cluster.DefaultLease || c.Cluster.Prefix != cluster.DefaultPrefix {
		t.Fatalf("defaults: %+v", c.Cluster)
	}
	if e := c.ClusterErrorf("lease", "x"); e.Key != "cluster.lease" || e.Line != 3 { // no lease: the header's line
		t.Errorf("ClusterErrorf: %+v", e)
	}
	// A borrowed job (feed = "message") takes a lease of its own on its
	// destination's shared window (core/book.go, borrowLease): the key is
	// allowed with [cluster].
	c, err = Parse("scheduler.toml", []byte(head+`
[[clause]]
select = "smtp/*"
command = "smtp"
feed = "message"
[cluster]
redis = "redis://127.0.0.1:6379/0"
`))
	if err != nil || c.Cluster == nil || c.Clauses[len(c.Clauses)-1].Feed != FeedMessage {
		t.Fatalf(`feed = "message" with [cluster]: %v`, err)
	}
}

func TestMetricsListen(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9100", "127.0.0.2:0", "[::1]:9100", "localhost:9100"} {
		mustParse(t, head+`metrics_listen = "`+addr+`"`)
	}
	c := mustParse(t, head+"metrics_listen = \"0.0.0.0:9100\"\nmetrics_public = true\n")
	if !c.Scheduler.MetricsPublic {
		t.Error("metrics_public not set")
	}
}

// The shipped file loads through the real path, and what it documents as
// defaults are the defaults.
func TestShippedConfig(t *testing.T) {
	const shipped = "../scheduler.toml"
	c, err := Load(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(c.Scheduler.Postoffice) || !strings.HasSuffix(c.Scheduler.Postoffice, filepath.Join("example", "postoffice")) {
		t.Errorf("postoffice = %q", c.Scheduler.Postoffice)
	}
	for _, tt := range []struct{ channel, host, sel string }{
		{"local", "user", "local/*"},
		{"error", "", "error/*"},
		{"smtp-etrn", "mx.example.com", "smtp-etrn/*"},
		{"smtp", "mx.example.com", "smtp/*"},
	} {
		i, ok := c.Match(tt.channel, tt.host)
		if !ok || c.Clauses[i].Select != tt.sel {
			t.Errorf("%s/%s matched %d, want %s", tt.channel, tt.host, i, tt.sel)
			continue
		}
		cl := c.Clauses[i]
		if prog := cl.Command.Argv[0]; !filepath.IsAbs(prog) || !strings.HasSuffix(prog, filepath.Join("testagents", "bin", "sink")) {
			t.Errorf("%s: program %q", tt.sel, prog)
		}
		if !slices.Equal(cl.Command.Argv[1:], []string{"-c", tt.channel}) || cl.Command.HostBound() {
			t.Errorf("%s: command %q", tt.sel, cl.Command)
		}
	}
	smtp := c.Clauses[len(c.Clauses)-1]
	if smtp.MaxRing != 20 || smtp.Overfeed != 2 {
		t.Errorf("smtp/*: maxring %d overfeed %d", smtp.MaxRing, smtp.Overfeed)
	}
	if i, _ := c.Match("smtp-etrn", "x"); !c.Clauses[i].QueueOnly {
		t.Error("smtp-etrn/* is not queueonly")
	}

	def := Default()
	if !reflect.DeepEqual(c.Defaults, def.Defaults) {
		t.Errorf("shipped [defaults] differ from the built-in defaults:\n got %+v\nwant %+v", c.Defaults, def.Defaults)
	}
	got := c.Scheduler
	got.Postoffice, got.ControlSocket, got.NotifySocket = "", "", ""
	if got != def.Scheduler {
		t.Errorf("shipped [scheduler] differs from the built-in defaults:\n got %+v\nwant %+v", got, def.Scheduler)
	}

	// Every key is documented in the shipped file.
	text, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keyNames(clauseTable) {
		if !strings.Contains(string(text), k+" =") {
			t.Errorf("clause key %s is not in the shipped file", k)
		}
	}
	for _, k := range keyNames(schedulerTable) {
		if !strings.Contains(string(text), k+" =") {
			t.Errorf("scheduler key %s is not in the shipped file", k)
		}
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	d := c.Defaults
	// Postfix's knobs keep Postfix's defaults (DESIGN §5).
	if d.InitialConcurrency != 5 || d.MaxThr != 20 || d.FailedCohortLimit != 1 ||
		d.DeliverySlotCost != 5 || d.DeliverySlotLoan != 3 || d.DeliverySlotDiscount != 50 || d.MinimumDeliverySlots != 3 {
		t.Errorf("Postfix defaults: %+v", d)
	}
	if d.PositiveFeedback.Of(4) != 0.25 || d.NegativeFeedback.Of(4) != 0.25 {
		t.Errorf("feedback defaults %v %v", d.PositiveFeedback, d.NegativeFeedback)
	}
	if d.IdleMax != 3*d.Interval {
		t.Errorf("idlemax %v is not 3 × interval %v", d.IdleMax, d.Interval)
	}
	if c.Scheduler.Postoffice != "" || len(c.Clauses) != 0 {
		t.Errorf("Default has a postoffice or clauses: %+v", c)
	}
	// Each call is independent.
	c.Defaults.Retries[0] = 42
	if Default().Defaults.Retries[0] == 42 {
		t.Error("Default shares its retries array")
	}
}

func TestFeedback(t *testing.T) {
	tests := []struct {
		in   string
		kind FeedbackKind
		val  float64
		at4  float64
	}{
		{"1/concurrency", FeedbackInverse, 1, 0.25},
		{"1/sqrt_concurrency", FeedbackInverseSqrt, 1, 0.5},
		{"0.5/concurrency", FeedbackInverse, 0.5, 0.125},
		{"1", FeedbackFixed, 1, 1},
		{"0.25", FeedbackFixed, 0.25, 0.25},
		{"1/8", FeedbackFixed, 0.125, 0.125},
	}
	for _, tt := range tests {
		f, err := ParseFeedback(tt.in)
		if err != nil {
			t.Errorf("ParseFeedback(%q): %v", tt.in, err)
			continue
		}
		if f.Kind != tt.kind || f.Value != tt.val || f.Of(4) != tt.at4 {
			t.Errorf("ParseFeedback(%q) = %+v, Of(4) = %g; want %v %g %g", tt.in, f, f.Of(4), tt.kind, tt.val, tt.at4)
		}
		back, err := ParseFeedback(f.String())
		if err != nil || back != f {
			t.Errorf("%q: String %q parses back as %+v, %v", tt.in, f.String(), back, err)
		}
	}
	for _, in := range []string{"", "0", "1.5", "-1", "NaN", "Inf", "2/concurrency", "1/0", "x/concurrency", "1/n"} {
		if f, err := ParseFeedback(in); err == nil {
			t.Errorf("ParseFeedback(%q) = %+v, want an error", in, f)
		}
	}
	// Concurrency below 1 cannot make the step infinite or larger than Value.
	if got := (Feedback{Kind: FeedbackInverse, Value: 1}).Of(0); got != 1 {
		t.Errorf("Of(0) = %g", got)
	}
	if math.IsInf((Feedback{Kind: FeedbackInverseSqrt, Value: 1}).Of(0), 0) {
		t.Error("Of(0) is infinite")
	}
}

func TestEnumsRoundTrip(t *testing.T) {
	for o := OrderPreemptive; o <= OrderAge; o++ {
		var back Order
		if err := back.UnmarshalText([]byte(o.String())); err != nil || back != o {
			t.Errorf("order %v: %v %v", o, back, err)
		}
	}
	for s := StdioSocketpair; s <= StdioPTY; s++ {
		var back Stdio
		if err := back.UnmarshalText([]byte(s.String())); err != nil || back != s {
			t.Errorf("stdio %v: %v %v", s, back, err)
		}
	}
	if Order(9).String() != "Order(9)" || FeedbackKind(9).String() != "FeedbackKind(9)" {
		t.Error("unknown enum values must print distinctly")
	}
}

// The scheduling core imports config; it must not pull in process or network code.
func TestNoExecOrNet(t *testing.T) {
	gobin := need.Program(t, "go")
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "os/exec" || dep == "net" {
			t.Errorf("config depends on %s", dep)
		}
	}
}

func TestLinesOfImplicitTables(t *testing.T) {
	doc := `[scheduler.sub] #<-
x = 1
[scheduler]
postoffice = "/p"
bogus = 1`
	_, err := Parse("t.toml", []byte(doc))
	if err == nil || !strings.Contains(err.Error(), "t.toml:1: scheduler.sub: unknown key") ||
		!strings.Contains(err.Error(), "t.toml:5: scheduler.bogus: unknown key") {
		t.Errorf("got %v", err)
	}
}

package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"zsched/cluster"
)

// Load reads and parses the file at path. Relative paths inside it (postoffice,
// sockets, state log, agent programs) are resolved against the file's directory,
// made absolute so they survive the daemon changing directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := parse(path, filepath.Dir(abs), data)
	if err != nil {
		return nil, err
	}
	c.File = abs
	return c, nil
}

// Parse parses and validates a scheduler.toml held in data. name is the file's
// path: errors name it, and relative paths inside are resolved against its
// directory. Validation errors are *Error values, joined when there are several,
// ordered by line.
func Parse(name string, data []byte) (*Config, error) {
	c, err := parse(name, filepath.Dir(name), data)
	if err != nil {
		return nil, err
	}
	c.File = name
	return c, nil
}

// parser collects the errors of one parse.
type parser struct {
	file  string
	dir   string
	lines *fileLines
	errs  []*Error
}

func (p *parser) errorf(line int, key, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// fail records err (from a value parser) against key.
func (p *parser) fail(line int, key string, err error) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Key: key, Msg: strings.TrimPrefix(err.Error(), "config: "), err: err})
}

func parse(name, dir string, data []byte) (*Config, error) {
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		e := &Error{File: name, Msg: err.Error(), err: err}
		var pe toml.ParseError
		if errors.As(err, &pe) {
			e.Line, e.Msg = pe.Position.Line, pe.Message
		}
		return nil, e
	}
	p := &parser{file: name, dir: dir, lines: scanLines(string(data))}
	c := Default()
	c.lines = p.lines

	for _, key := range sortedKeys(raw) {
		switch key {
		case "scheduler", "defaults", "clause", "cluster":
		default:
			p.errorf(p.lines.top(key), key, "unknown key%s", hint("", key))
		}
	}

	if v, ok := raw["scheduler"]; ok {
		if m, ok := v.(map[string]any); ok {
			p.scheduler(&c.Scheduler, m, p.lines.table("scheduler"))
		} else {
			p.errorf(p.lines.top("scheduler"), "scheduler", "must be a table ([scheduler]), not %s", tomlType(v))
		}
	}
	sm, _ := raw["scheduler"].(map[string]any)
	_, written := sm["postoffice"]
	p.finishScheduler(&c.Scheduler, p.lines.table("scheduler"), written)

	defaults := layer{c: c.Defaults}
	if v, ok := raw["defaults"]; ok {
		if m, ok := v.(map[string]any); ok {
			p.clause(&defaults, "defaults", m, p.lines.table("defaults"))
		} else {
			p.errorf(p.lines.top("defaults"), "defaults", "must be a table ([defaults]), not %s", tomlType(v))
		}
	}
	c.Defaults = p.finishClause(defaults, "defaults", p.lines.table("defaults"))

	if v, ok := raw["clause"]; ok {
		elems, ok := tables(v)
		if !ok {
			p.errorf(p.lines.top("clause"), "clause", "must be an array of tables ([[clause]]), not %s", tomlType(v))
		}
		for i, m := range elems {
			tl := p.lines.element("clause", i)
			l := defaults
			l.c.Line = tl.header
			p.clause(&l, "clause", m, tl)
			cl := p.finishClause(l, "clause", tl)
			c.Clauses = append(c.Clauses, cl)
			c.clauseLines = append(c.clauseLines, tl)
			c.sel = append(c.sel, newSelector(cl.Select))
		}
	}

	if v, ok := raw["cluster"]; ok {
		if m, ok := v.(map[string]any); ok {
			c.Cluster = p.cluster(m, p.lines.table("cluster"))
		} else {
			p.errorf(p.lines.top("cluster"), "cluster", "must be a table ([cluster]), not %s", tomlType(v))
		}
	}

	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
		errs := make([]error, len(p.errs))
		for i, e := range p.errs {
			errs[i] = e
		}
		if len(errs) == 1 {
			return nil, errs[0]
		}
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// tables returns v as an array of tables.
func tables(v any) ([]map[string]any, bool) {
	switch t := v.(type) {
	case []map[string]any:
		return t, true
	case []any:
		out := make([]map[string]any, 0, len(t))
		for _, e := range t {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			out = append(out, m)
		}
		return out, true
	}
	return nil, false
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// --- [scheduler] ---

func (p *parser) scheduler(s *Scheduler, m map[string]any, tl *tableLines) {
	for _, key := range sortedKeys(m) {
		k := findKey(schedulerTable, key)
		if k == nil {
			p.errorf(tl.line(key), "scheduler."+key, "unknown key%s", hint("scheduler", key))
			continue
		}
		if err := k.assign(s, m[key]); err != nil {
			p.fail(tl.line(key), "scheduler."+key, err)
		}
	}
}

// finishScheduler resolves paths and derived defaults; postofficeWritten
// avoids reporting a postoffice with a bad value as missing too.
func (p *parser) finishScheduler(s *Scheduler, tl *tableLines, postofficeWritten bool) {
	if s.Postoffice == "" {
		if !postofficeWritten {
			p.errorf(tl.header, "scheduler.postoffice", "required: the spool root holding queue/ and transport/")
		}
		return
	}
	s.Postoffice = p.resolve(s.Postoffice)
	transport := filepath.Join(s.Postoffice, "transport")
	if s.ControlSocket == "" {
		s.ControlSocket = filepath.Join(transport, ".scheduler.sock")
	} else {
		s.ControlSocket = p.resolve(s.ControlSocket)
	}
	if s.NotifySocket == "" {
		s.NotifySocket = filepath.Join(transport, ".scheduler.notify")
	} else {
		s.NotifySocket = p.resolve(s.NotifySocket)
	}
	if s.StateLog != "" {
		s.StateLog = p.resolve(s.StateLog)
	}
	if s.ControlAuth != "" {
		s.ControlAuth = p.resolve(s.ControlAuth)
	}
	if s.ControlListen != "" && s.ControlAuth == "" {
		p.errorf(tl.line("control_listen"), "scheduler.control_listen", "needs control_auth: the TCP listener speaks MAILQ v2 AUTH")
	}
	if s.MetricsListen != "" {
		loopback, err := checkListen(s.MetricsListen)
		switch {
		case err != nil:
			p.errorf(tl.line("metrics_listen"), "scheduler.metrics_listen", "%v", err)
		case !loopback && !s.MetricsPublic:
			p.errorf(tl.line("metrics_listen"), "scheduler.metrics_listen",
				"%q is not a loopback address (127.0.0.0/8, ::1, localhost); set metrics_public = true to serve metrics beyond this host", s.MetricsListen)
		}
	}
}

func (p *parser) resolve(path string) string {
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	return filepath.Join(p.dir, path)
}

// checkListen parses host:port without the net package (the core imports this
// package and must not link net) and reports whether host is loopback.
func checkListen(addr string) (loopback bool, err error) {
	var host, port string
	if strings.HasPrefix(addr, "[") {
		h, rest, ok := strings.Cut(addr[1:], "]")
		if !ok || !strings.HasPrefix(rest, ":") {
			return false, fmt.Errorf("%q: want host:port", addr)
		}
		host, port = h, rest[1:]
	} else {
		i := strings.LastIndexByte(addr, ':')
		if i < 0 || strings.Contains(addr[:i], ":") {
			return false, fmt.Errorf("%q: want host:port (an IPv6 host goes in brackets)", addr)
		}
		host, port = addr[:i], addr[i+1:]
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil || !isDigits(port) {
		return false, fmt.Errorf("%q: port %q is not a number in 0..65535", addr, port)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false, nil // a name or the empty (all interfaces) host
	}
	return ip.IsLoopback(), nil
}

// --- [cluster] ---

// cluster reads the [cluster] table through cluster.FromTable (which owns
// its keys and rules), the lease in scheduler.toml's duration syntax, and
// reports each error at its key's line.
func (p *parser) cluster(m map[string]any, tl *tableLines) *cluster.Config {
	m = maps.Clone(m)
	if s, ok := m["lease"].(string); ok {
		d, err := ParseDuration(s)
		if err != nil {
			p.fail(tl.line("lease"), "cluster.lease", err)
			delete(m, "lease")
		} else {
			m["lease"] = d.D()
		}
	}
	cc, err := cluster.FromTable(m, p.dir)
	for _, e := range flatten(err) {
		var ke *cluster.KeyError
		if !errors.As(e, &ke) {
			p.errorf(tl.header, "cluster", "%v", e)
			continue
		}
		if ke.Key == "" {
			p.errorf(tl.header, "cluster", "%v", ke.Err)
			continue
		}
		p.errorf(tl.line(ke.Key), "cluster."+ke.Key, "%v", ke.Err)
	}
	return &cc
}

// flatten lists the errors joined in err.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// --- clauses and [defaults] ---

// layer is a clause being overlaid, with the facts the overlay needs beyond
// the values: whether idlemax and the order were written anywhere.
type layer struct {
	c        Clause
	idleSet  bool
	orderSet bool
	// Written but perhaps invalid: such a key has its own error already and
	// is not reported as missing too.
	selectWritten, commandWritten bool
}

// clause overlays the keys of one [defaults] or [[clause]] table onto l.
func (p *parser) clause(l *layer, section string, m map[string]any, tl *tableLines) {
	if a, ok := m["ageorder"].(bool); ok {
		if o, ok := m["order"].(string); ok && a != (o == "age") {
			p.errorf(tl.line("ageorder"), section+".ageorder", "ageorder = %t contradicts order = %q in the same table", a, o)
		}
	}
	for _, key := range sortedKeys(m) {
		k := findKey(clauseTable, key)
		if k == nil || k.clauseOnly && section != "clause" {
			p.errorf(tl.line(key), section+"."+key, "unknown key%s", hint(section, key))
			continue
		}
		if err := k.assign(l, m[key]); err != nil {
			p.fail(tl.line(key), section+"."+key, err)
		}
	}
}

// finishClause resolves the values derived from others once every layer is
// on, and checks what only the whole clause can tell.
func (p *parser) finishClause(l layer, section string, tl *tableLines) Clause {
	c := l.c
	c.Retries = slices.Clone(c.Retries) // no clause shares another's backing array
	if !l.idleSet {
		c.IdleMax = Duration(mulSat(time.Duration(c.Interval), 3))
	}
	switch {
	case !l.orderSet, c.Order == OrderPreemptive && c.DeliverySlotCost == 0:
		// delivery_slot_cost = 0 turns preemption off (DESIGN §7).
		c.Order = OrderPreemptive
		if c.DeliverySlotCost == 0 {
			c.Order = OrderFIFO
		}
	}
	c.AgeOrder = c.Order == OrderAge
	// The window never exceeds maxthr; a clause that lowers maxthr below the
	// inherited initial concurrency simply starts at its ceiling.
	c.InitialConcurrency = min(c.InitialConcurrency, c.MaxThr)
	for _, f := range c.Retries {
		if f > 0 && time.Duration(c.Interval) > math.MaxInt64/time.Duration(f) {
			p.errorf(tl.line("retries"), section+".retries", "factor %d × interval %s overflows", f, c.Interval)
			break
		}
	}
	if len(c.Command.Argv) > 0 {
		c.Command.Env = slices.Clone(c.Command.Env)
		c.Command.Argv = slices.Clone(c.Command.Argv)
		// A program given with a path is relative to the config file, so
		// a checkout runs from anywhere; a bare name is looked up in PATH.
		if prog := c.Command.Argv[0]; strings.ContainsRune(prog, '/') {
			c.Command.Argv[0] = p.resolve(prog)
		}
	}
	if section == "clause" {
		if c.Select == "" && !l.selectWritten {
			p.errorf(tl.header, "clause.select", "required: which channel/host this clause serves, e.g. \"smtp/*\"")
		}
		if c.Command.IsZero() && !l.commandWritten {
			what := "this clause"
			if c.Select != "" {
				what = strconv.Quote(c.Select)
			}
			p.errorf(tl.line("command"), "clause.command", "required: %s has no command, and [defaults] gives none", what)
		}
		if c.Feed == FeedMessage && c.Command.HostBound() {
			// Its agents serve one host: there are no peers on other
			// hosts to feed them.
			p.errorf(tl.line("feed"), "clause.feed", "%q needs a command that is not host-bound (no $host): its agents serve one host", FeedMessage)
		}
	}
	return c
}

func mulSat(d time.Duration, n int64) time.Duration {
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// --- value setters: each checks the TOML type and the range ---

func setInt(dst *int, v any, lo, hi int) error {
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("want an integer, not %s", tomlType(v))
	}
	if n < int64(lo) || n > int64(hi) {
		switch {
		case hi == math.MaxInt:
			return fmt.Errorf("must be >= %d (got %d)", lo, n)
		default:
			return fmt.Errorf("must be in %d..%d (got %d)", lo, hi, n)
		}
	}
	*dst = int(n)
	return nil
}

func setBool(dst *bool, v any) error {
	b, ok := v.(bool)
	if !ok {
		return fmt.Errorf("want true or false, not %s", tomlType(v))
	}
	*dst = b
	return nil
}

func setString(dst *string, v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a string, not %s", tomlType(v))
	}
	*dst = s
	return nil
}

func setPath(dst *string, v any) error {
	var s string
	if err := setString(&s, v); err != nil {
		return err
	}
	if s == "" {
		return errors.New("must not be empty")
	}
	if strings.ContainsRune(s, 0) {
		return errors.New("contains NUL")
	}
	*dst = s
	return nil
}

// setID accepts a user or group as a name or a numeric id.
func setID(dst *string, v any) error {
	switch t := v.(type) {
	case string:
		*dst = t
	case int64:
		if t < 0 || t > math.MaxUint32-1 {
			return fmt.Errorf("id %d out of range", t)
		}
		*dst = strconv.FormatInt(t, 10)
	default:
		return fmt.Errorf("want a name or a numeric id, not %s", tomlType(v))
	}
	return nil
}

func setWord(dst *string, v any, words ...string) error {
	var s string
	if err := setString(&s, v); err != nil {
		return err
	}
	if !slices.Contains(words, strings.ToLower(s)) {
		return fmt.Errorf("%q: want one of %s", s, strings.Join(words, ", "))
	}
	*dst = strings.ToLower(s)
	return nil
}

// setText decodes a string through T's UnmarshalText.
func setText[T any, PT interface {
	*T
	UnmarshalText([]byte) error
}](dst *T, v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a string, not %s", tomlType(v))
	}
	var t T
	if err := PT(&t).UnmarshalText([]byte(s)); err != nil {
		return err
	}
	*dst = t
	return nil
}

// setDuration accepts a duration string or an integer of seconds.
func setDuration(dst *Duration, v any, positive bool) error {
	var d Duration
	switch t := v.(type) {
	case string:
		var err error
		if d, err = ParseDuration(t); err != nil {
			return err
		}
	case int64:
		if t < 0 || t > math.MaxInt64/int64(time.Second) {
			return fmt.Errorf("%d seconds: out of range", t)
		}
		d = Duration(time.Duration(t) * time.Second)
	default:
		return fmt.Errorf("want a duration such as \"90s\", \"1h30m\" or \"5d\", not %s", tomlType(v))
	}
	if positive && d == 0 {
		return errors.New("must be greater than 0")
	}
	*dst = d
	return nil
}

func setFeedback(dst *Feedback, v any) error {
	switch t := v.(type) {
	case string:
		return setText(dst, v)
	case int64:
		return setFeedback(dst, float64(t))
	case float64:
		f := Feedback{Kind: FeedbackFixed, Value: t}
		if err := f.check(); err != nil {
			return err
		}
		*dst = f
		return nil
	}
	return fmt.Errorf("want \"1/concurrency\", \"1/sqrt_concurrency\" or a number in (0,1], not %s", tomlType(v))
}

const maxRetries = 100 // ZMailer's limit

func setRetries(dst *[]int, v any) error {
	var words []any
	switch t := v.(type) {
	case []any:
		words = t
	case int64:
		words = []any{t} // retries = 0, ZMailer's "jackhammer"
	case string:
		// ZMailer's form: retries = "1 1 2 3 5".
		for _, f := range strings.Fields(t) {
			n, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not an integer", f)
			}
			words = append(words, n)
		}
	default:
		return fmt.Errorf("want an array of integers, not %s", tomlType(v))
	}
	if len(words) == 0 {
		return errors.New("must list at least one factor (0 retries at once)")
	}
	if len(words) > maxRetries {
		return fmt.Errorf("%d factors: at most %d", len(words), maxRetries)
	}
	out := make([]int, len(words))
	for i, w := range words {
		n, ok := w.(int64)
		if !ok {
			return fmt.Errorf("factor %d is %s, not an integer", i+1, tomlType(w))
		}
		if n < 0 || n > math.MaxInt32 {
			return fmt.Errorf("factor %d: %d must be in 0..%d", i+1, n, math.MaxInt32)
		}
		out[i] = int(n)
	}
	*dst = out
	return nil
}

func setSelect(dst *string, v any) error {
	var s string
	if err := setString(&s, v); err != nil {
		return err
	}
	if err := checkSelect(s); err != nil {
		return err
	}
	*dst = s
	return nil
}

// checkSelect validates "channelglob/hostglob" or "channelglob".
func checkSelect(s string) error {
	if strings.Count(s, "/") > 1 {
		return fmt.Errorf("%q: want channelglob/hostglob, with one '/' at most", s)
	}
	ch, host, hasHost := strings.Cut(s, "/")
	if ch == "" {
		return fmt.Errorf("%q: empty channel pattern", s)
	}
	if hasHost && host == "" {
		return fmt.Errorf("%q: empty host pattern (leave out the '/' to mean any host)", s)
	}
	if err := CheckGlob(ch); err != nil {
		return err
	}
	return CheckGlob(host)
}

// tomlType names the TOML type of a decoded value, with its article, for
// messages such as "want a string, not an integer".
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a datetime"
	}
	return fmt.Sprintf("a %T", v)
}

// zmailerOnly names ZMailer scheduler.conf keywords zsched does not take, with why.
var zmailerOnly = map[string]string{
	"priority":          "ZMailer's priority never worked (quirk Q11); use nice",
	"syspriority":       "it renices the scheduler itself; run the scheduler under nice instead",
	"sysnice":           "it renices the scheduler itself; run the scheduler under nice instead",
	"wakeuprestartonly": "zsched never restarts a backing-off thread on arrival (quirk Q6)",
	"bychannel":         "obsolete in ZMailer too",
	"reporttimes":       "use [scheduler] delay_warning_time (one delay warning per message)",
	"deliveryform":      "ZMailer never applied it (quirk Q12)",
	"expiryform":        "ZMailer never applied it (quirk Q12)",
	"byhost":            "obsolete in ZMailer too; a standalone $host in command binds a ring to a host",
	"maxhost":           "obsolete in ZMailer too; use maxthr",
}

// hint suggests what an unknown key in section may have meant.
func hint(section, key string) string {
	if why, ok := zmailerOnly[strings.ToLower(key)]; ok {
		return " (ZMailer's " + key + " is not supported: " + why + ")"
	}
	fold := func(s string) string { return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s)) }
	want := fold(key)
	type known struct {
		section string
		keys    []string
	}
	candidates := []known{{"clause", keyNames(clauseTable)}, {"scheduler", keyNames(schedulerTable)}}
	for _, k := range candidates {
		for _, name := range k.keys {
			if fold(name) != want {
				continue
			}
			inSection := k.section == section || k.section == "clause" && section == "defaults"
			switch {
			case inSection && section == "defaults" && findKey(clauseTable, name).clauseOnly:
				return " (" + name + " belongs in a [[clause]])"
			case inSection:
				return fmt.Sprintf(" (did you mean %q?)", name)
			case k.section == "clause":
				return fmt.Sprintf(" (%s belongs in [defaults] or a [[clause]])", name)
			default:
				return fmt.Sprintf(" (%s belongs in [scheduler])", name)
			}
		}
	}
	return ""
}

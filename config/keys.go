package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
)

// The tables below are the one description of scheduler.toml's keys. A row
// says which field a key fills, its built-in default, the bounds its value
// must keep, and what other code needs to know about it. Everything else is
// derived from the rows: the built-in defaults (Default), parsing and
// validation (Parse), the lists of known keys (unknown-key hints, the test
// that the shipped scheduler.toml documents every key), SameAgent (may an
// agent started for one clause serve another after a reload) and the
// settings a reload cannot change (RestartKeys).
//
// To add a key:
//
//  1. Add the field to Scheduler or Clause, with a comment saying what it is.
//  2. Add one row to schedulerTable or clauseTable: its name, the field, its
//     default, and the bound its kind takes (lo/hi for integers, positive
//     for durations, words/path/id for strings). A key with a rule of its
//     own gives set. Mark agent (a clause key that changes how an agent is
//     started) or restart/fixed (a [scheduler] key a reload cannot apply).
//  3. Document it in scheduler.toml, with its default: TestShippedConfig
//     fails until the shipped file names every key, and until the defaults
//     it shows are the table's.
//
// A value derived from others after the overlay (idlemax, the order) is
// resolved in finishClause or finishScheduler; a check that needs the host
// (a program, a user, a directory) belongs to package preflight.

// key is one row: a key of the table whose settings are a T.
type key[T any] struct {
	name string
	// field returns a pointer to the field the key fills; its type picks
	// the setter (see assign). nil for a key that fills no field of its own
	// (ageorder), which then has set.
	field func(*T) any
	// def is the built-in default written as TOML decodes it (an integer,
	// a string, a bool, a list of integers); nil leaves the zero value.
	def any

	lo, hi   int      // integers: the inclusive range; hi unbounded is math.MaxInt
	positive bool     // durations: 0 is refused
	path     bool     // strings: a path, non-empty, relative to the file's directory
	id       bool     // strings: a user or group, a name or a numeric id
	words    []string // strings: one of these, compared in lowercase

	// set replaces the setter the field's type picks, for a key with a rule
	// of its own.
	set func(*T, any) error
	// mark runs before the value is set, valid or not: a written key is
	// not also reported as missing.
	mark func(*T)

	clauseOnly bool // clause keys: only in a [[clause]], not in [defaults]
	agent      bool // clause keys: part of how an agent is started (SameAgent)
	restart    bool // scheduler keys: a reload keeps the running value
	fixed      bool // scheduler keys: a reload that changes it is refused
}

const unbounded = math.MaxInt

// assign sets the key's field in t from a decoded TOML value.
func (k *key[T]) assign(t *T, v any) error {
	if k.mark != nil {
		k.mark(t)
	}
	if k.set != nil {
		return k.set(t, v)
	}
	switch p := k.field(t).(type) {
	case *int:
		return setInt(p, v, k.lo, k.hi)
	case *bool:
		return setBool(p, v)
	case *Duration:
		return setDuration(p, v, k.positive)
	case *string:
		switch {
		case k.path:
			return setPath(p, v)
		case k.id:
			return setID(p, v)
		case k.words != nil:
			return setWord(p, v, k.words...)
		}
		return setString(p, v)
	case *Feedback:
		return setFeedback(p, v)
	case *[]int:
		return setRetries(p, v)
	case *Stdio:
		return setText(p, v)
	case *Order:
		return setText(p, v)
	case *Command:
		return p.UnmarshalTOML(v)
	}
	// TestKeyTables catches a row whose field has no setter.
	panic(fmt.Sprintf("config: key %s: no setter for %T", k.name, k.field(t)))
}

// tomlValue turns a row's default into what the TOML decoder would give.
func tomlValue(v any) any {
	switch t := v.(type) {
	case int:
		return int64(t)
	case []int:
		out := make([]any, len(t))
		for i, n := range t {
			out[i] = int64(n)
		}
		return out
	}
	return v
}

// applyDefaults sets every row's default in t.
func applyDefaults[T any](t *T, table []key[T]) {
	for i := range table {
		k := &table[i]
		if k.def == nil {
			continue
		}
		if err := k.assign(t, tomlValue(k.def)); err != nil {
			// TestKeyTables loads every default through here.
			panic(fmt.Sprintf("config: default of %s: %v", k.name, err))
		}
	}
}

func findKey[T any](table []key[T], name string) *key[T] {
	for i := range table {
		if table[i].name == name {
			return &table[i]
		}
	}
	return nil
}

func keyNames[T any](table []key[T]) []string {
	names := make([]string, len(table))
	for i := range table {
		names[i] = table[i].name
	}
	slices.Sort(names)
	return names
}

// schedulerTable is [scheduler].
var schedulerTable = []key[Scheduler]{
	{name: "postoffice", field: func(s *Scheduler) any { return &s.Postoffice }, path: true, fixed: true},
	{name: "hash", field: func(s *Scheduler) any { return &s.Hash }, def: 0, lo: 0, hi: 2, fixed: true},
	{name: "scaninterval", field: func(s *Scheduler) any { return &s.ScanInterval }, def: "10s", positive: true},
	{name: "log_level", field: func(s *Scheduler) any { return &s.LogLevel }, def: "info",
		words: []string{"trace", "debug", "info", "warn", "error"}},
	{name: "log_format", field: func(s *Scheduler) any { return &s.LogFormat }, def: "text", words: []string{"text", "json"}},
	{name: "control_socket", field: func(s *Scheduler) any { return &s.ControlSocket }, path: true, restart: true},
	{name: "control_group", field: func(s *Scheduler) any { return &s.ControlGroup }, id: true, restart: true},
	{name: "control_listen", field: func(s *Scheduler) any { return &s.ControlListen }, restart: true},
	{name: "control_auth", field: func(s *Scheduler) any { return &s.ControlAuth }, path: true},
	{name: "notify_socket", field: func(s *Scheduler) any { return &s.NotifySocket }, path: true, restart: true},
	{name: "metrics_listen", field: func(s *Scheduler) any { return &s.MetricsListen }, restart: true},
	{name: "metrics_public", field: func(s *Scheduler) any { return &s.MetricsPublic }, restart: true},
	{name: "maxta", field: func(s *Scheduler) any { return &s.MaxTA }, def: 1000, lo: 1, hi: unbounded},
	{name: "forkrate", field: func(s *Scheduler) any { return &s.ForkRate }, def: 100, lo: 1, hi: unbounded},
	{name: "statelog", field: func(s *Scheduler) any { return &s.StateLog }},
	{name: "message_active_limit", field: func(s *Scheduler) any { return &s.MessageActiveLimit }, def: 20000, lo: 1, hi: unbounded},
	{name: "recipient_active_limit", field: func(s *Scheduler) any { return &s.RecipientActiveLimit }, def: 20000, lo: 1, hi: unbounded},
	{name: "startup_maxring", field: func(s *Scheduler) any { return &s.StartupMaxRing }, def: 2, lo: 0, hi: unbounded},
	{name: "shutdown_timeout", field: func(s *Scheduler) any { return &s.ShutdownTimeout }, def: "10s"},
	{name: "delay_warning_time", field: func(s *Scheduler) any { return &s.DelayWarningTime }},
	{name: "learned_max", field: func(s *Scheduler) any { return &s.LearnedMax }, def: 20000, lo: 0, hi: unbounded},
	{name: "learned_ttl", field: func(s *Scheduler) any { return &s.LearnedTTL }, def: "1h"},
	{name: "max_control_size", field: func(s *Scheduler) any { return &s.MaxControlSize }, def: 64 << 20, lo: 4096, hi: unbounded},
}

// clauseTable is [defaults] and [[clause]]. Its rows fill a layer: the
// clause being overlaid and what the overlay must remember.
var clauseTable = []key[layer]{
	{name: "select", field: func(l *layer) any { return &l.c.Select }, clauseOnly: true,
		mark: func(l *layer) { l.selectWritten = true },
		set:  func(l *layer, v any) error { return setSelect(&l.c.Select, v) }},
	{name: "command", field: func(l *layer) any { return &l.c.Command }, agent: true,
		mark: func(l *layer) { l.commandWritten = true }},
	{name: "stdio", field: func(l *layer) any { return &l.c.Stdio }, def: "socketpair", agent: true},
	{name: "user", field: func(l *layer) any { return &l.c.User }, id: true, agent: true},
	{name: "group", field: func(l *layer) any { return &l.c.Group }, id: true, agent: true},
	{name: "nice", field: func(l *layer) any { return &l.c.Nice }, def: 0, lo: -20, hi: 19, agent: true},

	{name: "interval", field: func(l *layer) any { return &l.c.Interval }, def: "1m", positive: true},
	{name: "retries", field: func(l *layer) any { return &l.c.Retries }, def: []int{1, 1, 2, 3, 5, 8, 13, 21, 34}},
	{name: "skew", field: func(l *layer) any { return &l.c.Skew }, def: 5, lo: 1, hi: unbounded},
	{name: "expiry", field: func(l *layer) any { return &l.c.Expiry }, def: "5d"},
	{name: "expiry2", field: func(l *layer) any { return &l.c.Expiry2 }, def: "2d"},
	// Default 3 × interval, after every layer (finishClause).
	{name: "idlemax", field: func(l *layer) any { return &l.c.IdleMax },
		mark: func(l *layer) { l.idleSet = true }},

	{name: "maxchannel", field: func(l *layer) any { return &l.c.MaxChannel }, def: 1000, lo: 1, hi: unbounded},
	{name: "maxring", field: func(l *layer) any { return &l.c.MaxRing }, def: 20, lo: 1, hi: unbounded},
	{name: "maxthr", field: func(l *layer) any { return &l.c.MaxThr }, def: 20, lo: 1, hi: unbounded},
	{name: "overfeed", field: func(l *layer) any { return &l.c.Overfeed }, def: 0, lo: 0, hi: unbounded},
	{name: "feed", field: func(l *layer) any { return &l.c.Feed }, def: FeedThread, words: []string{FeedThread, FeedMessage}},
	{name: "queueonly", field: func(l *layer) any { return &l.c.QueueOnly }, def: false},
	{name: "ageorder", set: setAgeOrder},
	{name: "order", field: func(l *layer) any { return &l.c.Order }, def: "preemptive",
		set: func(l *layer, v any) error {
			if err := setText(&l.c.Order, v); err != nil {
				return err
			}
			l.orderSet = true
			return nil
		}},
	{name: "jobtimeout", field: func(l *layer) any { return &l.c.JobTimeout }, def: "10m", positive: true},
	{name: "transport_retry_time", field: func(l *layer) any { return &l.c.TransportRetryTime }, def: "1m", positive: true},

	{name: "initial_concurrency", field: func(l *layer) any { return &l.c.InitialConcurrency }, def: 5, lo: 1, hi: unbounded},
	{name: "positive_feedback", field: func(l *layer) any { return &l.c.PositiveFeedback }, def: "1/concurrency"},
	{name: "negative_feedback", field: func(l *layer) any { return &l.c.NegativeFeedback }, def: "1/concurrency"},
	{name: "failed_cohort_limit", field: func(l *layer) any { return &l.c.FailedCohortLimit }, def: 1, lo: 0, hi: unbounded},
	{name: "learned_ceiling", field: func(l *layer) any { return &l.c.LearnedCeiling }, def: true},
	{name: "ceiling_probe_factor", field: func(l *layer) any { return &l.c.CeilingProbeFactor }, def: 10, lo: 1, hi: unbounded},
	{name: "slow_start", field: func(l *layer) any { return &l.c.SlowStart }, def: true},
	{name: "ceiling_ttl", field: func(l *layer) any { return &l.c.CeilingTTL }, def: "1h", positive: true},

	{name: "delivery_slot_cost", field: func(l *layer) any { return &l.c.DeliverySlotCost }, def: 5,
		set: func(l *layer, v any) error {
			var n int
			if err := setInt(&n, v, 0, math.MaxInt); err != nil {
				return err
			}
			if n == 1 {
				// Postfix: "The minimal value the scheduling algorithm can use is 2".
				return errors.New("must be 0 (no preemption) or >= 2")
			}
			l.c.DeliverySlotCost = n
			return nil
		}},
	{name: "delivery_slot_loan", field: func(l *layer) any { return &l.c.DeliverySlotLoan }, def: 3, lo: 0, hi: unbounded},
	{name: "delivery_slot_discount", field: func(l *layer) any { return &l.c.DeliverySlotDiscount }, def: 50, lo: 0, hi: 100},
	{name: "minimum_delivery_slots", field: func(l *layer) any { return &l.c.MinimumDeliverySlots }, def: 3, lo: 0, hi: unbounded},
}

// setAgeOrder is ZMailer's ageorder flag: true is order = "age"; false
// undoes an age order inherited from a layer below.
func setAgeOrder(l *layer, v any) error {
	var age bool
	if err := setBool(&age, v); err != nil {
		return err
	}
	if age {
		l.c.Order, l.orderSet = OrderAge, true
	} else if l.c.Order == OrderAge {
		l.orderSet = false // back to the default order
	}
	return nil
}

// SameAgent reports whether an agent started for clause a can serve
// clause b: every key marked agent (the command, its stdio, user, group
// and nice) is the same.
func SameAgent(a, b *Clause) bool {
	la, lb := layer{c: *a}, layer{c: *b}
	for i := range clauseTable {
		k := &clauseTable[i]
		if !k.agent {
			continue
		}
		if !reflect.DeepEqual(reflect.ValueOf(k.field(&la)).Elem().Interface(),
			reflect.ValueOf(k.field(&lb)).Elem().Interface()) {
			return false
		}
	}
	return true
}

// Setting is a [scheduler] key a reload cannot apply.
type Setting struct {
	Key string
	// Fixed: a file that changes it is refused. Otherwise the running
	// value is kept until the scheduler is restarted.
	Fixed bool
}

// RestartKeys lists the [scheduler] keys a reload cannot apply.
func RestartKeys() []Setting {
	var out []Setting
	for i := range schedulerTable {
		if k := &schedulerTable[i]; k.restart || k.fixed {
			out = append(out, Setting{Key: k.name, Fixed: k.fixed})
		}
	}
	return out
}

// Value returns the value of the [scheduler] key in s as text, and whether
// the key exists.
func (s *Scheduler) Value(name string) (string, bool) {
	k := findKey(schedulerTable, name)
	if k == nil || k.field == nil {
		return "", false
	}
	return fmt.Sprint(reflect.ValueOf(k.field(s)).Elem().Interface()), true
}

// Keep copies the [scheduler] key's value from old into s.
func (s *Scheduler) Keep(name string, old *Scheduler) {
	k := findKey(schedulerTable, name)
	if k == nil || k.field == nil {
		return
	}
	reflect.ValueOf(k.field(s)).Elem().Set(reflect.ValueOf(k.field(old)).Elem())
}

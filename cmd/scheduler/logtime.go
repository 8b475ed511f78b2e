package main

import (
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// logTimeFormat is RFC 3339 with milliseconds: the line's own time and every
// time value in it.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// rfc3339Logger keeps the scheduler's log to one event per line, with
// times in one format, whatever its callers pass: a time.Time value is
// written in RFC 3339 (hclog would print Go's String form, monotonic
// reading included: "… m=+18.06"), and a string or error value spanning
// lines (errors.Join) is joined with "; " (hclog would write a block of
// indented lines). Values needing neither are passed through as they are,
// without copying: the outcome line, one per recipient, costs a type
// switch per value.
type rfc3339Logger struct{ hclog.Logger }

func fixArgs(args []any) []any {
	var out []any
	for i := 1; i < len(args); i += 2 {
		var repl any
		switch v := args[i].(type) {
		case time.Time:
			repl = v.Format(logTimeFormat)
		case *time.Time:
			if v != nil {
				repl = v.Format(logTimeFormat)
			}
		case string:
			if strings.ContainsRune(v, '\n') {
				repl = oneLine(v)
			}
		case error:
			if v != nil {
				if s := v.Error(); strings.ContainsRune(s, '\n') {
					repl = oneLine(s)
				}
			}
		}
		if repl == nil {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = repl
	}
	if out == nil {
		return args
	}
	return out
}

func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "; ")
}

func (l rfc3339Logger) Log(level hclog.Level, msg string, args ...any) {
	l.Logger.Log(level, msg, fixArgs(args)...)
}
func (l rfc3339Logger) Trace(msg string, args ...any) { l.Logger.Trace(msg, fixArgs(args)...) }
func (l rfc3339Logger) Debug(msg string, args ...any) { l.Logger.Debug(msg, fixArgs(args)...) }
func (l rfc3339Logger) Info(msg string, args ...any)  { l.Logger.Info(msg, fixArgs(args)...) }
func (l rfc3339Logger) Warn(msg string, args ...any)  { l.Logger.Warn(msg, fixArgs(args)...) }
func (l rfc3339Logger) Error(msg string, args ...any) { l.Logger.Error(msg, fixArgs(args)...) }

// Unchecked is the logger beneath, for a caller whose values are strings
// and integers of one line each: fixArgs would pass them through as they
// are, at the cost of a type switch per value (the outcome line, one per
// recipient, spent an eighth of its formatting in it).
func (l rfc3339Logger) Unchecked() hclog.Logger { return l.Logger }

func (l rfc3339Logger) With(args ...any) hclog.Logger {
	return rfc3339Logger{l.Logger.With(fixArgs(args)...)}
}
func (l rfc3339Logger) Named(name string) hclog.Logger { return rfc3339Logger{l.Logger.Named(name)} }
func (l rfc3339Logger) ResetNamed(name string) hclog.Logger {
	return rfc3339Logger{l.Logger.ResetNamed(name)}
}

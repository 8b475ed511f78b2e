package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"zsched/config"
)

// TestLoggerUnchecked: the logger beneath (Unchecked, what the outcome
// line uses when its strings are each one line) writes a line of one-line
// strings and integers as the checking logger does; the checking logger
// still makes a value spanning lines one line.
func TestLoggerUnchecked(t *testing.T) {
	var buf bytes.Buffer
	cfg := &config.Config{}
	cfg.Scheduler.LogLevel = "info"
	log := newLogger(cfg, &buf).(rfc3339Logger)
	kv := []any{"msg", "5308609.3kq7m2c", "rcpt", int64(150), "to", "carol@example.net", "ta", 4242,
		"delay", "362ms", "next", "", "text", "delivered to the sink"}
	log.Info("outcome", kv...)
	log.Unchecked().Info("outcome", kv...)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %q", len(lines), buf.String())
	}
	_, checked, _ := strings.Cut(lines[0], " [INFO]")
	_, unchecked, _ := strings.Cut(lines[1], " [INFO]")
	if checked != unchecked {
		t.Errorf("checked:\n%s\nunchecked:\n%s", lines[0], lines[1])
	}
	buf.Reset()
	log.Info("outcome", "text", "agent died:\nexit status 1")
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `text="agent died:; exit status 1"`) {
		t.Errorf("a value spanning lines: %q", got)
	}
}

// TestLogBufferStamp: the run's log (newLogger over a logBuffer, where the
// buffer writes each line's time) has the lines hclog writes with its own
// time, the time in logTimeFormat, taken as the line is written.
func TestLogBufferStamp(t *testing.T) {
	var out, ref bytes.Buffer
	cfg := &config.Config{}
	cfg.Scheduler.LogLevel = "info"
	b := newLogBuffer(&out)
	log := newLogger(cfg, b)
	before := time.Now().Truncate(time.Millisecond)
	for range 3 {
		log.Info("outcome", "msg", "5308609.3kq7m2c", "rcpt", int64(150), "text", "delivered to the sink")
		log.Named("x").Warn("another", "error", errors.New("two\nlines"))
	}
	b.Flush()
	after := time.Now()
	newLogger(cfg, &ref).Info("outcome", "msg", "5308609.3kq7m2c", "rcpt", int64(150), "text", "delivered to the sink")
	newLogger(cfg, &ref).Named("x").Warn("another", "error", errors.New("two\nlines"))
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := strings.Split(strings.TrimSuffix(ref.String(), "\n"), "\n")
	if len(got) != 6 || len(want) != 2 {
		t.Fatalf("%d lines and %d, want 6 and 2:\n%s\n%s", len(got), len(want), out.String(), ref.String())
	}
	for i, l := range got {
		stamp, rest, _ := strings.Cut(l, " ")
		_, wantRest, _ := strings.Cut(want[i%2], " ")
		if rest != wantRest {
			t.Errorf("line %d:\n got %s\nwant %s", i, l, want[i%2])
		}
		at, err := time.Parse(logTimeFormat, stamp)
		if err != nil || at.Before(before) || at.After(after) || at.Format(logTimeFormat) != stamp {
			t.Errorf("line %d's time %q (%v): want one in logTimeFormat between %v and %v", i, stamp, err, before, after)
		}
	}
}

// BenchmarkRunLogLine is an outcome line through the run's logger and
// buffer.
func BenchmarkRunLogLine(b *testing.B) {
	cfg := &config.Config{}
	cfg.Scheduler.LogLevel = "info"
	buf := newLogBuffer(io.Discard)
	log := newLogger(cfg, buf).(rfc3339Logger).Unchecked()
	kv := []any{"msg", "5308609.3kq7m2c", "rcpt", int64(150), "to", "carol@example.net", "channel", "smtp",
		"host", "example.net", "ta", 4242, "status", "ok3", "delay", "362ms", "attempts", 1, "next", "",
		"text", "delivered to the sink"}
	b.ReportAllocs()
	for b.Loop() {
		log.Info("outcome", kv...)
	}
}

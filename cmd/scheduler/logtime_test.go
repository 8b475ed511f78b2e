package main

import (
	"bytes"
	"strings"
	"testing"

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

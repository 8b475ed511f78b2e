package redisbook

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestRedisLogsAreOneLine: a go-redis line, even one whose error spans
// lines, becomes one hclog event with its text as a value.
func TestRedisLogsAreOneLine(t *testing.T) {
	var buf bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace, DisableTime: true})
	hclogLogging{log.Named("redis")}.Printf(context.Background(), "redis: failed to close connection: %v",
		"read tcp 127.0.0.1:1->127.0.0.1:2:\n\tconnection reset by peer\n")
	out := buf.String()
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want one line, got %q", out)
	}
	want := `[WARN]  redis: redis client: text="failed to close connection: read tcp 127.0.0.1:1->127.0.0.1:2: connection reset by peer"`
	if strings.TrimSpace(out) != want {
		t.Fatalf("got  %q\nwant %q", strings.TrimSpace(out), want)
	}
}

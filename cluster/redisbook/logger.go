package redisbook

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
)

// RouteLogs sends go-redis's own log lines (a connection it failed to
// close, a pool's trouble: printed to stderr with its own prefix and
// format by default) to log, one event one line. go-redis v9 has one
// logger per process (redis.SetLogger): this is the documented exception
// to the rule of no global state, set once by the daemon that runs a
// cluster link; the last call wins.
func RouteLogs(log hclog.Logger) {
	redis.SetLogger(hclogLogging{log})
}

// hclogLogging is go-redis's Logging over hclog.
type hclogLogging struct{ log hclog.Logger }

// Printf logs one go-redis line as a warning: the library logs only what
// went wrong. Its text may hold newlines (an error's); they are folded so
// that the line stays one event.
func (l hclogLogging) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	msg = strings.TrimPrefix(msg, "redis: ")
	msg = strings.Join(strings.Fields(msg), " ")
	l.log.Warn("redis client", "text", msg)
}

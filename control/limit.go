package control

import (
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// limiter counts failed AUTHs per peer address in fixed windows: an address
// that used up its attempts is refused until its window ends. It logs once
// per address and window, whatever the number of attempts, so a password
// guesser cannot flood the log.
type limiter struct {
	max    int
	window time.Duration

	mu    sync.Mutex
	peers map[netip.Addr]*burst
}

// burst is one address's failures in its current window.
type burst struct {
	start   time.Time
	fails   int
	logged  bool // the window's first failure was logged
	refused bool // the window's first refusal was logged
	quiet   int  // failures and refusals not logged, reported with the next window's first line
}

// maxPeers bounds the table; past it, expired windows are dropped, then the
// oldest.
const maxPeers = 4096

func newLimiter(max int, window time.Duration) *limiter {
	return &limiter{max: max, window: window, peers: make(map[netip.Addr]*burst)}
}

// current returns addr's burst for the window holding now, and the count
// of events not logged in the window before it.
func (l *limiter) current(addr netip.Addr, now time.Time) (*burst, int) {
	b := l.peers[addr]
	earlier := 0
	if b != nil && now.Sub(b.start) >= l.window {
		earlier = b.quiet
		b = nil
	}
	if b == nil {
		if len(l.peers) >= maxPeers {
			l.prune(now)
		}
		b = &burst{start: now}
		l.peers[addr] = b
	}
	return b, earlier
}

func (l *limiter) prune(now time.Time) {
	var oldest netip.Addr
	var at time.Time
	for a, b := range l.peers {
		if now.Sub(b.start) >= l.window {
			delete(l.peers, a)
			continue
		}
		if at.IsZero() || b.start.Before(at) {
			oldest, at = a, b.start
		}
	}
	if len(l.peers) >= maxPeers {
		delete(l.peers, oldest)
	}
}

// allow reports whether addr may try to log in now.
func (l *limiter) allow(addr netip.Addr, now time.Time, log hclog.Logger) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.peers[addr]
	if b == nil || now.Sub(b.start) >= l.window || b.fails < l.max {
		return true
	}
	if b.refused {
		b.quiet++
		return false
	}
	b.refused = true
	log.Warn("control: refusing an address after failed AUTHs (logged once until the window ends)",
		"addr", addr.String(), "failures", b.fails, "until", b.start.Add(l.window).Format(time.RFC3339))
	return false
}

// fail records a failed AUTH from addr.
func (l *limiter) fail(addr netip.Addr, user string, why error, now time.Time, log hclog.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, earlier := l.current(addr, now)
	b.fails++
	if b.logged {
		b.quiet++
		return
	}
	b.logged = true
	log.Warn("control: authentication failed; the session is closed (further failures from this address are logged once a window)",
		"user", user, "addr", addr.String(), "reason", why.Error(), "window", l.window.String(),
		"attempts_allowed", l.max, "unlogged_before", earlier)
}

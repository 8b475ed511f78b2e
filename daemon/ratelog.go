package daemon

import (
	"sync"
	"time"
)

// rateLog lets an event that recurs be logged once, then at most once per
// every, with how often it happened meanwhile: a condition that persists
// (a body that cannot be removed, a FIFO announced again and again) is
// seen without flooding the log. Keys name the condition; they are
// forgotten a while after their condition stops. Safe for concurrent use.
type rateLog struct {
	every time.Duration

	mu   sync.Mutex
	keys map[string]*rateKey
}

type rateKey struct {
	logged     time.Time // when it was last allowed
	suppressed int       // times it was not, since
}

// rateEvery is how often a recurring condition is logged again.
const rateEvery = time.Hour

func newRateLog(every time.Duration) *rateLog {
	return &rateLog{every: every, keys: make(map[string]*rateKey)}
}

// allow reports whether the event key may be logged at now, and how many
// times it was not logged since the last time it was.
func (r *rateLog) allow(key string, now time.Time) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys[key]
	if k == nil {
		if len(r.keys) >= maxRateKeys {
			r.prune(now)
		}
		r.keys[key] = &rateKey{logged: now}
		return true, 0
	}
	if now.Sub(k.logged) < r.every {
		k.suppressed++
		return false, k.suppressed
	}
	n := k.suppressed
	k.logged, k.suppressed = now, 0
	return true, n
}

// maxRateKeys bounds the conditions remembered: past it, those not seen
// for two periods are forgotten (and would be logged at once again).
const maxRateKeys = 4096

func (r *rateLog) prune(now time.Time) {
	for key, k := range r.keys {
		if now.Sub(k.logged) >= 2*r.every {
			delete(r.keys, key)
		}
	}
}

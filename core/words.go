package core

import (
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/ring"
)

// The agents' own words: lines that are not protocol (stderr text, which in
// socketpair mode shares the protocol stream, and other misformed lines),
// stderr lines from a stream of their own (pipes), and #resync answers. An
// operator needs to see them — "cannot open shared object file" is the whole
// diagnosis of a broken transport — but an agent that says the same thing
// for every job must not flood the log. Each kind is logged per ring at most
// wordsPerWindow times per wordsWindow, with the clause and the destination;
// the first line logged after a quiet spell says how many were left out.

// wordsPerWindow and wordsWindow bound the lines of one kind logged per ring.
const (
	wordsPerWindow = 10
	wordsWindow    = time.Minute
)

// limiter is one rate limit: a window of wordsWindow from its first line.
type limiter struct {
	since      time.Time
	logged     int
	suppressed int // lines left out, told with the next line logged
}

// allow reports whether a line at now is logged and, if it is, how many
// were left out before it.
func (l *limiter) allow(now time.Time) (bool, int) {
	if l.since.IsZero() || now.Sub(l.since) >= wordsWindow {
		l.since, l.logged = now, 0
	}
	if l.logged >= wordsPerWindow {
		l.suppressed++
		return false, 0
	}
	l.logged++
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

// words are one ring's limits.
type words struct {
	misformed, stderr, resync limiter
}

func (s *Core) wordsOf(k ring.Key) *words {
	w := s.words[k]
	if w == nil {
		if s.words == nil {
			s.words = make(map[ring.Key]*words)
		}
		w = &words{}
		s.words[k] = w
	}
	return w
}

// say logs what agent a said under the limit which picks, with the clause
// and the destination.
func (s *Core) say(a *agent, which func(*words) *limiter, now time.Time, lvl hclog.Level, msg string, kv ...any) {
	ok, left := which(s.wordsOf(a.ring.Key)).allow(now)
	if !ok {
		return
	}
	sel := ""
	if a.clause >= 0 {
		sel = s.clause(a.clause).Select
	}
	host := a.host
	if host == "" {
		host = a.ring.Host
	}
	kv = append(kv, "clause", sel, "channel", a.channel, "host", host, "agent", a.id)
	if left > 0 {
		kv = append(kv, "suppressed", left)
	}
	s.log.Log(lvl, msg, kv...)
}

func misformedWords(w *words) *limiter { return &w.misformed }
func stderrWords(w *words) *limiter    { return &w.stderr }
func resyncWords(w *words) *limiter    { return &w.resync }

// AgentStderr handles one line from an agent's own stderr stream (pipes
// mode): its words, logged, not protocol.
func (s *Core) AgentStderr(now time.Time, id int, line string) {
	s.event("AgentStderr")
	a, ok := s.agents[id]
	if !ok {
		return
	}
	if len(line) > 500 {
		line = line[:500] + "…"
	}
	s.say(a, stderrWords, now, hclog.Info, "agent stderr", "line", line)
}

// ringGone forgets what a dropped ring's key held: its word limits, and a
// throttle that is neither running nor waiting for a probe.
func (s *Core) ringGone(k ring.Key) {
	delete(s.words, k)
	if th := s.throttles[k]; th != nil && th.until.IsZero() && th.probe == 0 {
		delete(s.throttles, k)
	}
}

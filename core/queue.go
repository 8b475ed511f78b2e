package core

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"zsched/config"
	"zsched/vertex"
)

// The queue as operators manage it (issue 17): destination patterns that
// mean the same in hold, release, flush, ETRN and the listing's -dest;
// holds restored from disk; retry state restored from the daemon's
// journal; lookups by queue id; and the views of one message at a time
// that the daemon's spool-wide listing asks for in batches.

// ErrChanged is returned for a queue id whose name now leads to another
// message: the id's file is gone and its inode number was reused.
var ErrChanged = errors.New("core: queue id names a message that is gone; its name is now another message's")

// Dest is a destination pattern: a channel glob and a host glob (ZMailer
// globs, config.Glob), both lowercase.
type Dest struct {
	Channel string
	Host    string
}

// ParseDest reads a destination pattern as hold, release, flush, ETRN and
// -dest take it: "" (every destination), "channel/host", a bare "host"
// (every channel), or "@domain" (the domain and its subdomains), each part
// a ZMailer glob. Case does not count.
func ParseDest(sel string) (Dest, error) {
	sel = strings.ToLower(strings.TrimSpace(sel))
	p := Dest{Channel: "*", Host: "*"}
	if sel == "" {
		return p, nil
	}
	if ch, host, ok := strings.Cut(sel, "/"); ok {
		if ch != "" {
			p.Channel = ch
		}
		if host != "" {
			p.Host = host
		}
	} else {
		p.Host = sel
	}
	if dom, ok := strings.CutPrefix(p.Host, "@"); ok {
		dom = strings.TrimPrefix(dom, ".")
		if dom == "" {
			return Dest{}, fmt.Errorf("core: destination %q: no domain after @", sel)
		}
		p.Host = "{" + dom + ",*." + dom + "}"
	}
	for _, g := range []string{p.Channel, p.Host} {
		if err := config.CheckGlob(g); err != nil {
			return Dest{}, fmt.Errorf("core: destination %q: %w", sel, err)
		}
	}
	return p, nil
}

// Match reports whether (channel, host) matches; channel "" matches any
// channel glob (ETRN names hosts only). It compiles the pattern at every
// call: a caller matching many destinations compiles it once (Compile).
func (p Dest) Match(channel, host string) bool {
	m, err := p.Compile()
	return err == nil && m.Match(channel, host)
}

// DestMatcher is a compiled Dest: matching takes linear time, whatever
// the globs (config.Pattern).
type DestMatcher struct {
	ch, host *config.Pattern
}

// Compile compiles the pattern's globs, once for many matches.
func (p Dest) Compile() (DestMatcher, error) {
	ch, err := config.CompileGlob(p.Channel)
	if err != nil {
		return DestMatcher{}, fmt.Errorf("core: destination %s: %w", p, err)
	}
	host, err := config.CompileGlob(p.Host)
	if err != nil {
		return DestMatcher{}, fmt.Errorf("core: destination %s: %w", p, err)
	}
	return DestMatcher{ch: ch, host: host}, nil
}

// Match is Dest.Match; the zero DestMatcher matches nothing.
func (m DestMatcher) Match(channel, host string) bool {
	if m.host == nil || channel != "" && !m.ch.Match(strings.ToLower(channel)) {
		return false
	}
	return m.host.Match(strings.ToLower(host))
}

// MatchChannel reports whether the channel glob matches channel.
func (m DestMatcher) MatchChannel(channel string) bool {
	return m.ch != nil && m.ch.Match(strings.ToLower(channel))
}

func (p Dest) String() string { return p.Channel + "/" + p.Host }

// destHeld reports whether a destination hold covers (channel, host).
// Holds are few (an operator sets them), so they are matched one by one.
func (s *Core) destHeld(channel, host string) bool {
	if _, ok := s.heldDests[[2]string{channel, host}]; ok {
		return true
	}
	for _, m := range s.heldDests { // any one: the order does not count
		if m.Match(channel, host) {
			return true
		}
	}
	return false
}

// HoldThread holds every destination matching the pattern (channel,
// host): no agent is fed from it until ReleaseThread. The hold outlives
// the threads, so mail arriving later for a matching destination is held
// too. Agents on it finish their current jobs. It returns how many threads
// in core it holds now.
func (s *Core) HoldThread(now time.Time, channel, host string) int {
	s.event("HoldThread")
	p := Dest{Channel: strings.ToLower(channel), Host: strings.ToLower(host)}
	m, _ := p.Compile() // malformed: the zero matcher, matching nothing
	s.heldDests[[2]string{p.Channel, p.Host}] = m
	n := 0
	for _, t := range sortedThreads(s.threads) {
		if !m.Match(t.Channel, t.Host) {
			continue
		}
		n++
		if !t.Held {
			t.Held = true
			s.update(t, now)
		}
	}
	return n
}

// ReleaseThread ends the destination holds that the pattern (channel,
// host) names: the hold set with that pattern, and every hold whose
// pattern it matches ("smtp/*" ends all of smtp's). It returns the holds
// ended; threads no other hold covers run again.
func (s *Core) ReleaseThread(now time.Time, channel, host string) []Dest {
	s.event("ReleaseThread")
	p := Dest{Channel: strings.ToLower(channel), Host: strings.ToLower(host)}
	m, _ := p.Compile() // malformed: ends only the hold set with it
	var ended []Dest
	for _, h := range s.Holds() {
		if h == p || m.Match(h.Channel, h.Host) {
			delete(s.heldDests, [2]string{h.Channel, h.Host})
			ended = append(ended, h)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	for _, t := range sortedThreads(s.threads) {
		if t.Held && !s.destHeld(t.Channel, t.Host) {
			t.Held = false
			s.redue(t, now)
			s.update(t, now)
		}
	}
	return ended
}

// Holds returns the destination holds, sorted.
func (s *Core) Holds() []Dest {
	out := make([]Dest, 0, len(s.heldDests))
	for k := range s.heldDests {
		out = append(out, Dest{Channel: k[0], Host: k[1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// DestHeld reports whether a destination hold covers (channel, host), for
// mail not in core.
func (s *Core) DestHeld(channel, host string) bool {
	return s.destHeld(channel, strings.ToLower(host))
}

// restoreRetry gives a vertex placed at arrival the retry state the
// daemon kept for it: its attempts, its retry index and, when still ahead,
// its next attempt time, so that it waits in its thread's waiting heap
// instead of being tried again at once after a restart.
func restoreRetry(v *vertex.Vertex, g Group, now time.Time) {
	if g.Attempts > 0 {
		v.Attempts = int32(g.Attempts)
	}
	if g.Retry > 0 {
		v.Retry = int32(g.Retry)
	}
	if g.Next.After(now) {
		v.SetDue(g.Next)
	}
}

// Lookup is how an id resolved against the core.
type Lookup struct {
	Inum   int64
	QID    string // the queue id of the message in core
	Path   string
	InCore bool
}

// Find resolves an operator's id against the messages in core: a queue id
// ("5308609.3kq7m2c"), a control file's name or path ("5308609",
// "A/5308609"), or a body name. A queue id whose name is in core as
// another message is ErrChanged: the id's message is gone (its inode
// number was reused), and whatever now has the name is not what the
// operator copied. Not in core: InCore false, no error.
func (s *Core) Find(id string) (Lookup, error) {
	id = strings.TrimSpace(id)
	if name, _, ok := strings.Cut(id, "."); ok && ctlName(name) {
		inum, _ := inumOf(name)
		m := s.msgs[inum]
		switch {
		case m == nil:
			return Lookup{Inum: inum}, nil
		case m.QID != id:
			return Lookup{Inum: inum, QID: m.QID, Path: m.Path}, fmt.Errorf("%w: %s is now %s", ErrChanged, id, m.QID)
		}
		return Lookup{Inum: inum, QID: m.QID, Path: m.Path, InCore: true}, nil
	}
	m := s.lookup(id)
	if m == nil {
		inum, _ := inumOf(id)
		return Lookup{Inum: inum}, nil
	}
	return Lookup{Inum: m.Inum, QID: m.QID, Path: m.Path, InCore: true}, nil
}

// MessageOf is Message for message inum; false when it is not in core.
func (s *Core) MessageOf(now time.Time, inum int64) (MessageView, bool) {
	m := s.msgs[inum]
	if m == nil {
		return MessageView{}, false
	}
	mv, _ := s.Message(now, m.QID)
	return mv, true
}

// FlushMessage makes every vertex of a message due now: its own retry
// waits end (its destinations' back-offs are the destinations' own).
func (s *Core) FlushMessage(now time.Time, inum int64) bool {
	s.event("FlushMessage")
	m := s.msgs[inum]
	if m == nil {
		return false
	}
	for _, v := range m.Vertices {
		t := s.threadOf(v)
		if t == nil || !v.In(&t.Waiting) {
			continue
		}
		t.Waiting.Remove(v)
		v.SetDue(time.Time{})
		t.Add(v, now)
		s.update(t, now)
	}
	return true
}

// Unrouted is a destination no clause selects, with what waits for it.
type Unrouted struct {
	Channel, Host string
	Messages      int
	Recipients    int
	Oldest        time.Time
}

// UnroutedViews returns the destinations no clause routes, sorted: mailq
// lists them, since no thread shows their mail.
func (s *Core) UnroutedViews() []Unrouted {
	by := make(map[[2]string]*Unrouted)
	for _, v := range s.unmatched {
		k := [2]string{v.Channel, v.Host}
		u := by[k]
		if u == nil {
			u = &Unrouted{Channel: v.Channel, Host: v.Host}
			by[k] = u
		}
		u.Messages++
		u.Recipients += len(v.Rcpts)
		if u.Oldest.IsZero() || v.Msg.Arrival.Before(u.Oldest) {
			u.Oldest = v.Msg.Arrival
		}
	}
	out := make([]Unrouted, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Channel != out[j].Channel {
			return out[i].Channel < out[j].Channel
		}
		return out[i].Host < out[j].Host
	})
	return out
}

// HeldCounts counts held messages and threads in core, for metrics.
func (s *Core) HeldCounts() (messages, threads int) {
	for _, m := range s.heldMessages {
		if s.msgs[m.Inum] == m && m.Held {
			messages++
		}
	}
	for _, t := range s.threads {
		if t.Held {
			threads++
		}
	}
	return messages, threads
}

// isQueueID reports whether id has the form of a queue id: a control
// file's name, a dot and the generation.
func isQueueID(id string) bool {
	name, gen, ok := strings.Cut(id, ".")
	return ok && gen != "" && ctlName(name)
}

// Oldest returns the arrival of the oldest message in core; zero if none.
// Its cost follows the threads, not the recipients (their tallies).
func (s *Core) Oldest() time.Time {
	var o time.Time
	older := func(t time.Time) {
		if !t.IsZero() && (o.IsZero() || t.Before(o)) {
			o = t
		}
	}
	for _, t := range s.threads {
		older(t.Oldest())
	}
	for _, v := range s.unmatched {
		older(v.Msg.Arrival)
	}
	for _, m := range s.heldMessages {
		older(m.Arrival)
	}
	return o
}

package core

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"zsched/config"
	"zsched/thread"
	"zsched/vertex"
)

// The operator's commands: hold and release a destination or a message,
// ETRN, flush, kill, and Quiesce at shutdown (reload is reload.go). Like
// every other event they take now and leave their effects in Ready; none
// of them blocks or does I/O.

// ErrNoMessage is returned for an id that names no message in core.
var ErrNoMessage = errors.New("core: no such message in core")

// HoldThread holds the destination (channel, host): no agent is fed from it
// until ReleaseThread. The hold outlives the thread, so mail arriving later
// for the destination is held too. Agents on it finish their current jobs.
// It reports whether a thread was in core.
func (s *Core) HoldThread(now time.Time, channel, host string) bool {
	s.event("HoldThread")
	host = strings.ToLower(host)
	s.heldDests[[2]string{channel, host}] = true
	t := s.findThread(channel, host)
	if t == nil {
		return false
	}
	t.Held = true
	s.update(t, now)
	return true
}

// ReleaseThread ends a destination hold; it reports whether there was one.
func (s *Core) ReleaseThread(now time.Time, channel, host string) bool {
	s.event("ReleaseThread")
	host = strings.ToLower(host)
	k := [2]string{channel, host}
	was := s.heldDests[k]
	delete(s.heldDests, k)
	t := s.findThread(channel, host)
	if t == nil {
		return was
	}
	was = was || t.Held
	t.Held = false
	s.redue(t, now)
	s.update(t, now)
	return was
}

// HoldMessage keeps a message's vertices from being fed until
// ReleaseMessage; vertices with an agent now finish their attempt first and
// are then held. Held vertices still expire.
func (s *Core) HoldMessage(now time.Time, id string) error {
	s.event("HoldMessage")
	m := s.lookup(id)
	if m == nil {
		return fmt.Errorf("%w: %q", ErrNoMessage, id)
	}
	if m.Held {
		return nil
	}
	m.Held = true
	s.heldMessages[m.Inum] = m
	for _, v := range m.Vertices {
		if !v.Queued() {
			continue
		}
		v.Dequeue()
		if t := s.threadOf(v); t != nil {
			s.update(t, now)
		}
	}
	return nil
}

// ReleaseMessage ends a message hold.
func (s *Core) ReleaseMessage(now time.Time, id string) error {
	s.event("ReleaseMessage")
	m := s.lookup(id)
	if m == nil {
		return fmt.Errorf("%w: %q", ErrNoMessage, id)
	}
	if !m.Held {
		return nil
	}
	m.Held = false
	delete(s.heldMessages, m.Inum)
	for _, v := range m.Vertices {
		t := s.threadOf(v)
		if v.Queued() || v.Agent != 0 || t == nil {
			continue
		}
		t.Add(v, now)
		if v.In(&t.Ready) {
			v.SetDue(now)
		}
		s.update(t, now)
	}
	return nil
}

// sweepHeld expires vertices of held messages past arrival+expiry+expiry2:
// they are in no heap, so the ordinary sweep does not see them.
func (s *Core) sweepHeld(now time.Time) {
	held := make([]*vertex.Message, 0, len(s.heldMessages))
	for inum, m := range s.heldMessages {
		if s.msgs[inum] != m || !m.Held {
			delete(s.heldMessages, inum)
			continue
		}
		held = append(held, m)
	}
	// Effects in message order, whatever the map's.
	slices.SortFunc(held, func(a, b *vertex.Message) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, m := range held {
		for _, v := range append([]*vertex.Vertex(nil), m.Vertices...) {
			if _, exp2 := s.deadlines(v); v.Queued() || v.Agent != 0 || !expired(exp2, now) {
				continue
			}
			t := s.threadOf(v)
			s.expire(v, now)
			s.dropVertex(v, t)
			if t != nil {
				s.update(t, now)
			}
		}
	}
}

// ETRN (RFC 1985) makes every thread whose host is name, or with "@domain"
// the domain or any subdomain of it, due now, and releases queueonly ones
// to run until they have nothing due left. Held threads are left
// alone. Only the first word of name counts; case does not. It returns how
// many threads started.
func (s *Core) ETRN(now time.Time, name string) int {
	s.event("ETRN")
	name = strings.ToLower(strings.TrimSpace(name))
	if i := strings.IndexAny(name, " \t"); i >= 0 {
		name = name[:i]
	}
	match := func(host string) bool { return host == name }
	if dom, ok := strings.CutPrefix(name, "@"); ok {
		dom = strings.TrimPrefix(dom, ".")
		match = func(host string) bool { return host == dom || strings.HasSuffix(host, "."+dom) }
	}
	if name == "" || name == "@" {
		return 0
	}
	var ts []*thread.Thread
	for _, t := range s.threads {
		if match(t.Host) {
			ts = append(ts, t)
		}
	}
	sortThreads(ts)
	n := 0
	for _, t := range ts {
		if t.Held {
			continue // the operator's hold wins; the client may ETRN again
		}
		s.makeDue(t, now)
		if t.QueueOnly {
			t.ETRN = true
		}
		s.update(t, now)
		if t.Busy > 0 || t.Wants(now) {
			n++
		}
	}
	s.observe(Observation{Kind: ObservedETRN, Host: name, Threads: len(ts), Started: n})
	return n
}

// Flush makes every vertex of the selected threads due now and ends their
// back-off (a dead destination gets its probe). sel is "" for every thread,
// or "channel/host" with ZMailer globs ("smtp/*.example.com"); a bare
// channel means all its hosts. Queueonly threads stay waiting for ETRN.
// It returns how many threads matched.
func (s *Core) Flush(now time.Time, sel string) (int, error) {
	s.event("Flush")
	chSrc, hostSrc := "*", "*"
	if sel = strings.TrimSpace(sel); sel != "" {
		chSrc, hostSrc, _ = strings.Cut(sel, "/")
		if hostSrc == "" {
			hostSrc = "*"
		}
	}
	// Compiled once, matched in linear time against every thread.
	chPat, err := config.CompileGlob(strings.ToLower(chSrc))
	if err != nil {
		return 0, fmt.Errorf("core: flush %q: %w", sel, err)
	}
	hostPat, err := config.CompileGlob(strings.ToLower(hostSrc))
	if err != nil {
		return 0, fmt.Errorf("core: flush %q: %w", sel, err)
	}
	var ts []*thread.Thread
	for _, t := range s.threads {
		if chPat.Match(strings.ToLower(t.Channel)) && hostPat.Match(t.Host) {
			ts = append(ts, t)
		}
	}
	sortThreads(ts)
	for _, t := range ts {
		s.makeDue(t, now)
		s.update(t, now)
	}
	s.flushThrottles(now, func(ch string) bool { return chPat.Match(strings.ToLower(ch)) })
	return len(ts), nil
}

func sortThreads(ts []*thread.Thread) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Channel != ts[j].Channel {
			return ts[i].Channel < ts[j].Channel
		}
		return ts[i].Host < ts[j].Host
	})
}

// makeDue ends t's back-off and moves its waiting vertices to ready.
func (s *Core) makeDue(t *thread.Thread, now time.Time) {
	t.BackoffUntil = time.Time{}
	for v := t.Waiting.Min(); v != nil; v = t.Waiting.Min() {
		t.Waiting.Remove(v)
		v.SetDue(time.Time{})
		t.Ready.Push(v)
	}
	s.redue(t, now)
}

// redue restarts the dispatch latency clock of t's ready vertices: time
// spent held or waiting for ETRN is the operator's, not the scheduler's.
func (s *Core) redue(t *thread.Thread, now time.Time) {
	t.Ready.Each(func(v *vertex.Vertex) { v.SetDue(now) })
}

// Kill removes a message from core and asks for its files to be removed
// (Ready.Completes with Killed set): no DSN is sent. Agents working on it
// finish their attempt unheard.
func (s *Core) Kill(now time.Time, id string) error {
	s.event("Kill")
	m := s.lookup(id)
	if m == nil {
		return fmt.Errorf("%w: %q", ErrNoMessage, id)
	}
	delete(s.heldMessages, m.Inum)
	s.drop(m, now)
	// The daemon logs the request, with who asked.
	s.ready.Completes = append(s.ready.Completes, Complete{Path: m.Path, ID: m.ID, Inum: m.Inum, Killed: true})
	return nil
}

// Quiesce stops all feeding for shutdown: no agent is started or given a
// job from now on; reports are still taken.
func (s *Core) Quiesce() {
	s.event("Quiesce")
	s.stopping = true
}

package core

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"zsched/thread"
	"zsched/vertex"
)

// The operator's commands: hold and release a destination or a message,
// ETRN, flush, kill, and Quiesce at shutdown (reload is reload.go). Like
// every other event they take now and leave their effects in Ready; none
// of them blocks or does I/O.

// ErrNoMessage is returned for an id that names no message in core; the
// daemon wraps it for one that is in the spool neither.
var ErrNoMessage = errors.New("core: no such message")

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
	if name == "" || name == "@" || strings.Contains(name, "/") {
		return 0
	}
	p, err := ParseDest(name)
	if err != nil {
		return 0
	}
	m, err := p.Compile()
	if err != nil {
		return 0
	}
	match := func(host string) bool { return m.Match("", host) }
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
// or a destination pattern (ParseDest: "smtp/*.example.com", a bare host
// glob for every channel, "@domain"). Queueonly threads stay waiting for
// ETRN.
// It returns how many threads matched.
func (s *Core) Flush(now time.Time, sel string) (int, error) {
	s.event("Flush")
	p, err := ParseDest(sel)
	if err != nil {
		return 0, fmt.Errorf("core: flush: %w", err)
	}
	// Compiled once, matched in linear time against every thread.
	m, err := p.Compile()
	if err != nil {
		return 0, fmt.Errorf("core: flush: %w", err)
	}
	var ts []*thread.Thread
	for _, t := range s.threads {
		if m.Match(t.Channel, t.Host) {
			ts = append(ts, t)
		}
	}
	sortThreads(ts)
	for _, t := range ts {
		s.makeDue(t, now)
		s.update(t, now)
	}
	s.flushThrottles(now, m.MatchChannel)
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

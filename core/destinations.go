package core

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"zsched/thread"
)

// How long, and for how many destinations, the core keeps what it learned
// after a destination's thread went away: learned_ttl (default 1h) and
// learned_max (default 20 000) in [scheduler]. Postfix forgets as soon as a
// destination's queue empties; zsched keeps the window, so that a lull or a
// restart does not start over at the initial concurrency, while a
// destination's capacity, which changes over a day, is still learned anew.
// A dead destination is kept at least until its retry time. The cap keeps a
// stream of distinct destinations (240 000 grew the scheduler to 364 MB and
// its state file to 12 MB) from growing memory and the state file without
// bound: past it, the entry that would expire first is forgotten.

// Destination is the learned state of one destination: its concurrency
// window and feedback cycles, and, while it is dead, when it may be tried
// again. It is what the daemon saves under postoffice/state so that a
// restart does not learn it again.
type Destination struct {
	Channel   string
	Host      string
	Window    thread.WindowState
	DeadUntil time.Time // while the window is 0: no agent before this
	Updated   time.Time // when the state was last in use
}

// destinations holds the learned state of destinations that have no
// thread: their queue emptied, or the state was loaded at start. Entries
// sit in a min-heap by (expires, channel, host), so that the TTL sweep and
// the cap's eviction take the same, deterministic, order.
type destinations struct {
	byKey map[[2]string]*learned
	heap  []*learned
}

// learned is one entry; expires is when it goes stale (see stale).
type learned struct {
	d       Destination
	expires time.Time
	index   int // in destinations.heap
}

func (d Destination) key() [2]string { return [2]string{d.Channel, d.Host} }

// expiry is the first instant at which d is stale under ttl: past
// Updated+ttl (strictly) and not dead beyond it.
func (d Destination) expiry(ttl time.Duration) time.Time {
	e := d.Updated.Add(ttl + time.Nanosecond)
	if d.DeadUntil.After(e) {
		return d.DeadUntil
	}
	return e
}

func (s *Core) learnedTTL() time.Duration { return s.cfg.Scheduler.LearnedTTL.D() }

// stale reports whether d is too old to be worth restoring at now.
func (s *Core) stale(d Destination, now time.Time) bool {
	return !now.Before(d.expiry(s.learnedTTL()))
}

func (l *learned) less(o *learned) bool {
	if c := l.expires.Compare(o.expires); c != 0 {
		return c < 0
	}
	return cmp.Or(cmp.Compare(l.d.Channel, o.d.Channel), cmp.Compare(l.d.Host, o.d.Host)) < 0
}

// put keeps d, replacing what was kept for its destination, then forgets
// entries beyond max, those that would expire first.
func (ds *destinations) put(d Destination, ttl time.Duration, max int) {
	if ds.byKey == nil {
		ds.byKey = make(map[[2]string]*learned)
	}
	if l, ok := ds.byKey[d.key()]; ok {
		l.d, l.expires = d, d.expiry(ttl)
		ds.fix(l.index)
	} else {
		l := &learned{d: d, expires: d.expiry(ttl), index: len(ds.heap)}
		ds.byKey[d.key()] = l
		ds.heap = append(ds.heap, l)
		ds.up(l.index)
	}
	for len(ds.heap) > max {
		ds.remove(ds.heap[0])
	}
}

// take removes and returns what was kept for k.
func (ds *destinations) take(k [2]string) (Destination, bool) {
	l, ok := ds.byKey[k]
	if !ok {
		return Destination{}, false
	}
	ds.remove(l)
	return l.d, true
}

// expire forgets every entry stale at now.
func (ds *destinations) expire(now time.Time) {
	for len(ds.heap) > 0 && !now.Before(ds.heap[0].expires) {
		ds.remove(ds.heap[0])
	}
}

// trim forgets entries beyond max (after a reload lowered learned_max).
func (ds *destinations) trim(max int) {
	for len(ds.heap) > max {
		ds.remove(ds.heap[0])
	}
}

func (ds *destinations) len() int { return len(ds.heap) }

func (ds *destinations) remove(l *learned) {
	i, last := l.index, len(ds.heap)-1
	if i != last {
		ds.swap(i, last)
	}
	ds.heap[last] = nil
	ds.heap = ds.heap[:last]
	delete(ds.byKey, l.d.key())
	if i != last {
		ds.fix(i)
	}
	if len(ds.heap) == 0 {
		// Let a burst's memory go (maps never shrink).
		ds.byKey, ds.heap = nil, nil
	}
}

func (ds *destinations) swap(i, j int) {
	ds.heap[i], ds.heap[j] = ds.heap[j], ds.heap[i]
	ds.heap[i].index, ds.heap[j].index = i, j
}

func (ds *destinations) fix(i int) {
	if !ds.down(i) {
		ds.up(i)
	}
}

func (ds *destinations) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !ds.heap[i].less(ds.heap[p]) {
			return
		}
		ds.swap(i, p)
		i = p
	}
}

func (ds *destinations) down(i int) bool {
	start := i
	for {
		c := 2*i + 1
		if c >= len(ds.heap) {
			break
		}
		if r := c + 1; r < len(ds.heap) && ds.heap[r].less(ds.heap[c]) {
			c = r
		}
		if !ds.heap[c].less(ds.heap[i]) {
			break
		}
		ds.swap(i, c)
		i = c
	}
	return i > start
}

// Destinations returns the learned state of every destination that has
// any, sorted by channel and host, without state too old to keep. It
// changes nothing: Tick forgets what is stale.
func (s *Core) Destinations(now time.Time) []Destination {
	ds := make([]Destination, 0, len(s.threads)+s.dests.len())
	for _, t := range s.threads { // sorted below
		if t.Window.Fresh() {
			continue
		}
		d := Destination{Channel: t.Channel, Host: t.Host, Window: t.Window.State(), Updated: now}
		if t.Window.Dead() {
			d.DeadUntil = t.BackoffUntil
		}
		ds = append(ds, d)
	}
	for _, l := range s.dests.heap {
		if !s.stale(l.d, now) {
			ds = append(ds, l.d)
		}
	}
	slices.SortFunc(ds, func(a, b Destination) int {
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Host, b.Host))
	})
	return ds
}

// Learn restores saved destination state, as Destinations returned it
// before a restart. State too old to keep is skipped; a destination whose
// thread exists already takes it at once, others when their thread is
// created. It returns how many destinations were restored.
func (s *Core) Learn(now time.Time, ds []Destination) int {
	s.event("Learn")
	n := 0
	for _, d := range ds {
		if s.stale(d, now) {
			continue
		}
		d.Host = strings.ToLower(d.Host)
		n++
		if ci, ok := s.match(d.Channel, d.Host); ok {
			if t, ok := s.threads[thread.Key{Clause: ci, Channel: d.Channel, Host: d.Host}]; ok {
				restore(t, d)
				s.update(t, now)
				continue
			}
		}
		s.dests.put(d, s.learnedTTL(), s.cfg.Scheduler.LearnedMax)
	}
	return n
}

// restoreLearned gives a new thread what was learned about its destination, unless
// it is too old to keep (Tick forgets such state only at its expiry sweep).
func (s *Core) restoreLearned(t *thread.Thread, now time.Time) {
	if d, ok := s.dests.take([2]string{t.Channel, t.Host}); ok && !s.stale(d, now) {
		restore(t, d)
	}
}

// forgetStale drops learned state too old to keep and entries beyond
// learned_max (Tick, at the expiry sweep's pace).
func (s *Core) forgetStale(now time.Time) {
	s.dests.expire(now)
	s.dests.trim(s.cfg.Scheduler.LearnedMax)
}

func restore(t *thread.Thread, d Destination) {
	t.Window.Restore(d.Window)
	if t.Window.Dead() {
		// A dead destination without a retry time revives at its next
		// update (reviveDue).
		t.BackoffUntil = d.DeadUntil
	}
}

// keepLearned keeps what a thread learned when the thread goes away.
func (s *Core) keepLearned(t *thread.Thread, now time.Time) {
	if t.Window.Fresh() {
		return
	}
	d := Destination{Channel: t.Channel, Host: t.Host, Window: t.Window.State(), Updated: now}
	if t.Window.Dead() {
		d.DeadUntil = t.BackoffUntil
	}
	s.dests.put(d, s.learnedTTL(), s.cfg.Scheduler.LearnedMax)
}

package core

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"zsched/thread"
)

// learnedFor is how long the core keeps what it learned about a
// destination after its thread went away. Postfix forgets as soon as a
// destination's queue empties; zsched keeps the window an hour, so that a
// lull or a restart does not start over at the initial concurrency, while a
// destination's capacity, which changes over a day, is still learned anew.
// A dead destination is kept at least until its retry time.
const learnedFor = time.Hour

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
// thread: their queue emptied, or the state was loaded at start.
type destinations struct {
	learned map[[2]string]Destination
}

func (d Destination) key() [2]string { return [2]string{d.Channel, d.Host} }

// stale reports whether d is too old to be worth restoring at now.
func (d Destination) stale(now time.Time) bool {
	return now.Sub(d.Updated) > learnedFor && !d.DeadUntil.After(now)
}

// Destinations returns the learned state of every destination that has
// any, sorted by channel and host, and forgets state too old to keep.
func (s *Scheduler) Destinations(now time.Time) []Destination {
	var ds []Destination
	for _, t := range s.threads {
		if t.Window.Fresh() {
			continue
		}
		d := Destination{Channel: t.Channel, Host: t.Host, Window: t.Window.State(), Updated: now}
		if t.Window.Dead() {
			d.DeadUntil = t.BackoffUntil
		}
		ds = append(ds, d)
	}
	for k, d := range s.dests.learned {
		if d.stale(now) {
			delete(s.dests.learned, k)
			continue
		}
		ds = append(ds, d)
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
func (s *Scheduler) Learn(now time.Time, ds []Destination) int {
	n := 0
	for _, d := range ds {
		if d.stale(now) {
			continue
		}
		d.Host = strings.ToLower(d.Host)
		n++
		if ci, ok := s.match(d.Channel, d.Host); ok {
			if t, ok := s.threads[thread.Key{Clause: ci, Channel: d.Channel, Host: d.Host}]; ok {
				restore(t, d)
				s.touch(t, now)
				continue
			}
		}
		if s.dests.learned == nil {
			s.dests.learned = make(map[[2]string]Destination)
		}
		s.dests.learned[d.key()] = d
	}
	return n
}

// recall gives a new thread what was learned about its destination. It
// does not look at the age of what it finds: Destinations, which the
// daemon calls every half minute to save the state, forgets stale entries.
func (s *Scheduler) recall(t *thread.Thread) {
	k := [2]string{t.Channel, t.Host}
	if d, ok := s.dests.learned[k]; ok {
		delete(s.dests.learned, k)
		restore(t, d)
	}
}

func restore(t *thread.Thread, d Destination) {
	t.Window.Restore(d.Window)
	if t.Window.Dead() {
		// A dead destination without a retry time revives at its next
		// touch (reviveDue).
		t.BackoffUntil = d.DeadUntil
	}
}

// remember keeps what a thread learned when the thread goes away.
func (s *Scheduler) remember(t *thread.Thread, now time.Time) {
	if t.Window.Fresh() {
		return
	}
	d := Destination{Channel: t.Channel, Host: t.Host, Window: t.Window.State(), Updated: now}
	if t.Window.Dead() {
		d.DeadUntil = t.BackoffUntil
	}
	if s.dests.learned == nil {
		s.dests.learned = make(map[[2]string]Destination)
	}
	s.dests.learned[d.key()] = d
}

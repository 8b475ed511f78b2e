package core

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"zsched/config"
	"zsched/ring"
	"zsched/thread"
)

// ErrReload is wrapped by every reason Reconfigure refuses a configuration.
var ErrReload = errors.New("core: reload refused")

// Reconfigure applies a new configuration without losing a vertex, a
// window or an agent that still fits. Every destination is matched again:
// clause indexes may change, so threads, rings and agents move to the keys
// the new clauses give them. An agent whose clause now runs a different
// command (argv, stdio, user, group or nice) is ended gracefully after its
// current jobs; idle agents beyond a lowered maxring are ended at once and
// busy ones as they finish. Windows keep their concurrency and feedback
// state, clamped to a lowered maxthr. Recipients no clause routed before are
// placed if the new one does.
//
// A configuration under which a destination in core, or an agent's host,
// would be routed by no clause is refused with an error wrapping ErrReload
// and nothing changes.
func (s *Core) Reconfigure(now time.Time, cfg *config.Config) error {
	s.event("Reconfigure")
	// Refuse before changing anything.
	var unrouted []string
	newClause := make(map[*thread.Thread]int, len(s.threads))
	for _, t := range s.threads {
		ci, ok := cfg.Match(t.Channel, t.Host)
		if !ok {
			unrouted = append(unrouted, t.Channel+"/"+t.Host)
			continue
		}
		newClause[t] = ci
	}
	agentClause := make(map[*agent]int, len(s.agents))
	for _, a := range s.agents {
		ci, ok := cfg.Match(a.channel, a.host)
		if !ok {
			if a.thread != nil || a.jobs > 0 {
				unrouted = append(unrouted, a.channel+"/"+a.host+" (agent "+strconv.Itoa(a.id)+")")
				continue
			}
			ci = -1 // an idle agent nothing routes any more: ended below
		}
		agentClause[a] = ci
	}
	if len(unrouted) > 0 {
		sort.Strings(unrouted)
		more := ""
		if len(unrouted) > 5 {
			more = fmt.Sprintf(" and %d more", len(unrouted)-5)
			unrouted = unrouted[:5]
		}
		return fmt.Errorf("%w: no clause would route %s%s", ErrReload, strings.Join(unrouted, ", "), more)
	}

	old := s.cfg
	changes := configChanges(old, cfg)
	s.cfg = cfg
	s.dests.trim(cfg.Scheduler.LearnedMax) // a lowered learned_max
	clear(s.routes)
	// Ring keys change, and the operator may have fixed a command.
	s.forgetThrottles()
	clear(s.words)

	// Take every thread out of its ring and every ring out of the map; the
	// rings are put back under their new keys, reusing the old ring object
	// (its job lists) wherever the ring maps to one new key, and take their
	// clause's order.
	threads := sortedThreads(s.threads)
	for _, t := range threads {
		if r := s.rings[ringKeyUnder(old, t)]; r != nil {
			r.Remove(t)
		}
	}
	oldRings := s.rings
	s.rings = make(map[ring.Key]*ring.Ring, len(oldRings))
	idlers := make(map[int]ring.Idle)
	for _, r := range oldRings {
		for in := range r.Idle() {
			idlers[in.Agent] = in
		}
	}
	for _, r := range s.blocked {
		r.SetBlocked(false)
	}
	s.blocked = nil
	reused := make(map[*ring.Ring]bool)
	place := func(from *ring.Ring, k ring.Key, hostBound bool) *ring.Ring {
		if r := s.rings[k]; r != nil {
			return r
		}
		var r *ring.Ring
		if from != nil && !reused[from] {
			reused[from] = true
			r = from
			r.Rekey(k, hostBound)
		} else {
			r = ring.New(k, hostBound)
		}
		setOrder(r, &cfg.Clauses[k.Clause])
		s.rings[k] = r
		return r
	}
	keyFor := func(ci int, channel, host string) (ring.Key, bool) {
		k := ring.Key{Clause: ci, Channel: channel}
		hb := cfg.Clauses[ci].Command.HostBound()
		if hb {
			k.Host = host
		}
		return k, hb
	}

	// Threads: new keys, windows, queueonly, expiry; vertices follow.
	byKey := make(map[thread.Key]*thread.Thread, len(s.threads))
	moved, clamped := 0, 0
	for _, t := range threads {
		ci := newClause[t]
		c := &cfg.Clauses[ci]
		from := oldRings[ringKeyUnder(old, t)]
		rk, hb := keyFor(ci, t.Channel, t.Host)
		r := place(from, rk, hb)
		t.Ring = r
		if r != from {
			moved++
		}
		r.AddThread()
		t.Key = thread.Key{Clause: ci, Channel: t.Channel, Host: t.Host}
		learned := t.Window.State()
		w := thread.NewWindow(c)
		w.Restore(learned)
		if w.Limit() != t.Window.Limit() {
			clamped++
		}
		t.Window = w
		t.QueueOnly = c.QueueOnly
		if !t.QueueOnly {
			t.ETRN = false
		}
		// The thread's vertices share its Key (vertex.Dest): they follow
		// it to the new clause without being moved, unless their ring
		// changes.
		if r != from {
			// The vertex leaves one ring's job lists for another's; fed
			// ones are accounted when their attempt ends.
			for _, v := range s.threadVertices(t) {
				if v.Agent != 0 {
					continue
				}
				inHeap := v.Queued()
				if inHeap {
					v.Dequeue()
				}
				s.orderDone(v)
				s.orderAdd(r, v, now)
				if inHeap {
					t.Add(v, now)
				}
			}
		}
		byKey[t.Key] = t
	}
	s.threads = byKey

	// Agents: into the ring their host now maps to; retired when the
	// command changed or nothing routes them.
	retired := 0
	for _, a := range sortedAgents(s.agents) {
		ci := agentClause[a]
		from := a.ring
		oldIdle, wasIdle := idlers[a.id]
		if ci < 0 {
			// No ring to count it in; it holds no job and ends at once. A
			// private ring keeps AgentExited's accounting away from live
			// rings.
			a.ring = ring.New(ring.Key{Clause: -1, Channel: a.channel, Host: a.host}, true)
			a.ring.AddAgent()
			a.clause = -1
			s.end(a, "reload: no clause routes its host")
			retired++
			continue
		}
		rk, hb := keyFor(ci, a.channel, a.host)
		r := place(from, rk, hb)
		fits := a.clause >= 0 && sameAgent(&old.Clauses[a.clause], &cfg.Clauses[ci])
		a.ring, a.clause = r, ci
		r.AddAgent()
		switch {
		case a.state == ending:
		case !fits:
			s.end(a, "reload: the clause's agent command changed")
			retired++
		case wasIdle:
			r.Park(oldIdle.Agent, oldIdle.Host, oldIdle.Since)
		}
	}
	// Idle agents beyond a lowered maxring go first; busy ones leave as
	// they finish (next).
	for _, r := range sortedRings(s.rings) {
		c := &cfg.Clauses[r.Clause]
		for in, ok := r.FirstIdle(); ok && r.Agents()-s.ending(r) > s.maxRing(c); in, ok = r.FirstIdle() {
			r.RemoveIdle(in.Agent)
			s.end(s.agents[in.Agent], "reload: ring over maxring")
			retired++
		}
	}
	for k, r := range s.rings {
		if r.Empty() {
			delete(s.rings, k)
		}
	}

	// Recipients that had no clause may have one now.
	routed := 0
	unmatched := s.unmatched
	s.unmatched = nil
	for _, v := range unmatched {
		ci, ok := s.match(v.Channel, v.Host)
		if !ok {
			s.unmatched = append(s.unmatched, v)
			continue
		}
		routed++
		s.placeVertex(s.thread(ci, v.Channel, v.Host, now), v, now)
	}

	for _, t := range sortedThreads(s.threads) {
		s.update(t, now)
	}
	s.unblock(now)
	s.observe(Observation{Kind: ObservedReloaded, Reload: &Reload{File: cfg.File, Clauses: len(cfg.Clauses),
		Threads: len(s.threads), ThreadsMoved: moved, WindowsClamped: clamped, AgentsRetired: retired,
		RcptsRouted: routed, Unrouted: len(s.unmatched), Changes: changes}})
	return nil
}

// ringKeyUnder is the key of t's ring under c (a reload holds two
// configurations at once).
func ringKeyUnder(c *config.Config, t *thread.Thread) ring.Key {
	k := ring.Key{Clause: t.Clause, Channel: t.Channel}
	if t.Clause >= 0 && t.Clause < len(c.Clauses) && c.Clauses[t.Clause].Command.HostBound() {
		k.Host = t.Host
	}
	return k
}

func sortedThreads(m map[thread.Key]*thread.Thread) []*thread.Thread {
	ts := make([]*thread.Thread, 0, len(m))
	for _, t := range m {
		ts = append(ts, t)
	}
	sortThreads(ts)
	return ts
}

func sortedRings(m map[ring.Key]*ring.Ring) []*ring.Ring {
	rs := make([]*ring.Ring, 0, len(m))
	for _, r := range m {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *ring.Ring) int {
		return cmp.Or(cmp.Compare(a.Clause, b.Clause), cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Host, b.Host))
	})
	return rs
}

func sortedAgents(m map[int]*agent) []*agent {
	as := make([]*agent, 0, len(m))
	for _, a := range m {
		as = append(as, a)
	}
	sort.Slice(as, func(i, j int) bool { return as[i].id < as[j].id })
	return as
}

// sameAgent reports whether an agent started for clause a can serve clause
// b: the same process would be started for both.
func sameAgent(a, b *config.Clause) bool { return config.SameAgent(a, b) }

// ending counts r's agents that are on their way out.
func (s *Core) ending(r *ring.Ring) int {
	n := 0
	for _, a := range s.agents {
		if a.ring == r && a.state == ending {
			n++
		}
	}
	return n
}

// configChanges lists what a reload changes: scheduler settings and
// clauses added, removed or with different attributes (matched by select
// pattern).
func configChanges(old, cfg *config.Config) []Change {
	var cs []Change
	for _, d := range fieldDiff(old.Scheduler, cfg.Scheduler) {
		cs = append(cs, Change{What: "scheduler setting changed", Key: d[0], From: d[1], To: d[2]})
	}
	was := make(map[string]*config.Clause, len(old.Clauses))
	for i := range old.Clauses {
		if _, dup := was[old.Clauses[i].Select]; !dup {
			was[old.Clauses[i].Select] = &old.Clauses[i]
		}
	}
	seen := make(map[string]bool)
	for i := range cfg.Clauses {
		c := &cfg.Clauses[i]
		if seen[c.Select] {
			continue
		}
		seen[c.Select] = true
		o, ok := was[c.Select]
		if !ok {
			cs = append(cs, Change{What: "clause added", Select: c.Select, Index: i, Line: c.Line})
			continue
		}
		for _, d := range fieldDiff(*o, *c) {
			if d[0] == "Line" {
				continue
			}
			cs = append(cs, Change{What: "clause changed", Select: c.Select, Key: d[0], From: d[1], To: d[2]})
		}
	}
	for _, sel := range slices.Sorted(maps.Keys(was)) {
		if !seen[sel] {
			cs = append(cs, Change{What: "clause removed", Select: sel})
		}
	}
	return cs
}

// fieldDiff returns [name, old, new] for each exported field of two structs
// of the same type whose printed values differ.
func fieldDiff[T any](a, b T) [][3]string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out [][3]string
	for i := 0; i < va.NumField(); i++ {
		f := va.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		x, y := fmt.Sprint(va.Field(i).Interface()), fmt.Sprint(vb.Field(i).Interface())
		if x != y {
			out = append(out, [3]string{f.Name, x, y})
		}
	}
	return out
}

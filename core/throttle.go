package core

import (
	"fmt"
	"time"

	"zsched/ring"
)

// Transport throttling (Postfix's transport_retry_time). A transport whose
// agents die at once — a usage error, a missing binary or library — must not
// be restarted for every job: with the agent command broken, each start
// fails the same way, and the ring would fork an agent per recipient while
// its destinations' windows grew on "deliveries" that never happened.
//
// A failure is an agent that exits (or cannot be started) before its first
// #hungry, or that dies with jobs outstanding, unless the scheduler killed
// it or is stopping. Its jobs count as negative feedback for their
// destinations (finish). The first failure throttles the agent's ring: no
// new agent for 1s; idle and working agents of the ring go on. When the
// back-off ends the ring is on probation: one agent at a time is started,
// until one completes a job. A probe that fails throttles the ring again
// for twice as long, up to the clause's transport_retry_time. Any agent of
// the ring that completes a job clears the throttle and its back-off.
//
// Agents started before the current throttle began that fail after it (a
// batch started together, all failing) are not new evidence: they count but
// neither extend nor double the back-off. Each throttle is one Ready.Throttle
// for the caller to log, with the failing agent's last output.

// firstThrottle is the first back-off of a ring: near Postfix's one retry
// time, short enough that a transient start failure costs little.
const firstThrottle = time.Second

// throttle is one ring's transport state after a failure, until an agent of
// the ring completes a job.
type throttle struct {
	key     ring.Key
	until   time.Time     // no new agent before; zero once on probation
	backoff time.Duration // the current back-off; doubles at a new failure
	gen     int           // this throttle's number; agents started under it carry it
	probe   int           // the probe agent on probation, 0 = none yet
	text    string        // why: the failure that set the throttle
	host    string        // the failing agent's destination, for the views
	// failures counts every failure since the ring last worked.
	failures int
}

// throttled returns r's throttle, nil when its transport is not throttled.
func (s *Core) throttled(r *ring.Ring) *throttle {
	if len(s.throttles) == 0 {
		return nil
	}
	return s.throttles[r.Key]
}

// transportClosed reports whether no new agent may be started for r now:
// its back-off runs, or its probe has not yet completed a job.
func (s *Core) transportClosed(r *ring.Ring, now time.Time) bool {
	th := s.throttled(r)
	return th != nil && (now.Before(th.until) || th.probe != 0)
}

// transportStarted notes a new agent of r: under a throttle it is the probe.
func (s *Core) transportStarted(r *ring.Ring, a *agent) {
	if th := s.throttled(r); th != nil {
		a.gen = th.gen
		th.probe = a.id
	}
}

// transportFailed applies an agent's failure to its ring.
func (s *Core) transportFailed(a *agent, why string, now time.Time) {
	if s.throttles == nil {
		s.throttles = make(map[ring.Key]*throttle)
	}
	k := a.ring.Key
	th := s.throttles[k]
	if th != nil {
		th.failures++
		if th.probe == a.id {
			th.probe = 0
		}
		if now.Before(th.until) || a.gen != th.gen {
			s.log.Debug("agent failed; its transport is throttled already", "agent", a.id,
				"channel", a.channel, "host", a.host, "reason", why, "failures", th.failures)
			return
		}
		th.backoff = min(2*th.backoff, s.clause(a.clause).TransportRetryTime.D())
	} else {
		th = &throttle{key: k, failures: 1, backoff: min(firstThrottle, s.clause(a.clause).TransportRetryTime.D())}
		s.throttles[k] = th
	}
	s.throttleGen++
	th.gen = s.throttleGen
	th.until = now.Add(th.backoff)
	th.text = why
	th.host = a.host
	s.stats.Throttles++
	s.wakeLift(th.until)
	s.ready.Throttles = append(s.ready.Throttles, Throttle{
		Agent: a.id, Clause: a.clause, Channel: a.channel, Host: a.host, Ring: k.Host,
		Until: th.until, Backoff: th.backoff, Failures: th.failures, Reason: why,
	})
}

// transportWorks clears r's throttle: an agent of it completed a job.
func (s *Core) transportWorks(a *agent, now time.Time) {
	th := s.throttled(a.ring)
	if th == nil {
		return
	}
	delete(s.throttles, th.key)
	s.observe(Observation{Kind: ObservedTransportWorks, Clause: s.clause(a.clause).Select, Channel: a.channel,
		Host: a.host, Agent: a.id, Failures: th.failures})
	// Its other threads may be waiting for an agent.
	s.serve(a.ring, now, -1)
}

// wakeLift makes sure Tick runs no later than at to end a back-off.
func (s *Core) wakeLift(at time.Time) {
	if s.nextLift.IsZero() || at.Before(s.nextLift) {
		s.nextLift = at
	}
}

// liftThrottles ends the back-offs due at now: their rings go on probation
// and get their probe. Throttles whose ring is gone are forgotten.
func (s *Core) liftThrottles(now time.Time) {
	if s.nextLift.IsZero() || now.Before(s.nextLift) {
		return
	}
	s.nextLift = time.Time{}
	var due []*throttle
	for _, th := range s.throttles {
		switch {
		case th.until.IsZero():
		case now.Before(th.until):
			s.wakeLift(th.until)
		default:
			due = append(due, th)
		}
	}
	sortThrottles(due)
	for _, th := range due {
		th.until = time.Time{}
		r := s.rings[th.key]
		if r == nil {
			// Nothing left to deliver through it: the next agent started
			// for it is a probe anyway if it fails (a fresh throttle).
			delete(s.throttles, th.key)
			continue
		}
		s.log.Debug("transport back-off over; starting a probe", "channel", th.key.Channel,
			"host", th.host, "backoff", th.backoff)
		s.serve(r, now, -1)
	}
}

func sortThrottles(ts []*throttle) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && keyLess(ts[j].key, ts[j-1].key); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

func keyLess(a, b ring.Key) bool {
	if a.Clause != b.Clause {
		return a.Clause < b.Clause
	}
	if a.Channel != b.Channel {
		return a.Channel < b.Channel
	}
	return a.Host < b.Host
}

// forgetThrottles drops every throttle: a reload may have fixed the
// command, and ring keys change with clause indexes.
func (s *Core) forgetThrottles() {
	clear(s.throttles)
	s.nextLift = time.Time{}
}

// flushThrottles ends the back-offs of the rings of channels that match
// (the operator's flush): their next agent is a probe.
func (s *Core) flushThrottles(now time.Time, match func(channel string) bool) {
	var due []*throttle
	for _, th := range s.throttles {
		if match(th.key.Channel) && !th.until.IsZero() {
			due = append(due, th)
		}
	}
	sortThrottles(due)
	for _, th := range due {
		th.until = time.Time{}
		if r := s.rings[th.key]; r != nil {
			s.serve(r, now, -1)
		}
	}
}

// throttleView fills a ring's view with its throttle.
func (s *Core) throttleView(r *ring.Ring, rv *RingView) {
	if th := s.throttled(r); th != nil {
		rv.Throttled, rv.Probing, rv.ThrottleText = th.until, th.until.IsZero(), th.text
	}
}

// throttledRings counts the rings that may not start an agent now.
func (s *Core) throttledRings(now time.Time) int {
	n := 0
	for _, th := range s.throttles {
		if now.Before(th.until) || th.probe != 0 {
			n++
		}
	}
	return n
}

// checkThrottles verifies that every running back-off will be lifted.
func (s *Core) checkThrottles() error {
	for k, th := range s.throttles {
		if th.key != k {
			return fmt.Errorf("throttle of %v filed under %v", th.key, k)
		}
		if !th.until.IsZero() && (s.nextLift.IsZero() || th.until.Before(s.nextLift)) {
			return fmt.Errorf("ring %s/%s throttled until %v, next lift at %v", k.Channel, k.Host, th.until, s.nextLift)
		}
		if th.probe != 0 && s.agents[th.probe] == nil {
			return fmt.Errorf("ring %s/%s waits for probe agent %d, which is gone", k.Channel, k.Host, th.probe)
		}
	}
	return nil
}

package lab

import (
	"fmt"
	"math/rand"
	"strconv"
	"time"

	"zsched/config"
	"zsched/core"
	"zsched/report"
	"zsched/sim"
)

// server is a simulated destination with an active concurrency limiter:
// at most limit sessions at once, one per job; a job that finds none free
// is refused at once with deferall for each recipient (421 at the
// greeting); the others take service per recipient, plus up to jitter,
// and are delivered.
type server struct {
	limit   func() int // 0 = no limit
	noise   int        // one session in noise fails; 0 = none
	service time.Duration
	jitter  time.Duration
	rng     *rand.Rand
	ends    []time.Time // end of each session in progress
	peak    int
	refused int
}

func (s *server) serve(now time.Time, j sim.Job) sim.Response {
	open := s.ends[:0]
	for _, e := range s.ends {
		// A session ending now has ended: the agent's reports, which
		// follow its end, are what makes the scheduler feed the next job.
		if e.After(now) {
			open = append(open, e)
		}
	}
	s.ends = open
	st := make([]report.Status, len(j.Rcpts))
	if k := s.limit(); k > 0 && len(s.ends) >= k {
		s.refused++
		for i := range st {
			st[i] = report.DeferAll
		}
		return sim.Response{Status: st, Text: "421 4.7.0 too many concurrent sessions"}
	}
	if s.noise > 0 && s.rng.Intn(s.noise) == 0 {
		for i := range st {
			st[i] = report.DeferAll
		}
		return sim.Response{Status: st, Text: "421 4.3.2 bad server behind the address"}
	}
	d := s.service * time.Duration(len(j.Rcpts))
	if s.jitter > 0 {
		d += time.Duration(s.rng.Int63n(int64(s.jitter)))
	}
	s.ends = append(s.ends, now.Add(d))
	s.peak = max(s.peak, len(s.ends))
	for i := range st {
		st[i] = report.OK3
	}
	return sim.Response{Status: st, Delay: d}
}

// Sim runs the experiment in simulation: the real core, simulated agents
// and destination, a fake clock. It measures the first pass, then lets the
// queue drain (deferred recipients come back an hour later) and reports
// what was left pending.
func Sim(l Limiter) (Result, error) {
	res := Result{Limiter: l, Mode: "sim", Pending: -1}
	cfg, err := config.Parse("lab.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n"+l.clause("limited")))
	if err != nil {
		return res, fmt.Errorf("lab: %w", err)
	}
	m := newMeter(l.Messages*l.Rcpts, l.Messages)
	srv := &server{limit: func() int { return l.limitAt(m.count()) }, noise: l.Noise,
		service: l.Service, jitter: l.Jitter, rng: rand.New(rand.NewSource(l.Seed))}
	s := sim.New(cfg, nil, l.Seed)
	s.OnReady = func(r *core.Ready) { m.observe(r.Observations) }
	s.Behavior = func(j sim.Job) sim.Response { return srv.serve(s.Now, j) }

	for i := 0; i < l.Messages; i++ {
		rcpts := make([]string, l.Rcpts)
		for k := range rcpts {
			rcpts[k] = "smtp/" + host + "/u" + strconv.Itoa(i) + "." + strconv.Itoa(k)
		}
		s.Enqueue(rcpts...)
	}
	seen := 0
	for !m.isDone() {
		if !s.Step() {
			return res, fmt.Errorf("lab: simulation stopped with %d of %d recipients attempted", len(m.first), m.want)
		}
		if err := s.Err(); err != nil {
			return res, fmt.Errorf("lab: %w", err)
		}
		m.outcomes(s.Outcomes[seen:])
		seen = len(s.Outcomes)
	}
	res.Elapsed = s.Now.Sub(sim.Epoch)
	m.result(&res)
	if top := maxLimit(l); top > 0 && srv.peak > top {
		return res, fmt.Errorf("lab: the simulated server had %d sessions, limit %d", srv.peak, top)
	}
	s.Run(7 * 24 * time.Hour)
	if err := s.Err(); err != nil {
		return res, fmt.Errorf("lab: draining: %w", err)
	}
	res.Pending = len(s.Pending())
	return res, nil
}

func (m *meter) isDone() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.finished
}

// maxLimit is the highest limit the server has during the run, 0 if it
// has none at some point.
func maxLimit(l Limiter) int {
	top := l.ServerLimit
	for _, c := range l.Changes {
		if top == 0 || c.Limit == 0 {
			return 0
		}
		top = max(top, c.Limit)
	}
	return top
}

package model

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"zsched/trace"
)

// Options tune inference; zero values take the defaults.
type Options struct {
	// MinSessions and MinRefusals: a destination with fewer sessions and
	// fewer refusals than these shares the default model. Defaults 20, 3.
	MinSessions int
	MinRefusals int
	// MaxSessions bounds the sessions kept per destination to reconstruct
	// its concurrency (the first ones; counts go on). Default 200 000.
	MaxSessions int
}

func (o *Options) defaults() {
	if o.MinSessions <= 0 {
		o.MinSessions = 20
	}
	if o.MinRefusals <= 0 {
		o.MinRefusals = 3
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 200_000
	}
}

// Builder infers a Model from a trace's records, fed in trace order.
type Builder struct {
	opt   Options
	dests map[[2]string]*acc
	order []*acc // first seen first: the walk order everywhere

	open     map[uint64]*session // sessions whose records may still come
	byAgent  map[string]uint64   // agent → its open session
	agentEnd map[string]int64    // agent → the end of its last session
	due      map[string]int64    // "msg\x00rcpt" → the retry time its last attempt logged
}

// acc gathers one destination's observations.
type acc struct {
	channel, host string
	sessions      []obs
	more          int // sessions beyond MaxSessions: counted, not kept
	rcpts         int // recipients in sessions
	accepted      int // recipients in accepted sessions
	failed        int
	deferred      int
	refusals      int
	retry         []time.Duration
}

// obs is one session as the model keeps it (times in Unix nanoseconds).
type obs struct {
	start, end int64
	setup      int64 // −1 unknown
	n          int32
	refused    bool
	first      bool // its agent's first job: holds the agent's start-up
	estimated  bool // start estimated (zsched) rather than logged
	guessed    bool // estimated start replaced by end − typical (settle)
	open       int32
}

// session is a session whose records are still coming.
type session struct {
	id                 uint64
	dest               *acc
	agent              string
	n                  int
	refused            bool
	failed, deferred   int
	end, due           int64 // due 0: unknown
	service, setup     time.Duration
	first, haveService bool
}

// NewBuilder returns an empty Builder.
func NewBuilder(o Options) *Builder {
	o.defaults()
	return &Builder{
		opt: o, dests: make(map[[2]string]*acc), open: make(map[uint64]*session),
		byAgent: make(map[string]uint64), agentEnd: make(map[string]int64), due: make(map[string]int64),
	}
}

func (b *Builder) dest(channel, host string) *acc {
	k := [2]string{channel, host}
	a := b.dests[k]
	if a == nil {
		channel, host = strings.Clone(channel), strings.Clone(host)
		k = [2]string{channel, host}
		a = &acc{channel: channel, host: host}
		b.dests[k] = a
		b.order = append(b.order, a)
	}
	return a
}

// Add takes one record.
func (b *Builder) Add(r trace.Record) {
	a := b.dest(r.Channel, r.Host)
	// A retry is due when its last attempt said (zsched's next=).
	var due int64
	var known bool
	if r.Attempt > 1 || !r.Next.IsZero() {
		key := r.Msg + "\x00" + r.Rcpt
		if due, known = b.due[key]; known {
			delete(b.due, key)
		}
		if !r.Next.IsZero() {
			b.due[key] = r.Next.UnixNano()
		}
	}
	if r.Word == "retryat" && !r.Next.IsZero() && len(a.retry) < 1000 {
		a.retry = append(a.retry, r.Next.Sub(r.At))
	}
	switch r.Status {
	case trace.Suspended, trace.Expired, trace.Gone:
		return // no session
	}
	if r.Agent == "" || r.Agent == "0" {
		// An outcome without a live agent (zsched: the agent had died):
		// no session the destination saw.
		return
	}
	s := b.open[r.Job]
	if s == nil {
		if prev, ok := b.byAgent[r.Agent]; ok {
			if p := b.open[prev]; p != nil {
				b.close(p)
			}
		}
		_, seen := b.agentEnd[r.Agent]
		// The record's strings share its log line: keys are copied.
		agent := strings.Clone(r.Agent)
		s = &session{id: r.Job, dest: a, agent: agent, first: !seen, service: -1, setup: -1}
		b.open[r.Job] = s
		b.byAgent[agent] = r.Job
		if !seen {
			b.agentEnd[agent] = 0
		}
	}
	s.n++
	if at := r.At.UnixNano(); at > s.end {
		s.end = at
	}
	switch {
	case r.Attempt <= 1:
		due, known = r.Arrival.UnixNano(), true
	case !known:
		due = 0
	}
	if known && due != 0 && (s.due == 0 || due < s.due) {
		s.due = due
	}
	switch r.Status {
	case trace.Refused:
		s.refused = true
	case trace.Failed:
		s.failed++
	case trace.Deferred:
		s.deferred++
	}
	if r.Service >= 0 {
		s.service, s.setup, s.haveService = r.Service, r.Setup, true
	}
}

// close ends a session: its start is placed, and it joins its destination.
func (b *Builder) close(s *session) {
	delete(b.open, s.id)
	if b.byAgent[s.agent] == s.id {
		delete(b.byAgent, s.agent)
	}
	o := obs{end: s.end, setup: -1, n: int32(s.n), refused: s.refused, first: s.first}
	last := b.agentEnd[s.agent]
	if s.end > last {
		b.agentEnd[s.agent] = s.end
	}
	switch {
	case s.haveService:
		o.start = s.end - int64(s.service)
		o.setup = int64(s.setup)
	default:
		// A job starts when its agent is free and it is due.
		start := s.due
		if !s.first && last > start {
			start = last
		}
		if start == 0 || start > s.end {
			start = s.end
		}
		o.start, o.estimated = start, true
	}
	a := s.dest
	a.rcpts += s.n
	if s.refused {
		a.refusals++
	} else {
		a.accepted += s.n
		a.failed += s.failed
		a.deferred += s.deferred
	}
	if len(a.sessions) < b.opt.MaxSessions {
		a.sessions = append(a.sessions, o)
	} else {
		a.more++
	}
}

// Model ends the trace and returns what was learned.
func (b *Builder) Model() *Model {
	ids := make([]uint64, 0, len(b.open))
	for id := range b.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b.close(b.open[id])
	}
	// Estimated sessions (zsched) are placed once more: a job whose agent
	// sat idle before it (its window had shrunk, say) has a start too
	// early, found against its destination's typical session.
	typs := make([]typical, len(b.order))
	var rest, restRefused [][]obs
	for i, a := range b.order {
		if typs[i] = typicalOf(a.sessions); !typs[i].ok {
			rest = append(rest, a.sessions)
		}
		if !typs[i].okRefused {
			restRefused = append(restRefused, a.sessions)
		}
	}
	pooled, pooledRefused := typicalOf(rest...), typicalOf(restRefused...)
	for i := range typs {
		if !typs[i].ok {
			typs[i].byN, typs[i].perRcpt, typs[i].ok = pooled.byN, pooled.perRcpt, pooled.ok
		}
		if !typs[i].okRefused {
			typs[i].refuse, typs[i].okRefused = pooledRefused.refuse, pooledRefused.okRefused
		}
	}
	m := &Model{Startup: startup(b.order, typs)}
	var pool []*acc
	for i, a := range b.order {
		settle(a.sessions, typs[i], m.Startup)
		concurrency(a.sessions)
		n := len(a.sessions) + a.more
		if n >= b.opt.MinSessions || a.refusals >= b.opt.MinRefusals {
			d := fit([]*acc{a})
			d.Channel, d.Host = a.channel, a.host
			m.Dests = append(m.Dests, d)
		} else {
			pool = append(pool, a)
		}
	}
	if len(pool) == 0 {
		// Every destination has its own model: the default, for
		// destinations the trace never saw, is made from all of them.
		pool = b.order
	} else {
		m.Pooled = len(pool)
	}
	m.Default = fit(pool)
	m.Default.Shared = true
	sort.SliceStable(m.Dests, func(i, j int) bool {
		if m.Dests[i].Recipients != m.Dests[j].Recipients {
			return m.Dests[i].Recipients > m.Dests[j].Recipients
		}
		return m.Dests[i].Channel+"/"+m.Dests[i].Host < m.Dests[j].Channel+"/"+m.Dests[j].Host
	})
	m.index()
	return m
}

// typical is a destination's usual session, from its estimated sessions
// that follow their agent's previous one (not an agent's first): the
// median for each recipient count with enough of them, else the median per
// recipient times the count; and its usual refusal.
type typical struct {
	byN           map[int32]time.Duration
	perRcpt       time.Duration
	refuse        time.Duration
	ok, okRefused bool // enough accepted, refused sessions to tell
}

// minTypical is how many sessions make a median.
const minTypical = 5

func typicalOf(groups ...[]obs) typical {
	byN := make(map[int32][]time.Duration)
	var per, refuse []time.Duration
	for _, ss := range groups {
		typicalAdd(ss, byN, &per, &refuse)
	}
	t := typical{byN: make(map[int32]time.Duration), ok: len(per) >= minTypical, okRefused: len(refuse) >= minTypical}
	for n, ds := range byN {
		if len(ds) >= minTypical {
			t.byN[n] = median(ds)
		}
	}
	t.perRcpt = median(per)
	if len(refuse) > 0 {
		slices.Sort(refuse)
		t.refuse = quantile(refuse, 0.25)
	}
	return t
}

func typicalAdd(ss []obs, byN map[int32][]time.Duration, per, refuse *[]time.Duration) {
	for _, o := range ss {
		if !o.estimated {
			continue
		}
		d := time.Duration(o.end - o.start)
		if o.refused {
			// A refusal is quick; what makes one seem long is time the
			// agent spent before it (starting, or idle), so the lower
			// quartile of all of them is taken, first jobs included.
			*refuse = append(*refuse, d)
			continue
		}
		if o.first {
			continue
		}
		byN[o.n] = append(byN[o.n], d)
		*per = append(*per, d/time.Duration(max(o.n, 1)))
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return quantile(ds, 0.5)
}

func (t typical) of(o obs) time.Duration {
	if o.refused {
		return t.refuse
	}
	if d, ok := t.byN[o.n]; ok {
		return d
	}
	return t.perRcpt * time.Duration(max(o.n, 1))
}

// startup estimates an agent's start-up: how much longer agents' first
// accepted jobs took than their destinations' typical ones. Many first
// jobs also waited for a window (agents start as a window grows), so the
// lower quartile of those excesses is taken. Zero when the trace logs
// service times (Postfix).
func startup(as []*acc, typs []typical) time.Duration {
	var excess []time.Duration
	for i, a := range as {
		if !typs[i].ok {
			continue
		}
		for _, o := range a.sessions {
			if o.estimated && o.first && !o.refused {
				excess = append(excess, time.Duration(o.end-o.start)-typs[i].of(o))
			}
		}
	}
	if len(excess) < 3 {
		return 0
	}
	slices.Sort(excess)
	return max(quantile(excess, 0.5), 0)
}

// staleFactor is how much longer than typical an estimated session may
// seem before its start is taken for the agent's idle time rather than
// its work (beyond the log's precision, staleSlack).
const (
	staleFactor = 1.5
	staleSlack  = 2 * time.Millisecond
)

// settle places estimated sessions. An agent's first job begins after the
// agent's start-up. A session far longer than its destination's typical
// one had an agent that sat idle first (its window had shrunk): the core
// gives an idle agent a job when something happens at the destination —
// mostly another session ending, which is feedback — so its start is
// moved to the end of another session that leaves it closest to a typical
// session, or to a typical session before its end if none is near.
func settle(ss []obs, t typical, startup time.Duration) {
	ends := make([]int64, len(ss))
	for i, o := range ss {
		ends[i] = o.end
	}
	slices.Sort(ends)
	for i := range ss {
		o := &ss[i]
		if !o.estimated || o.refused && !t.okRefused || !o.refused && !t.ok {
			continue
		}
		typ := t.of(*o)
		var extra time.Duration
		if o.first {
			extra = startup
		}
		raw := time.Duration(o.end - o.start)
		if raw <= time.Duration(staleFactor*float64(typ))+extra+staleSlack {
			o.start = min(o.start+int64(extra), o.end)
			continue
		}
		want := o.end - int64(typ)
		best, bestD := want, int64(math.MaxInt64)
		// Ends between the agent's last sight and half a typical
		// session before this one's end.
		k := sort.Search(len(ends), func(k int) bool { return ends[k] > o.start })
		for ; k < len(ends) && ends[k] < o.end-int64(typ/2); k++ {
			if d := abs(ends[k] - want); d < bestD && d <= int64(typ/2) {
				best, bestD = ends[k], d
			}
		}
		o.start, o.guessed = best, true
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// concurrency sets each session's open: how many accepted sessions of the
// destination were in progress when it began (itself excluded). A
// session that began at the very instant a refused one did is counted for
// the refusal: the limiter was full, so it came first.
func concurrency(ss []obs) {
	var starts, ends []int64
	for _, o := range ss {
		if !o.refused && o.end > o.start {
			starts = append(starts, o.start)
			ends = append(ends, o.end)
		}
	}
	slices.Sort(starts)
	slices.Sort(ends)
	for i := range ss {
		t := ss[i].start
		var began int
		if ss[i].refused {
			began = sort.Search(len(starts), func(k int) bool { return starts[k] > t })
		} else {
			began = sort.Search(len(starts), func(k int) bool { return starts[k] >= t })
		}
		ended := sort.Search(len(ends), func(k int) bool { return ends[k] > t })
		ss[i].open = int32(max(began-ended, 0))
	}
}

// fit makes one model from the observations of destinations as.
func fit(as []*acc) *Dest {
	d := &Dest{}
	var rcptSamples, sessionSamples, refuseSamples, retry []time.Duration
	var accepted, failed, deferred int
	var xs, ys []float64 // recipients, service of accepted estimated sessions
	var open []int32
	var refused []bool
	for _, a := range as {
		d.Sessions += len(a.sessions) + a.more
		d.Recipients += a.rcpts
		d.Refusals += a.refusals
		accepted += a.accepted
		failed += a.failed
		deferred += a.deferred
		retry = append(retry, a.retry...)
		for _, o := range a.sessions {
			svc := time.Duration(o.end - o.start)
			open = append(open, o.open)
			refused = append(refused, o.refused)
			if o.refused {
				refuseSamples = append(refuseSamples, svc)
				continue
			}
			d.PeakOpen = max(d.PeakOpen, int(o.open)+1)
			if o.setup >= 0 {
				sessionSamples = append(sessionSamples, time.Duration(o.setup))
				rcptSamples = append(rcptSamples, max(svc-time.Duration(o.setup), 0)/time.Duration(max(o.n, 1)))
				continue
			}
			xs = append(xs, float64(o.n))
			ys = append(ys, float64(svc))
		}
	}
	if len(xs) > 0 {
		a, b := regress(xs, ys)
		for i := range xs {
			rcptSamples = append(rcptSamples, time.Duration(math.Max(ys[i]-a, 0)/xs[i]))
		}
		if a > 0 && b > 0 {
			sessionSamples = append(sessionSamples, time.Duration(a))
		}
	}
	d.PerRcpt = NewDist(rcptSamples)
	d.PerSession = NewDist(sessionSamples)
	d.RefuseTime = NewDist(refuseSamples)
	if accepted > 0 {
		d.Failed = float64(failed) / float64(accepted)
		d.Deferred = float64(deferred) / float64(accepted)
	}
	if len(retry) > 0 {
		d.Retry = NewDist(retry).Quantile(0.5)
	}
	d.Limit, d.P = fitRefusals(open, refused)
	return d
}

// regress fits y = a + b·x by least squares, with a ≥ 0 and b ≥ 0; when x
// does not vary, all of y is per recipient (a = 0).
func regress(xs, ys []float64) (a, b float64) {
	var sx, sy, sxx, sxy float64
	n := float64(len(xs))
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den <= 1e-9*n*sxx {
		return 0, sy / sx
	}
	b = (n*sxy - sx*sy) / den
	a = (sy - b*sx) / n
	if a < 0 || b < 0 {
		return 0, sy / sx
	}
	return a, b
}

// fitRefusals picks the limit K (0: none) and the probability p that best
// explain which sessions were refused, from each session's reconstructed
// concurrency (open: accepted sessions in progress when it began). It fits
// a step — refused with probability lo below K, hi at K and above — by
// likelihood, and keeps the limit when the step beats one rate for all by
// more than 4 (two parameters more, and K chosen among many) and hi ≥ ½:
// a limiter refuses most sessions above its limit. The reconstruction is
// off by about one session near the limit (a session that begins as
// another ends), so the rate regardless of concurrency is measured two
// sessions or more below K, where that error does not reach.
// minFarRefusals is how many refusals far below a limit it takes to
// believe in refusals regardless of concurrency beside the limit.
const minFarRefusals = 5

func fitRefusals(open []int32, refused []bool) (limit int, p float64) {
	top := 0
	for _, o := range open {
		top = max(top, int(o))
	}
	tot := make([]int, top+2)
	ref := make([]int, top+2)
	var n, r int
	for i, o := range open {
		tot[o]++
		n++
		if refused[i] {
			ref[o]++
			r++
		}
	}
	if n == 0 || r == 0 {
		return 0, 0
	}
	all := float64(r) / float64(n)
	base := logLik(r, n, all)
	best, bestK := base, 0
	var below, rb int
	for k := 1; k <= top; k++ {
		below += tot[k-1]
		rb += ref[k-1]
		above, ra := n-below, r-rb
		if below == 0 || above == 0 {
			continue
		}
		lo, hi := float64(rb)/float64(below), float64(ra)/float64(above)
		if hi < 0.5 || hi <= lo {
			continue
		}
		if ll := logLik(rb, below, lo) + logLik(ra, above, hi); ll > best {
			best, bestK = ll, k
		}
	}
	if bestK == 0 || best-base <= 4 {
		return 0, all
	}
	var far, rf int
	for o := 0; o <= bestK-2; o++ {
		far += tot[o]
		rf += ref[o]
	}
	if far < 10 || rf < minFarRefusals {
		// Too few sessions or refusals far below the limit to tell a
		// rate from the reconstruction's error: none.
		return bestK, 0
	}
	return bestK, float64(rf) / float64(far)
}

// Name is a destination's name as the simulator prints it.
func Name(channel, host string) string {
	if host == "" {
		return channel
	}
	return channel + "/" + strings.ToLower(host)
}

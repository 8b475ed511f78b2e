// Package redisbook is the window.Book of real cluster nodes (DESIGN §13,
// issue 20): each destination's window, feedback counters, dead-until
// time and learned ceiling live in Redis, and every session a node runs
// holds a lease there. Requests run as Lua scripts (EVALSHA, loaded again
// when the server has lost them), each atomic: acquire grants a lease only
// while the live leases are below the shared window; report applies the
// feedback with thread.Window's arithmetic; release ends a lease. A lease
// is a member of a sorted set scored by its expiry; the book renews its
// node's leases every third of a lease, so a node that dies frees its
// sessions one lease after its last renewal.
//
// The daemon's loop never waits for the network: Do only queues the
// requests, one goroutine of the book carries them out (pipelined) and
// delivers the answers on Events; a second subscribes to the node's Free
// channel. While Redis is unreachable the book answers from fallback
// windows — per destination, a local window capped at the last shared
// window divided by the live nodes last seen (at least 1) — logs it once,
// shows it in Status, and reconnects with backoff. Back, it reconciles:
// writes the last shared state it saw where the store lost it (a restart
// without persistence), registers the sessions it still runs and drops
// the leases it could not account for, and answers from Redis again.
//
// Time: scripts take the asking node's time (Request's now, and the
// book's clock for renewals), not Redis's TIME, so that tests and the
// simulator control it. Nodes' clocks must agree to well within a third of
// a lease: a node whose clock runs ahead by s sees others' leases expire s
// early, and so may grant up to their sessions too many while they are
// still renewing (every lease/3, so skew below 2/3 of a lease never
// frees a renewed lease; 20 s at the default 30 s). Its own leases, scored
// by its clock, last s longer, which only errs on the safe side. NTP keeps
// skew in milliseconds; dead-until times and ceiling ages move by the skew
// too, harmlessly.
//
// Keys (prefix from [cluster], default "zsched:"; D is channel/host):
//
//	{prefix}{D}:w      hash: c s f fc ceil str calm clean cat dead st — the window
//	{prefix}{D}:l      sorted set: lease members (node:incarnation:n) by expiry (ms)
//	{prefix}{D}:q      sorted set: nodes denied since the last Free, by expiry
//	{prefix}nodes      sorted set: live nodes by expiry
//	{prefix}nodes:st   sorted set: those of them that know the slow start (st)
//	{prefix}free:N     channel: D, published when a session may be free for node N
//
// One Redis server (or a primary with replicas behind one address): the
// scripts touch a destination's keys and the nodes key together, so Redis
// Cluster is not supported.
package redisbook

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"zsched/cluster"
	"zsched/thread"
	"zsched/window"
)

// Timeouts of one round trip: past them the store counts as unreachable.
const (
	dialTimeout = time.Second
	ioTimeout   = time.Second
	// maxBackoff bounds the wait between reconnection attempts.
	maxBackoff = 5 * time.Second
	minBackoff = 50 * time.Millisecond
)

// Options are a book's collaborators.
type Options struct {
	Log hclog.Logger // nil: no log
	// Clock is the time of renewals and of the status; nil: time.Now.
	// Requests carry their own time.
	Clock func() time.Time
}

// Book is one node's book in Redis.
type Book struct {
	cfg    cluster.Config
	log    hclog.Logger
	clock  func() time.Time
	rdb    *redis.Client
	events chan []window.Event
	done   chan struct{}
	wg     sync.WaitGroup
	member string // this incarnation's prefix of lease members

	mu       sync.Mutex
	queue    []queued
	restored []Remembered  // from Restore, for the worker to adopt
	wake     chan struct{} // a request was queued
	status   cluster.Status

	// The worker's own, touched by no other goroutine.
	mode    cluster.Mode // the worker's copy of status.Mode
	held    map[window.Lease]lease
	shared  map[window.Lease]struct{} // held leases the store knows of
	seq     window.Lease
	dests   map[window.Dest]*dest
	order   []window.Dest  // dests' keys in first-seen order: walks are deterministic
	stale   []lease        // leases the store may count for nothing
	nodes   int            // live nodes at the last answer
	pending []window.Event // to deliver at the end of the turn
	probing bool           // a prober runs
	up      chan struct{}  // the prober reached the store
	pubsub  *redis.PubSub
	free    <-chan *redis.Message // Free notices for this node
	renewAt time.Duration
	rng     *rand.Rand // backoff jitter, under mu
	ctx     context.Context
	cancel  context.CancelFunc
}

type queued struct {
	now time.Time
	req window.Request
}

type lease struct {
	dest   window.Dest
	member string
}

// dest is what the book knows of one destination.
type dest struct {
	busy    int            // leases held
	last    window.State   // the last shared state seen
	known   bool           // last is set
	used    time.Time      // the last request on it
	fb      *window.Record // its fallback window, while in fallback
	waiting bool           // denied by the fallback window
}

// forget is how long the book remembers a destination without sessions
// after its last request: the store's state outlives its last use as long
// (the scripts' save), and a node comes back from fallback seeding what
// the store may have lost in that time.
const forget = time.Hour

// New returns a book for cfg and starts its goroutines; Close stops them.
// It does not wait for Redis: until the store answers, requests are
// answered by fallback windows.
func New(cfg cluster.Config, opt Options) (*Book, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("redisbook: redis URL %s: %w", cfg.Redacted(), err)
	}
	pw, err := cfg.Password()
	if err != nil {
		return nil, fmt.Errorf("redisbook: %w", err)
	}
	if pw != "" {
		o.Password = pw
	}
	// Requests are not idempotent (an acquire resent after a lost reply
	// takes two leases): never resend; the fallback takes over instead.
	o.MaxRetries = -1
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dialTimeout, ioTimeout, ioTimeout
	o.DialerRetries = 1
	o.PoolSize = 4
	o.ClientName = "zsched-" + cfg.Node
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}

	if opt.Log == nil {
		opt.Log = hclog.NewNullLogger()
	}
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	now := opt.Clock()
	ctx, cancel := context.WithCancel(context.Background())
	b := &Book{
		cfg:     cfg,
		log:     opt.Log,
		clock:   opt.Clock,
		rdb:     redis.NewClient(o),
		events:  make(chan []window.Event),
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		member:  cfg.Node + ":" + strconv.FormatInt(now.UnixNano(), 36) + "." + strconv.Itoa(os.Getpid()) + ":",
		held:    make(map[window.Lease]lease),
		dests:   make(map[window.Dest]*dest),
		shared:  make(map[window.Lease]struct{}),
		up:      make(chan struct{}, 1),
		nodes:   1,
		rng:     rand.New(rand.NewSource(now.UnixNano())),
		ctx:     ctx,
		cancel:  cancel,
		renewAt: cfg.Lease / 3,
	}
	b.status = cluster.Status{Node: cfg.Node, Store: cfg.Redacted(), Mode: cluster.Connecting, Since: now, Nodes: 1}
	b.pubsub = b.rdb.Subscribe(ctx, b.channel())
	b.free = b.pubsub.Channel(redis.WithChannelHealthCheckInterval(cfg.Lease / 3))
	b.wg.Add(1)
	go b.run()
	return b, nil
}

// Do queues reqs, made at now, for the book's goroutine and returns nil:
// the answers come on Events. It never blocks on the network.
func (b *Book) Do(now time.Time, reqs []window.Request) []window.Event {
	if len(reqs) == 0 {
		return nil
	}
	b.mu.Lock()
	for _, r := range reqs {
		b.queue = append(b.queue, queued{now: now, req: r})
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return nil
}

// Remembered is what a node's state file kept of a destination: the
// last shared window it saw (thread.WindowState) and its dead-until time.
type Remembered struct {
	Dest      window.Dest
	Window    thread.WindowState
	DeadUntil time.Time
}

// Restore gives the book what the node remembered from its last run, as
// the last shared state of each destination it has not heard of since:
// the fallback windows start from it (capped at the node's share), and a
// reconnect seeds it where the store has lost the destination. What the
// store answers replaces it. It never blocks.
func (b *Book) Restore(rs []Remembered) {
	if len(rs) == 0 {
		return
	}
	b.mu.Lock()
	b.restored = append(b.restored, rs...)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// adopt takes what Restore gave: the worker's.
func (b *Book) adopt() {
	b.mu.Lock()
	rs := b.restored
	b.restored = nil
	b.mu.Unlock()
	if len(rs) == 0 {
		return
	}
	now := b.clock()
	for _, r := range rs {
		ds := b.dest(r.Dest, now)
		if ds.known {
			continue // the store answered since: newer
		}
		ds.last, ds.known = window.State{Window: r.Window, Nodes: 1}, true
		if r.Window.Concurrency == 0 {
			ds.last.DeadUntil = r.DeadUntil
		}
	}
}

// Events delivers the answers to Do's requests, in order, and Free
// notices, in batches. Read it until Close.
func (b *Book) Events() <-chan []window.Event { return b.events }

// Status returns the node's view of the cluster now.
func (b *Book) Status() cluster.Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status
}

// Close stops the book: its leases and its place among the live nodes are
// removed from the store if it can be reached (else they expire), and its
// goroutines end. Events is not closed; requests queued and not yet
// carried out are dropped.
func (b *Book) Close() error {
	close(b.done)
	b.cancel()
	b.wg.Wait()
	return b.rdb.Close()
}

func (b *Book) channel() string { return b.cfg.Prefix + "free:" + b.cfg.Node }

func (b *Book) key(d window.Dest, part string) string {
	return b.cfg.Prefix + "{" + d.String() + "}:" + part
}

func (b *Book) nodesKey() string { return b.cfg.Prefix + "nodes" }

// slowNodesKey is the live nodes that know the slow start (the scripts'
// mixed): a node of an older release beats only in nodesKey.
func (b *Book) slowNodesKey() string { return b.cfg.Prefix + "nodes:st" }

// run is the book's goroutine: every exchange with the store happens here.
func (b *Book) run() {
	defer b.wg.Done()
	defer b.pubsub.Close()
	renew := time.NewTicker(b.renewAt)
	defer renew.Stop()
	b.reconcile()
	for {
		select {
		case <-b.done:
			b.leave()
			return
		case <-b.wake:
			b.serve()
		case <-renew.C:
			b.renew()
		case <-b.up:
			b.probing = false
			b.reconcile()
		case m, ok := <-b.free:
			if !ok {
				b.free = nil
				continue
			}
			b.notice(m.Payload)
		}
		b.flush()
	}
}

// emit queues events for delivery at the end of the turn.
func (b *Book) emit(evs ...window.Event) { b.pending = append(b.pending, evs...) }

// flush delivers the turn's events, unless the book is closing.
func (b *Book) flush() {
	if len(b.pending) == 0 {
		return
	}
	evs := b.pending
	b.pending = nil
	select {
	case b.events <- evs:
	case <-b.done:
	}
}

// notice turns a Free published for this node into an event.
func (b *Book) notice(payload string) {
	ch, host, ok := strings.Cut(payload, "/")
	if !ok {
		b.log.Warn("cluster: malformed free notice", "payload", payload)
		return
	}
	d := window.Dest{Channel: ch, Host: host}
	var st window.State
	if ds, ok := b.dests[d]; ok {
		st = b.view(ds, ds.last)
	}
	b.emit(window.Event{Kind: window.Free, Dest: d, State: st})
}

func (b *Book) take() []queued {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue = nil
	return q
}

// serve carries out the queued requests: in the store, or from the
// fallback windows when it cannot be reached.
func (b *Book) serve() {
	b.adopt()
	q := b.take()
	if len(q) == 0 {
		return
	}
	if b.mode != cluster.Shared {
		for _, r := range q {
			b.local(r)
		}
		return
	}
	done, err := b.exchange(q)
	if err != nil {
		b.fall(err)
		for _, r := range q[done:] {
			b.local(r)
		}
	}
}

// call is one request's script and arguments.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
}

// prepare turns a request into its script call, assigning an acquire its
// lease. ok is false for a request with nothing to do.
func (b *Book) prepare(r queued) (c call, l window.Lease, ok bool) {
	req := r.req
	ms := r.now.UnixMilli()
	switch req.Op {
	case window.Acquire:
		b.dest(req.Dest, r.now)
		b.seq++
		l = b.seq
		return call{acquire, b.destKeys(req.Dest, true),
			append(b.args(ms, req.Params), b.memberOf(l), b.cfg.Prefix+"free:", req.Dest.String())}, l, true
	case window.Release:
		h, held := b.held[req.Lease]
		if !held {
			return call{}, 0, false
		}
		return call{release, b.destKeys(h.dest, false), []any{ms, h.member, b.cfg.Prefix + "free:", h.dest.String()}},
			req.Lease, true
	case window.Report:
		b.dest(req.Dest, r.now)
		failed, until := "0", int64(0)
		if req.Failed {
			failed = "1"
			if !req.DeadUntil.IsZero() {
				until = req.DeadUntil.UnixMilli()
			}
		}
		return call{report, b.destKeys(req.Dest, true),
			append(b.args(ms, req.Params), failed, until, b.cfg.Prefix+"free:", req.Dest.String())}, 0, true
	}
	return call{}, 0, false
}

func (b *Book) destKeys(d window.Dest, nodes bool) []string {
	k := []string{b.key(d, "w"), b.key(d, "l"), b.key(d, "q")}
	if nodes {
		k = append(k, b.nodesKey(), b.slowNodesKey())
	}
	return k
}

// args are a script's ARGV 1–14: the time, the lease, the node and the
// destination's settings.
func (b *Book) args(ms int64, p window.Params) []any {
	p = p.Normal()
	return []any{ms, b.cfg.Lease.Milliseconds(), b.cfg.Node, p.Max, p.Initial,
		int(p.Positive.Kind), fmtFloat(p.Positive.Value), int(p.Negative.Kind), fmtFloat(p.Negative.Value),
		p.CohortLimit, flag(p.Learn), p.ProbeFactor, p.TTL.Milliseconds(), flag(p.SlowStart)}
}

// flag is a boolean as the scripts read it.
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// fmtFloat writes f so that Lua's tonumber reads the same double.
func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// memberOf is a lease's member in the store: unique across the cluster
// and across the node's restarts.
func (b *Book) memberOf(l window.Lease) string { return b.member + l.String() }

// dest returns what the book knows of d, new if nothing, and notes a
// request on it at now.
func (b *Book) dest(d window.Dest, now time.Time) *dest {
	ds, ok := b.dests[d]
	if !ok {
		ds = &dest{}
		b.dests[d] = ds
		b.order = append(b.order, d)
	}
	if now.After(ds.used) {
		ds.used = now
	}
	return ds
}

// prune forgets the destinations without sessions unused since forget
// before now.
func (b *Book) prune(now time.Time) {
	keep := b.order[:0]
	for _, d := range b.order {
		if ds := b.dests[d]; ds.busy == 0 && !ds.waiting && now.Sub(ds.used) > forget {
			delete(b.dests, d)
			continue
		}
		keep = append(keep, d)
	}
	clear(b.order[len(keep):])
	b.order = keep
}

// exchange runs q's requests in the store, pipelined, and emits their
// answers. On a failure it returns how many requests were answered (the
// rest are the fallback's) and the error; the fate of the one that failed
// is unknown, and its lease (if an acquire) is counted as stale.
func (b *Book) exchange(q []queued) (done int, err error) {
	calls := make([]call, len(q))
	leases := make([]window.Lease, len(q))
	skip := make([]bool, len(q))
	for i, r := range q {
		var ok bool
		calls[i], leases[i], ok = b.prepare(r)
		skip[i] = !ok
	}
	cmds := make([]*redis.Cmd, len(q))
	run := func(idx []int) error {
		ctx, cancel := context.WithTimeout(b.ctx, 2*ioTimeout)
		defer cancel()
		pipe := b.rdb.Pipeline()
		for _, i := range idx {
			cmds[i] = calls[i].script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	var all []int
	for i := range q {
		if !skip[i] {
			all = append(all, i)
		}
	}
	run(all)
	// The server lost the scripts (restarted, SCRIPT FLUSH): load them,
	// run again what did not run.
	var again []int
	for _, i := range all {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		if err := b.load(); err != nil {
			return b.answered(q, leases, skip, cmds, err)
		}
		run(again)
	}
	return b.answered(q, leases, skip, cmds, nil)
}

// load loads every script into the server's cache.
func (b *Book) load() error {
	ctx, cancel := context.WithTimeout(b.ctx, 2*ioTimeout)
	defer cancel()
	for _, s := range scripts {
		if err := s.Load(ctx, b.rdb).Err(); err != nil {
			return fmt.Errorf("redisbook: script load: %w", err)
		}
	}
	return nil
}

// answered emits the answers of q's requests in order, up to the first
// that failed.
func (b *Book) answered(q []queued, leases []window.Lease, skip []bool, cmds []*redis.Cmd, loadErr error) (int, error) {
	for i, r := range q {
		if skip[i] {
			continue
		}
		err := cmds[i].Err()
		if err == nil && loadErr != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = loadErr
		}
		if err != nil {
			if r.req.Op == window.Acquire {
				// Granted or not, nobody knows: drop it at reconcile,
				// unless the fallback grants the same lease.
				b.stale = append(b.stale, lease{dest: r.req.Dest, member: b.memberOf(leases[i])})
			}
			return i, fmt.Errorf("redisbook: %s %s: %w", r.req.Op, r.req.Dest, err)
		}
		if err := b.answer(r, leases[i], cmds[i]); err != nil {
			return i + 1, err
		}
	}
	return len(q), nil
}

// answer emits the event of one request the store carried out.
func (b *Book) answer(r queued, l window.Lease, cmd *redis.Cmd) error {
	req := r.req
	if req.Op == window.Release {
		h := b.held[req.Lease]
		delete(b.held, req.Lease)
		delete(b.shared, req.Lease)
		b.dests[h.dest].busy--
		b.setLeases()
		return nil
	}
	rep, err := parse(cmd)
	if err != nil {
		return fmt.Errorf("redisbook: %s %s: %w", req.Op, req.Dest, err)
	}
	b.nodes = max(rep.nodes, 1)
	st := rep.state(req.Params, r.now)
	ds := b.dest(req.Dest, r.now)
	ds.last, ds.known = st, true
	ev := window.Event{Dest: req.Dest}
	switch rep.kind {
	case "granted":
		b.held[l] = lease{dest: req.Dest, member: b.memberOf(l)}
		b.shared[l] = struct{}{}
		ds.busy++
		b.setLeases()
		ev.Kind, ev.Lease, ev.Revived = window.Granted, l, rep.revived
	case "full", "dead":
		ev.Kind, ev.Reason, ev.Retry, ev.Revived = window.Denied, window.Full, rep.retry, rep.revived
		if rep.kind == "dead" {
			ev.Reason = window.Dead
		}
	case "changed":
		ev.Kind, ev.From, ev.Failed, ev.Died = window.Changed, rep.from, req.Failed, rep.died
		ev.Revived = rep.from == 0 && st.Limit() > 0
	default:
		return fmt.Errorf("redisbook: %s %s: unknown answer %q", req.Op, req.Dest, rep.kind)
	}
	ev.State = b.view(ds, st)
	b.emit(ev)
	return nil
}

// view completes a state with what only this node knows.
func (b *Book) view(ds *dest, st window.State) window.State {
	st.Mine = ds.busy
	st.Nodes = max(st.Nodes, 1)
	return st
}

func (b *Book) setLeases() {
	n := len(b.held)
	b.mu.Lock()
	b.status.Leases = n
	b.status.Nodes = b.nodes
	b.mu.Unlock()
}

// reply is a script's answer.
type reply struct {
	kind          string
	retry         time.Time
	revived, died bool
	from          int
	live, nodes   int
	w             thread.Window
	dead          time.Time
	byNode        []window.NodeLeases
}

func parse(cmd *redis.Cmd) (reply, error) {
	vs, err := cmd.StringSlice()
	if err != nil {
		return reply{}, err
	}
	if len(vs) != 19 {
		return reply{}, fmt.Errorf("answer of %d fields, want 19", len(vs))
	}
	var r reply
	var errs []error
	i := func(k int) int64 {
		n, err := strconv.ParseInt(vs[k], 10, 64)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	f := func(k int) float64 {
		x, err := strconv.ParseFloat(vs[k], 64)
		if err != nil {
			errs = append(errs, err)
		}
		return x
	}
	ms := func(k int) time.Time {
		if n := i(k); n != 0 {
			return time.UnixMilli(n)
		}
		return time.Time{}
	}
	r.kind = vs[0]
	r.retry = ms(1)
	r.revived, r.died = i(2) == 1, i(4) == 1
	r.from, r.live, r.nodes = int(i(3)), int(i(5)), int(i(6))
	r.w = thread.Window{Concurrency: int(i(7)), Success: f(8), Failure: f(9), FailCohorts: f(10),
		Ceiling: int(i(11)), Strikes: int(i(12)), Calm: int(i(13)), Clean: int(i(14)), CeilingAt: ms(15),
		Starting: i(18) == 1}
	r.dead = ms(16)
	if by := strings.Fields(vs[17]); len(by)%2 == 0 {
		for k := 0; k < len(by); k += 2 {
			n, err := strconv.Atoi(by[k+1])
			if err != nil {
				errs = append(errs, err)
			}
			r.byNode = append(r.byNode, window.NodeLeases{Node: by[k], Leases: n})
		}
	} else {
		errs = append(errs, fmt.Errorf("leases by node %q: an odd number of fields", vs[17]))
	}
	return r, errors.Join(errs...)
}

// state is the reply as a window.State, computed by window.Record with p.
func (r reply) state(p window.Params, now time.Time) window.State {
	w := r.w
	p.Apply(&w)
	rec := window.Record{Window: w, DeadUntil: r.dead}
	st := rec.State(now, r.live, 0, r.nodes)
	st.ByNode = r.byNode
	return st
}

// renew extends every lease the node holds, and its own liveness, by a
// lease from now.
func (b *Book) renew() {
	if b.mode != cluster.Shared {
		return
	}
	now := b.clock()
	b.prune(now)
	if err := b.register(now); err != nil {
		b.fall(err)
	}
}

// register writes the node's liveness and every lease it holds, at now,
// and drops the stale ones.
func (b *Book) register(now time.Time) error {
	ctx, cancel := context.WithTimeout(b.ctx, 2*ioTimeout)
	defer cancel()
	until := float64(now.Add(b.cfg.Lease).UnixMilli())
	pipe := b.rdb.Pipeline()
	for _, k := range []string{b.nodesKey(), b.slowNodesKey()} {
		pipe.ZAdd(ctx, k, redis.Z{Score: until, Member: b.cfg.Node})
		pipe.PExpire(ctx, k, 2*b.cfg.Lease)
	}
	byDest := make(map[window.Dest][]redis.Z)
	for _, h := range b.held {
		byDest[h.dest] = append(byDest[h.dest], redis.Z{Score: until, Member: h.member})
	}
	for _, d := range b.order {
		if zs := byDest[d]; len(zs) > 0 {
			pipe.ZAdd(ctx, b.key(d, "l"), zs...)
			pipe.PExpire(ctx, b.key(d, "l"), 2*b.cfg.Lease)
		}
	}
	stale := b.stale
	for _, h := range stale {
		pipe.ZRem(ctx, b.key(h.dest, "l"), h.member)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisbook: renew: %w", err)
	}
	b.stale = b.stale[len(stale):]
	for l := range b.held {
		b.shared[l] = struct{}{}
	}
	return nil
}

// fall enters fallback after err, logging it once, and starts probing.
func (b *Book) fall(err error) {
	if b.ctx.Err() != nil {
		return // closing: the error is ours
	}
	if b.mode != cluster.Fallback {
		b.log.Warn("cluster: redis unreachable; falling back to local windows", "store", b.cfg.Redacted(),
			"node", b.cfg.Node, "nodes", b.nodes, "error", err)
		b.mode = cluster.Fallback
		for _, ds := range b.dests {
			ds.fb = nil
		}
		b.mu.Lock()
		b.status.Mode, b.status.Since, b.status.Err = cluster.Fallback, b.clock(), err.Error()
		b.status.Fallbacks++
		b.mu.Unlock()
	}
	if !b.probing {
		b.probing = true
		b.wg.Add(1)
		go b.probe()
	}
}

// probe pings the store with growing, jittered pauses until it answers,
// then tells the worker.
func (b *Book) probe() {
	defer b.wg.Done()
	wait := minBackoff
	for {
		t := time.NewTimer(wait/2 + time.Duration(b.jitter(int64(wait))))
		select {
		case <-b.done:
			t.Stop()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, dialTimeout+ioTimeout)
		err := b.rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			select {
			case b.up <- struct{}{}:
			case <-b.done:
			}
			return
		}
		wait = min(2*wait, maxBackoff)
	}
}

// jitter draws from the book's own source under the lock: the prober runs
// on its own goroutine.
func (b *Book) jitter(n int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rng.Int63n(n)
}

// reconcile brings the node (back) into the shared store: seeds what the
// store lost, registers the node's sessions, drops stale leases, and
// answers from the store again. On failure the node stays in fallback.
func (b *Book) reconcile() {
	b.adopt()
	now := b.clock()
	if err := b.load(); err != nil {
		b.fall(err)
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 2*ioTimeout)
	pipe := b.rdb.Pipeline()
	for _, d := range b.order {
		ds := b.dests[d]
		if !ds.known {
			continue
		}
		st := ds.last
		w := st.Window
		cat, dead := int64(0), int64(0)
		if !w.CeilingAt.IsZero() {
			cat = w.CeilingAt.UnixMilli()
		}
		if !st.DeadUntil.IsZero() {
			dead = st.DeadUntil.UnixMilli()
		}
		seed.EvalSha(ctx, pipe, []string{b.key(d, "w")}, now.UnixMilli(), w.Concurrency, fmtFloat(w.Success),
			fmtFloat(w.Failure), fmtFloat(w.FailCohorts), w.Ceiling, w.Strikes, cat, dead, flag(w.Starting))
	}
	_, err := pipe.Exec(ctx)
	cancel()
	if err == nil {
		err = b.register(now)
	}
	if err != nil {
		b.fall(err)
		return
	}
	was := b.mode
	b.mode = cluster.Shared
	b.mu.Lock()
	b.status.Mode, b.status.Since, b.status.Err = cluster.Shared, now, ""
	if was == cluster.Fallback {
		b.status.Reconnects++
	}
	b.mu.Unlock()
	if was == cluster.Fallback {
		b.log.Info("cluster: redis reachable again; windows shared", "store", b.cfg.Redacted(), "node", b.cfg.Node,
			"sessions", len(b.held))
	}
	// Whoever the fallback denied asks the shared window now.
	for _, d := range b.order {
		ds := b.dests[d]
		ds.fb = nil
		if ds.waiting {
			ds.waiting = false
			b.emit(window.Event{Kind: window.Free, Dest: d, State: b.view(ds, ds.last)})
		}
	}
}

// local answers one request from the fallback windows.
func (b *Book) local(r queued) {
	req, now := r.req, r.now
	switch req.Op {
	case window.Acquire:
		ds := b.dest(req.Dest, now)
		f := b.fallback(ds, req.Params)
		ok, why, revived := f.Admit(ds.busy, now)
		if !ok {
			ds.waiting = true
			var retry time.Time
			if why == window.Dead {
				retry = f.DeadUntil
			}
			b.emit(window.Event{Kind: window.Denied, Dest: req.Dest, Reason: why, Retry: retry, Revived: revived,
				State: b.fallbackState(ds, now)})
			return
		}
		b.seq++
		l := b.seq
		b.held[l] = lease{dest: req.Dest, member: b.memberOf(l)}
		ds.busy++
		b.setLeases()
		b.emit(window.Event{Kind: window.Granted, Dest: req.Dest, Lease: l, Revived: revived,
			State: b.fallbackState(ds, now)})
	case window.Release:
		h, ok := b.held[req.Lease]
		if !ok {
			return
		}
		delete(b.held, req.Lease)
		if _, ok := b.shared[req.Lease]; ok {
			// The store still counts it: drop it when back.
			delete(b.shared, req.Lease)
			b.stale = append(b.stale, h)
		}
		ds := b.dests[h.dest]
		ds.busy--
		b.setLeases()
		b.freeLocal(h.dest, ds, now, false)
	case window.Report:
		ds := b.dest(req.Dest, now)
		f := b.fallback(ds, req.Params)
		// The fallback window is this node's alone.
		from, died := f.Judge(req.Failed, req.DeadUntil, ds.busy, 1, now)
		b.emit(window.Event{Kind: window.Changed, Dest: req.Dest, From: from, Failed: req.Failed, Died: died,
			Revived: from == 0 && !f.Window.Dead(), State: b.fallbackState(ds, now)})
		b.freeLocal(req.Dest, ds, now, died)
	}
}

// freeLocal tells the core, denied by d's fallback window, that its
// answer may have changed.
func (b *Book) freeLocal(d window.Dest, ds *dest, now time.Time, died bool) {
	f := ds.fb
	if f == nil || !ds.waiting || !died && (f.Window.Dead() || ds.busy >= f.Window.Limit()) {
		return
	}
	ds.waiting = false
	b.emit(window.Event{Kind: window.Free, Dest: d, State: b.fallbackState(ds, now)})
}

func (b *Book) fallbackState(ds *dest, now time.Time) window.State {
	st := ds.fb.State(now, ds.busy, ds.busy, b.nodes)
	st.Fallback = true
	return st
}

// fallback returns a destination's fallback window, made on first use
// from the last shared state seen (answered by the store, else restored
// from the state file). Its limit is the node's share of the shared
// window: the last window divided by the live nodes last seen, at least 1
// (the initial window shared alike when the node never saw one).
func (b *Book) fallback(ds *dest, p window.Params) *window.Record {
	p = p.Normal()
	shared := min(p.Initial, p.Max)
	if ds.known && ds.last.Limit() > 0 {
		shared = ds.last.Limit()
	}
	p.Max = max(1, min(p.Max, shared/max(b.nodes, 1)))
	if ds.fb == nil {
		rec := window.NewRecord(p)
		if ds.known {
			rec.Window.Restore(ds.last.Window)
			rec.DeadUntil = ds.last.DeadUntil
		}
		ds.fb = &rec
	}
	p.Apply(&ds.fb.Window)
	return ds.fb
}

// leave removes the node's leases and liveness from the store, if it can
// be reached, as the book closes.
func (b *Book) leave() {
	if b.mode != cluster.Shared {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	pipe := b.rdb.Pipeline()
	for _, h := range b.held {
		pipe.ZRem(ctx, b.key(h.dest, "l"), h.member)
	}
	pipe.ZRem(ctx, b.nodesKey(), b.cfg.Node)
	pipe.ZRem(ctx, b.slowNodesKey(), b.cfg.Node)
	if _, err := pipe.Exec(ctx); err != nil {
		b.log.Warn("cluster: could not leave; leases expire by themselves", "error", err)
	}
}

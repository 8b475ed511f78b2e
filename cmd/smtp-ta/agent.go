package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/ctlfile"
	"zsched/report"
	"zsched/smtpclient"
	"zsched/ta"
)

// agent delivers jobs over SMTP. It keeps one session open between jobs
// (ZMailer's smtp does too): a job for the same destination reuses it, and
// so does a job for another destination routed to the same server (the
// same literal next hop: a route, -F, an address literal), as Postfix's
// connection cache finds a session by server address; a job for another
// server closes it first. While the agent is idle a NOOP every noop
// interval keeps it alive or finds it dead.
type agent struct {
	dir      string // job paths are relative to it ("" = working directory)
	port     int
	forced   *smtpclient.Nexthop // -F: every destination goes here
	noMX     bool                // -x: A/AAAA of the destination, no MX lookup
	routes   *smtpclient.Routes
	tls      smtpclient.TLSPolicy
	maxRcpt  int
	noop     time.Duration
	resolver smtpclient.Resolver
	opts     smtpclient.Options
	log      hclog.Logger

	mu    sync.Mutex // held by a job and by the NOOP timer
	sess  *session
	timer *time.Timer // the idle session's NOOP, reset after each job
	due   time.Time   // when the NOOP is due; a timer that fires early does nothing
	msg   message     // the job's message, its buffers kept across jobs
}

// session is an open SMTP session and the destination it serves.
type session struct {
	dest   string // the job host it was opened for
	hop    smtpclient.Nexthop
	policy smtpclient.TLSPolicy
	conn   *smtpclient.Conn
	peer   peer
	reuse  bool // it served an earlier job: the server may have dropped it since
}

// deliver is the ta delivery function: every locked recipient of the job
// gets a result. A transaction's results are reported as soon as it ends
// when another transaction of the job follows; those of the job's last are
// returned, and ta writes them with its next #hungry, in one write with the
// reports of other quick jobs.
func (a *agent) deliver(d *ta.Delivery) []ta.Result {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
	}
	defer a.armNoop()

	var out []ta.Result
	emit := func(rs ...ta.Result) { out = append(out, rs...) }
	// settled sends what is settled before the job goes on to another
	// transaction, so the scheduler does not wait on it.
	settled := func() {
		for _, r := range out {
			if err := d.Report(r); err != nil {
				a.log.Error("report to the scheduler", "error", err)
			}
		}
		out = out[:0]
	}
	msg := &a.msg
	defer msg.release()
	if err := msg.read(a.dir, d); err != nil {
		a.log.Warn("cannot read the message", "job", d.Path, "error", err)
		for _, g := range groups(d) {
			for _, rc := range g.rcpts {
				emit(transient(rc, err.Error()))
			}
		}
		return out
	}
	var siteDown map[string]ta.Result // destination → the failure that ends it for this job
	for _, g := range groups(d) {
		if r, down := siteDown[g.dest]; down {
			for _, rc := range g.rcpts {
				r.Rcpt, r.Notary.Recipient = rc.idx, rc.addr
				emit(r)
			}
			continue
		}
		settled()
		if fail, ok := a.transactions(d, msg, g, emit, settled); !ok {
			if siteDown == nil {
				siteDown = map[string]ta.Result{}
			}
			siteDown[g.dest] = fail
		}
	}
	return out
}

// group is the recipients of one job that share a transaction's envelope
// and message: same destination, sender and header block.
type group struct {
	dest   string // the job's host (or the recipient's own, for a job without one)
	from   string
	header int64
	rcpts  []rcpt
}

func groups(d *ta.Delivery) []*group {
	var out []*group
	for _, i := range d.Rcpts {
		rc := d.Rcpt(i)
		dest := d.Host
		if dest == "" {
			dest = rc.Host
		}
		dest = strings.ToLower(dest)
		from := senderOf(d.File, rc)
		var g *group
		for _, x := range out {
			if x.dest == dest && x.from == from && x.header == rc.HeaderOffset {
				g = x
				break
			}
		}
		if g == nil {
			g = &group{dest: dest, from: from, header: rc.HeaderOffset}
			out = append(out, g)
		}
		g.rcpts = append(g.rcpts, rcpt{idx: i, addr: bare(rc.User), notifySuccess: rc.Notify&ctlfile.NotifySuccess != 0})
	}
	return out
}

// transactions sends group g in transactions of at most maxRcpt
// recipients. It returns false, with a template result, when the
// destination failed as a site (every later recipient of the job for it
// is deferred the same way without another attempt).
func (a *agent) transactions(d *ta.Delivery, msg *message, g *group, emit func(...ta.Result), settled func()) (ta.Result, bool) {
	header, err := msg.header(g.header)
	if err != nil {
		for _, rc := range g.rcpts {
			emit(transient(rc, "control file: "+err.Error()))
		}
		return ta.Result{}, true
	}
	env := smtpclient.Envelope{
		From:     g.from,
		Size:     msg.size(header),
		EightBit: msg.eightBit(header),
		RET:      d.File.RET,
		ENVID:    d.File.ENVID,
	}
	addrs := []string{g.from}
	for _, rc := range g.rcpts {
		addrs = append(addrs, rc.addr)
	}
	env.UTF8 = needsUTF8(addrs...)

	pending := g.rcpts
	retried := false
	for len(pending) > 0 {
		settled()
		chunk := pending[:min(len(pending), a.maxRcpt)]
		s, fail := a.session(g.dest, chunk)
		if s == nil {
			emit(fail...)
			for _, rc := range pending[len(chunk):] {
				r := fail[0]
				r.Rcpt, r.Notary.Recipient = rc.idx, rc.addr
				emit(r)
			}
			return fail[0], false
		}
		if rs, ok := a.refuse(s, env, chunk); !ok {
			emit(rs...)
			pending = pending[len(chunk):]
			continue
		}
		e := env
		e.Rcpts = make([]smtpclient.Rcpt, len(chunk))
		for i, rc := range chunk {
			r := d.Rcpt(rc.idx)
			e.Rcpts[i] = smtpclient.Rcpt{Addr: rc.addr}
			if s.peer.dsn && r.NOffset >= 0 {
				// Only what the N line gave: no NOTIFY invented for a
				// recipient without one (ZMailer sends NOTIFY=FAILURE).
				if r.Notify != 0 {
					e.Rcpts[i].Notify = r.Notify.String()
				}
				e.Rcpts[i].ORCPT = r.ORCPT
			}
		}
		tx, err := s.conn.Send(e, msg.reader(header))
		if errors.Is(err, smtpclient.ErrCommand) {
			for _, rc := range chunk {
				emit(permanent(rc, "5.1.3 (bad destination mailbox address syntax)", err.Error(), s.peer))
			}
			pending = pending[len(chunk):]
			continue
		}
		if err != nil && s.reuse && !retried && tx.Mail.IsZero() && noReply(err) {
			// A cached session the server dropped while we were idle:
			// open a fresh one and try again, once.
			a.log.Debug("cached session is gone; reconnecting", "dest", g.dest, "error", err)
			a.drop()
			retried = true
			continue
		}
		s.reuse = true
		res, again := outcomes(tx, err, chunk, s.peer)
		if a.log.IsInfo() {
			a.log.Info("transaction", "job", d.Path, "dest", g.dest, "server", s.conn.Target().String(),
				"rcpts", len(chunk), "accepted", tx.Accepted(), "final", tx.Final.String(), "error", errString(err))
		}
		emit(res...)
		pending = append(again, pending[len(chunk):]...)
		if err != nil {
			a.drop()
			var fail ta.Result
			for _, r := range res {
				if r.Status.Class() == report.SiteFailed {
					fail = r
				}
			}
			if fail.Status != 0 && len(pending) > 0 {
				for _, rc := range pending {
					r := fail
					r.Rcpt, r.Notary.Recipient = rc.idx, rc.addr
					emit(r)
				}
				return fail, false
			}
			if fail.Status != 0 {
				return fail, false
			}
		}
	}
	return ta.Result{}, true
}

// refuse settles chunk without sending when the server cannot take the
// message: bigger than its SIZE limit, or internationalised addresses
// without SMTPUTF8. ok is true when the transaction may go ahead.
func (a *agent) refuse(s *session, env smtpclient.Envelope, chunk []rcpt) (res []ta.Result, ok bool) {
	status, text := "", ""
	if lim := s.conn.SizeLimit(); lim > 0 && env.Size > lim {
		status = "5.3.4 (message size exceeds fixed maximum message size)"
		text = "message of " + strconv.FormatInt(env.Size, 10) + " bytes exceeds the server's SIZE limit of " + strconv.FormatInt(lim, 10)
	} else if _, utf := s.conn.Extension("SMTPUTF8"); env.UTF8 && !utf {
		status = "5.6.7 (non-ASCII addresses not permitted for that recipient)"
		text = "an address needs SMTPUTF8, which the server does not offer"
	}
	if status == "" {
		return nil, true
	}
	for _, rc := range chunk {
		res = append(res, permanent(rc, status, text, s.peer))
	}
	return res, false
}

// session returns an open session for dest: the cached one if it is alive
// and serves dest or dest's next hop, else a new one (closing the old).
// When no server of dest can be reached it returns nil and a result for
// each of rcpts: deferall, or error2 for a domain that takes no mail (null
// MX).
func (a *agent) session(dest string, rcpts []rcpt) (*session, []ta.Result) {
	nh, policy, err := a.nexthop(dest)
	if s := a.sess; s != nil {
		// The same destination, or the same fixed server: a literal next
		// hop needs no lookup to be compared, and TLS was set up under
		// the same policy for the same name.
		fits := s.dest == dest || (err == nil && !nh.MX && nh == s.hop && policy == s.policy)
		if !fits || s.conn.Stale() {
			a.drop()
		}
	}
	if a.sess != nil {
		a.sess.dest = dest
		return a.sess, nil
	}
	var targets []smtpclient.Target
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		targets, err = smtpclient.Lookup(ctx, a.resolver, nh)
		cancel()
	}
	if err != nil {
		a.log.Warn("destination lookup failed", "dest", dest, "error", err)
		res := make([]ta.Result, len(rcpts))
		for i, rc := range rcpts {
			if errors.Is(err, smtpclient.ErrNullMX) {
				res[i] = permanent(rc, "5.1.10 (recipient address has null MX)", describe(err), peer{})
			} else {
				res[i] = siteFailure(rc, smtpclient.Reply{}, err, describe(err), peer{})
			}
		}
		return nil, res
	}
	opts := a.opts
	opts.TLS = policy
	var errs []string
	var last error
	for _, t := range targets {
		conn, err := smtpclient.Dial(context.Background(), t, opts)
		if err == nil {
			a.sess = &session{dest: dest, hop: nh, policy: policy, conn: conn, peer: peerOf(conn)}
			a.log.Debug("connected", "dest", dest, "server", t.String(), "tls", conn.TLS())
			return a.sess, nil
		}
		a.log.Info("connection failed", "dest", dest, "server", t.String(), "error", err)
		errs = append(errs, describe(err))
		last = err
	}
	// Every server failed: a site failure for all (ZMailer's smtp gave
	// deferall to the first recipient only and failed others, O18).
	var reply smtpclient.Reply
	var e *smtpclient.Error
	p := peer{}
	if errors.As(last, &e) {
		reply = e.Reply
		p.remoteMTA = remoteMTA(e.Target, nil)
	}
	text := strings.Join(errs, "; ")
	res := make([]ta.Result, len(rcpts))
	for i, rc := range rcpts {
		res[i] = siteFailure(rc, reply, last, text, p)
	}
	return nil, res
}

// nexthop is where mail for dest goes, and with which TLS policy: -F
// wins, then the route map, then the destination itself.
func (a *agent) nexthop(dest string) (smtpclient.Nexthop, smtpclient.TLSPolicy, error) {
	policy := a.tls
	r, routed := a.routes.Lookup(dest)
	if routed && r.HasTLS {
		policy = r.TLS
	}
	switch {
	case a.forced != nil:
		return *a.forced, policy, nil
	case routed && r.Nexthop.Host != "":
		return r.Nexthop, policy, nil
	}
	nh, err := smtpclient.ParseNexthop(dest, a.port)
	if err != nil {
		return nh, policy, err
	}
	if a.noMX {
		nh.MX = false
	}
	return nh, policy, nil
}

// drop closes the cached session with QUIT.
func (a *agent) drop() {
	if a.sess == nil {
		return
	}
	if err := a.sess.conn.Quit(); err != nil {
		a.log.Debug("QUIT", "dest", a.sess.dest, "error", err)
	}
	a.sess = nil
}

// armNoop schedules the idle NOOP for the session left open by a job.
// One timer serves the agent's life: a job stops it and resets it.
func (a *agent) armNoop() {
	if a.sess == nil || a.noop <= 0 {
		return
	}
	a.due = time.Now().Add(a.noop)
	if a.timer == nil {
		a.timer = time.AfterFunc(a.noop, a.keepalive)
		return
	}
	a.timer.Reset(a.noop)
}

// keepalive sends NOOP on the idle session, and again every noop
// interval while no job comes; a failed NOOP closes it, so the next job
// connects afresh. A firing that a job overtook (it waited for the job to
// end, which moved the NOOP on) does nothing.
func (a *agent) keepalive() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sess == nil || a.noop <= 0 || time.Now().Before(a.due) {
		return
	}
	if err := a.sess.conn.Noop(); err != nil {
		a.log.Info("idle session lost", "dest", a.sess.dest, "error", err)
		a.sess.conn.Close()
		a.sess = nil
		return
	}
	a.log.Debug("NOOP ok on the idle session", "dest", a.sess.dest)
	a.armNoop()
}

// close ends the agent's session, when the scheduler ends the agent.
func (a *agent) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
	}
	a.drop()
}

// noReply reports whether err is a network failure without an SMTP reply.
func noReply(err error) bool {
	var e *smtpclient.Error
	return errors.As(err, &e) && e.Reply.IsZero()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

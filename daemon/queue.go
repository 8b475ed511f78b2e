package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"zsched/config"
	"zsched/control"
	"zsched/core"
	"zsched/ctlfile"
	"zsched/dsn"
	"zsched/mailq"
)

// The whole spool in view (issue 17): operator commands that work on any
// message of the spool, in core or waiting on disk beyond the active
// limits, by its queue id; the spool-wide listing (SHOW QUEUE MESSAGES,
// `scheduler queue`); bulk kill, hold, release and flush; and postcat
// (SHOW MSG, `scheduler cat`).
//
// A message is named by its queue id (ctlfile.File.QueueID: its control
// file's name and the file's generation, "5308609.3kq7m2c"), which never
// repeats; the bare name ("5308609", "A/5308609") is accepted while it is
// unambiguous. A queue id whose name now leads to another file — the
// message completed and its inode number went to a new one — is refused:
// a `kill` copied from an old log line cannot remove someone else's mail.
//
// Whatever reads files runs off the loop, on the session's goroutine (a
// streamed reply, control.Stream): the walk over the spool reads a batch
// of control files (ctlfile.Peek: read-only), then asks the loop, in one
// call per batch (inLoop), for what the core knows of them and carries out
// what the command does. Memory follows the batch, not the spool; the
// loop's share of a listing of N messages is N/walkBatch short calls, so
// deliveries go on during it.

// walkBatch is how many control files one step of a walk reads before it
// asks the loop about them.
const walkBatch = 256

// loopWait bounds how long a walk waits for the loop to take one call.
const loopWait = 30 * time.Second

// errLoop is returned when the loop did not take a call in time.
var errLoop = errors.New("daemon: the scheduler's loop did not answer (stopping, or stuck)")

// qid returns the queue id of the message in core at rel, or rel.
func (d *Daemon) qid(rel string) string {
	if inum, ok := inumOf(rel); ok {
		if ids, ok := d.in.ids[inum]; ok && ids.qid != "" {
			return ids.qid
		}
	}
	return rel
}

// msgID is an operator's id, parsed: the path or name it gives, and the
// generation when it is a queue id.
type msgID struct {
	raw  string
	dir  string // "A/" or "A/B/" when given, else ""
	name string // the control file's name
	qid  bool   // a queue id: name.gen
}

func parseID(id string) (msgID, error) {
	m := msgID{raw: strings.TrimSpace(id)}
	base := m.raw
	if i := strings.LastIndexByte(base, '/'); i >= 0 {
		m.dir, base = base[:i+1], base[i+1:]
	}
	name, _, isQID := strings.Cut(base, ".")
	m.name, m.qid = name, isQID
	if !ctlfile.IsControlPath(m.dir+name) || strings.HasSuffix(name, "-etrn") {
		return m, fmt.Errorf("daemon: %q is not a queue id or a control file's name", id)
	}
	if isQID {
		m.raw = m.dir + base
	}
	return m, nil
}

// queueID is m's queue id without its directory.
func (m msgID) queueID() string { return m.raw[len(m.dir):] }

// onDisk is a message read from the spool for an operator.
type onDisk struct {
	rel  string
	f    *ctlfile.File
	data []byte
	qid  string
}

// findOnDisk resolves id against the spool's files (off the loop): the
// file its name leads to, checked against the queue id when one is given.
func (d *Daemon) findOnDisk(id string) (onDisk, error) {
	m, err := parseID(id)
	if err != nil {
		return onDisk{}, err
	}
	var rels []string
	if m.dir != "" {
		rels = []string{m.dir + m.name}
	} else {
		inum, _ := inumOf(m.name)
		for levels := range 3 {
			rels = append(rels, ctlfile.HashPath(m.name, inum, levels))
		}
	}
	var found []onDisk
	for _, rel := range rels {
		f, data, err := d.spool.Peek(rel)
		if errors.Is(err, ctlfile.ErrNotFound) {
			continue
		}
		if err != nil {
			return onDisk{}, fmt.Errorf("daemon: %s: %w", rel, err)
		}
		found = append(found, onDisk{rel: rel, f: f, data: data, qid: f.QueueID()})
	}
	switch {
	case len(found) == 0:
		return onDisk{}, fmt.Errorf("%w: %s is not in the spool", core.ErrNoMessage, id)
	case m.qid:
		for _, o := range found {
			if o.qid == m.queueID() {
				return o, nil
			}
		}
		return onDisk{}, fmt.Errorf("%w: %s is gone; %s now names %s", core.ErrChanged, id, found[0].rel, found[0].qid)
	case len(found) > 1:
		var ids []string
		for _, o := range found {
			ids = append(ids, o.rel+" ("+o.qid+")")
		}
		return onDisk{}, fmt.Errorf("daemon: %s is ambiguous: %s; give the queue id", id, strings.Join(ids, ", "))
	}
	return found[0], nil
}

// opVerb is a bulk operation.
type opVerb uint8

const (
	opKill opVerb = iota
	opHold
	opRelease
	opFlush
)

var opNames = [...]string{"kill", "hold", "release", "flush"}
var opDone = [...]string{"killed", "held", "released", "flushed"}
var opLog = [...]string{"kill request", "hold", "release", "flush"}

// target is a message an operation acts on: in core (inCore) or on disk.
type target struct {
	rel, qid string
	inum     int64
	control  ctlfile.FileID // on disk: the file as read
	files    ctlfile.Files
}

// act carries out v on t, on the loop; dry only says what it would do.
// It returns the line to print, or an error for this message.
func (d *Daemon) act(now time.Time, v opVerb, t target, dry bool, who []any) (string, error) {
	lk, err := d.core.Find(t.qid)
	if err != nil {
		return "", err
	}
	inCore := lk.InCore
	if !inCore {
		if inum, ok := inumOf(t.rel); ok && d.core.Has(inum) {
			// Admitted meanwhile, as another file.
			return "", fmt.Errorf("%w: %s is gone; %s now names %s", core.ErrChanged, t.qid, t.rel, d.qid(t.rel))
		}
	}
	where := "on disk"
	if inCore {
		where = "in core"
	}
	switch v {
	case opHold:
		if _, ok := d.holds.msgs[t.qid]; ok {
			return "", nil // held already: not touched
		}
	case opRelease:
		if _, ok := d.holds.msgs[t.qid]; !ok {
			if mv, ok := d.core.MessageOf(now, lk.Inum); !inCore || !ok || !mv.Held {
				return "", nil
			}
		}
	}
	line := fmt.Sprintf("%s\t%s\t%s", t.qid, opDone[v], where)
	if dry {
		return fmt.Sprintf("%s\twould be %s\t%s", t.qid, opDone[v], where), nil
	}
	// One line per message, with who asked (the words of issue 18's
	// operator lines: "kill request", "hold", "release", "flush"), before
	// what the request does: a kill in core logs "killed" at once.
	d.log.Info(opLog[v], append([]any{"msg", t.qid, "in_core", inCore}, who...)...)
	switch v {
	case opKill:
		if inCore {
			if err := d.core.Kill(now, lk.QID); err != nil {
				return "", err
			}
			d.apply() // its files go now: the answer says it is gone
		} else {
			// Off the loop, the walk removes the files (removeKilled);
			// meanwhile no read may take the message into core.
			d.in.gone[t.rel] = t.control
			d.in.removing[t.rel] = false
		}
		d.retry.forget('X', t.qid)
		d.holdEnded(t.qid)
	case opHold:
		// Saved once for the batch (commitHolds), before the answer.
		d.holds.msgs[t.qid] = now
		d.holds.dirty = true
		if inCore {
			d.core.HoldMessage(now, lk.QID)
		}
	case opRelease:
		if _, ok := d.holds.msgs[t.qid]; ok {
			delete(d.holds.msgs, t.qid)
			d.holds.dirty = true
		}
		if inCore {
			d.core.ReleaseMessage(now, lk.QID)
		}
	case opFlush:
		d.retry.forget('F', t.qid)
		if inCore {
			d.core.FlushMessage(now, lk.Inum)
		}
	}
	return line, nil
}

// removeKilled removes the files of a message killed while on disk (off
// the loop), then lets the scan see the name again.
func (d *Daemon) removeKilled(t target) error {
	err := d.spool.Remove(t.files)
	// A new message announced under the name meanwhile is read now.
	d.inLoop(func() { d.removed([]string{t.rel}) }, loopWait)
	return err
}

// selection is what a listing or a bulk operation picks.
type selection struct {
	all      bool
	dest     *core.DestMatcher
	from     *config.Pattern // a glob on the sender, lowercase; nil none
	held     bool
	deferred bool
	ids      []string
}

// parseSelection reads the words after a verb: dry, all, json, held,
// deferred, dest=GLOB, from=ADDR, and ids.
func parseSelection(args []string) (sel selection, dry, jsonOut bool, err error) {
	for _, a := range args {
		switch {
		case strings.EqualFold(a, "dry"):
			dry = true
		case strings.EqualFold(a, "all"):
			sel.all = true
		case strings.EqualFold(a, "json"):
			jsonOut = true
		case strings.EqualFold(a, "held"):
			sel.held = true
		case strings.EqualFold(a, "deferred"):
			sel.deferred = true
		case strings.HasPrefix(strings.ToLower(a), "dest="):
			p, err := core.ParseDest(a[len("dest="):])
			if err != nil {
				return sel, false, false, err
			}
			m, err := p.Compile()
			if err != nil {
				return sel, false, false, err
			}
			sel.dest = &m
		case strings.HasPrefix(strings.ToLower(a), "from="):
			g, err := config.CompileGlob(strings.ToLower(a[len("from="):]))
			if err != nil {
				return sel, false, false, fmt.Errorf("daemon: from=%s: %w", a[len("from="):], err)
			}
			sel.from = g
		default:
			sel.ids = append(sel.ids, a)
		}
	}
	return sel, dry, jsonOut, nil
}

// walks reports whether sel needs a walk over the spool.
func (s selection) walks() bool {
	return s.all || s.dest != nil || s.from != nil || s.held || s.deferred
}

// sender is a message's envelope sender, "" for <>.
func sender(f *ctlfile.File) string {
	if len(f.Senders) == 0 {
		return ""
	}
	return f.Senders[0].User
}

// describe builds the listing's entry for a message read from disk, with
// what the core knows of it; on the loop.
func (d *Daemon) describe(now time.Time, o onDisk) mailq.Message {
	q := mailq.Message{ID: o.qid, Path: o.rel, Arrival: o.f.Arrival.UTC(), Size: int64(len(o.data)), Sender: sender(o.f),
		Recipients: []mailq.Rcpt{}}
	if inum, ok := inumOf(o.rel); ok {
		if mv, ok := d.core.MessageOf(now, inum); ok && d.qid(o.rel) == o.qid {
			q.InCore, q.Held = true, mv.Held
			byOff := make(map[int64]core.VertexView)
			for _, v := range mv.Vertices {
				for _, r := range v.Rcpts {
					byOff[r.Offset] = v
				}
			}
			for _, r := range o.f.Rcpts {
				v, ok := byOff[r.Offset]
				if !ok {
					continue
				}
				q.Recipients = append(q.Recipients, d.rcptInCore(now, r, v))
			}
			return q
		}
	}
	q.Held = d.msgHeld(o.qid)
	var rs map[int64]retryRec
	if d.retry != nil {
		rs = d.retry.replay[o.qid]
	}
	for _, r := range o.f.Rcpts {
		if r.Status != ctlfile.Pending && r.Status != ctlfile.Locked {
			continue
		}
		qr := mailq.Rcpt{Offset: r.Offset, Address: r.User, Channel: r.Channel, Host: r.Host, State: mailq.StatePending,
			Reason: "on disk: not read into core yet (active limits)"}
		rec, kept := rs[r.Offset]
		if kept {
			qr.Attempts = rec.attempts
		}
		ci, routed := d.cfg.Match(r.Channel, strings.ToLower(r.Host))
		switch {
		case r.Status == ctlfile.Locked:
			qr.State, qr.Reason = mailq.StateInFlight, "locked by pid "+strconv.Itoa(r.PID)
		case q.Held:
			qr.State, qr.Reason = mailq.StateHeld, "held by the operator (message)"
		case d.core.DestHeld(r.Channel, r.Host):
			qr.State, qr.Reason = mailq.StateHeld, "held by the operator (destination)"
		case !routed:
			qr.State, qr.Reason = mailq.StateUnrouted, "no clause selects its channel/host"
		case d.cfg.Clauses[ci].QueueOnly:
			qr.State, qr.Reason = mailq.StateETRN, "queueonly destination: waiting for ETRN"
		case kept && rec.due(now).After(now):
			u := rec.due(now).UTC()
			qr.State, qr.Until, qr.Reason = mailq.StateDeferred, &u, "deferred: its own retry time"
		}
		q.Recipients = append(q.Recipients, qr)
	}
	return q
}

// rcptInCore is a recipient's entry from its vertex in core.
func (d *Daemon) rcptInCore(now time.Time, r ctlfile.Rcpt, v core.VertexView) mailq.Rcpt {
	qr := mailq.Rcpt{Offset: r.Offset, Address: r.User, Channel: v.Channel, Host: v.Host, Attempts: v.Attempts,
		Reason: v.Why.String(), Last: v.LastText}
	switch v.Why.Reason {
	case core.ReasonRunning:
		qr.State = mailq.StateInFlight
		if pid := d.pid(v.Why.Agent); pid > 0 {
			qr.Reason = "being delivered by pid " + strconv.Itoa(pid) + v.Why.Borrowing()
		}
	case core.ReasonRetry, core.ReasonBackoff, core.ReasonDead:
		qr.State = mailq.StateDeferred
		u := v.Why.Until.UTC()
		qr.Until = &u
	case core.ReasonHeldMessage, core.ReasonHeldThread:
		qr.State = mailq.StateHeld
	case core.ReasonQueueOnly:
		qr.State = mailq.StateETRN
	case core.ReasonUnrouted:
		qr.State = mailq.StateUnrouted
	default:
		qr.State = mailq.StatePending
	}
	return qr
}

// matches applies sel's filters to an entry.
func (s selection) matches(q *mailq.Message) bool {
	if s.from != nil {
		from := strings.ToLower(q.Sender)
		if from == "" {
			from = "<>"
		}
		if !s.from.Match(from) {
			return false
		}
	}
	if s.dest != nil {
		any := false
		for _, r := range q.Recipients {
			any = any || s.dest.Match(r.Channel, r.Host)
		}
		if !any {
			return false
		}
	}
	if s.held || s.deferred {
		any := false
		for _, r := range q.Recipients {
			any = any || s.held && r.State == mailq.StateHeld || s.deferred && r.State == mailq.StateDeferred
		}
		any = any || s.held && q.Held
		if !any {
			return false
		}
	}
	return len(q.Recipients) > 0 || q.Held
}

// walk reads the whole spool in batches and hands each batch, with the
// listing's entries made on the loop, to fn (off the loop). Files that
// vanished meanwhile are skipped; files that cannot be read are given to
// bad.
func (d *Daemon) walk(fn func(batch []onDisk, entries []mailq.Message) error, bad func(rel string, err error)) error {
	sc := d.spool.NewScanner()
	defer sc.Close()
	names := make([]string, 0, walkBatch)
	for {
		var done bool
		var err error
		names, done, err = sc.Next(names[:0], walkBatch)
		if err != nil {
			return err
		}
		batch := make([]onDisk, 0, len(names))
		for _, rel := range names {
			f, data, err := d.spool.Peek(rel)
			switch {
			case errors.Is(err, ctlfile.ErrNotFound):
				continue
			case err != nil:
				bad(rel, err)
				continue
			case len(f.ETRNs) > 0 && f.ID == "":
				continue // an ETRN request, not mail
			}
			batch = append(batch, onDisk{rel: rel, f: f, data: data, qid: f.QueueID()})
		}
		if len(batch) > 0 {
			entries := make([]mailq.Message, len(batch))
			if !d.inLoop(func() {
				now := d.now()
				for i, o := range batch {
					entries[i] = d.describe(now, o)
				}
			}, loopWait) {
				return errLoop
			}
			if err := fn(batch, entries); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}

// listQueue is SHOW QUEUE MESSAGES: one entry per message, text or one
// JSON document with a top-level "messages" array, streamed.
func (d *Daemon) listQueue(args []string) control.Reply {
	sel, _, jsonOut, err := parseSelection(args)
	if err != nil {
		return control.Fail(err.Error())
	}
	if len(sel.ids) > 0 {
		return control.Fail("SHOW QUEUE MESSAGES: unknown words " + strings.Join(sel.ids, " "))
	}
	return control.Stream(func(emit func(string) bool) error {
		var msgs, rcpts, inCore int
		first := true
		if jsonOut {
			emit(`{"time":` + jsonString(d.now().UTC().Format(time.RFC3339Nano)) + `,"messages":[`)
		}
		var unreadable []string
		err := d.walk(func(batch []onDisk, entries []mailq.Message) error {
			for i := range entries {
				q := &entries[i]
				if !sel.matches(q) {
					continue
				}
				msgs++
				rcpts += len(q.Recipients)
				if q.InCore {
					inCore++
				}
				var ok bool
				if jsonOut {
					b, _ := json.Marshal(q)
					sep := ","
					if first {
						sep = ""
					}
					first = false
					ok = emit(sep + string(b))
				} else {
					ok = emit(mailq.Entry(q))
				}
				if !ok {
					return errors.New("daemon: client gone")
				}
			}
			return nil
		}, func(rel string, err error) {
			unreadable = append(unreadable, rel)
			if !jsonOut {
				emit(fmt.Sprintf("%s\tunreadable: %v", rel, err))
			}
		})
		if jsonOut {
			un, _ := json.Marshal(unreadable)
			emit(fmt.Sprintf(`],"total":{"messages":%d,"recipients":%d,"in_core":%d},"unreadable":%s}`, msgs, rcpts, inCore, un))
		} else {
			emit(mailq.Total(msgs, rcpts, inCore))
		}
		return err
	})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// bulk is KILL/HOLD/RELEASE/FLUSH MSGS: the messages named or selected,
// one line each, then a count line. Nothing matched is an error.
func (d *Daemon) bulk(v opVerb, args []string, who []any) control.Reply {
	sel, dry, _, err := parseSelection(args)
	if err != nil {
		return control.Fail(err.Error())
	}
	if sel.all && v != opKill && v != opRelease {
		return control.Fail(opNames[v] + ": ALL is for kill and release only")
	}
	if len(sel.ids) == 0 && !sel.walks() {
		return control.Fail(opNames[v] + ": no message named or selected")
	}
	return control.Stream(func(emit func(string) bool) error {
		n := 0
		var failed []string
		// many acts on a group of messages in one call on the loop, and
		// saves the holds once for them, before any is reported.
		many := func(ts []target) bool {
			lines := make([]string, len(ts))
			errs := make([]error, len(ts))
			if !d.inLoop(func() {
				now := d.now()
				for i, t := range ts {
					lines[i], errs[i] = d.act(now, v, t, dry, who)
				}
				if err := d.commitHolds(); err != nil {
					for i := range errs {
						if errs[i] == nil && lines[i] != "" {
							errs[i] = err
						}
					}
				}
			}, loopWait) {
				for i := range errs {
					errs[i] = errLoop
				}
			}
			for i, t := range ts {
				line, err := lines[i], errs[i]
				if err == nil && line != "" && v == opKill && !dry && t.files.Rel != "" && !strings.HasSuffix(line, "in core") {
					err = d.removeKilled(t)
				}
				ok := true
				switch {
				case err != nil:
					failed = append(failed, fmt.Sprintf("%s: %v", t.qid, err))
					ok = emit(fmt.Sprintf("%s\tnot %s: %v", t.qid, opDone[v], err))
				case line != "":
					n++
					ok = emit(line)
				}
				if !ok {
					return false
				}
			}
			return true
		}
		var group []target
		for _, id := range sel.ids {
			t, err := d.resolve(id)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", id, err))
				if !emit(fmt.Sprintf("%s\tnot %s: %v", id, opDone[v], err)) {
					return nil
				}
				continue
			}
			if group = append(group, t); len(group) == walkBatch {
				if !many(group) {
					return nil
				}
				group = group[:0]
			}
		}
		if len(group) > 0 && !many(group) {
			return nil
		}
		if sel.walks() {
			err := d.walk(func(batch []onDisk, entries []mailq.Message) error {
				var ts []target
				for i := range entries {
					if !sel.all && !sel.matches(&entries[i]) {
						continue
					}
					o := batch[i]
					ts = append(ts, target{rel: o.rel, qid: o.qid, control: o.f.Control, files: o.f.Files(o.rel)})
				}
				if len(ts) > 0 && !many(ts) {
					return errors.New("daemon: client gone")
				}
				return nil
			}, func(string, error) {})
			if err != nil {
				return err
			}
		}
		verb := opDone[v]
		if dry {
			verb = "would be " + verb
		}
		emit(fmt.Sprintf("%d messages %s", n, verb))
		switch {
		case n == 0 && len(failed) == 0:
			return errors.New("nothing matched") // the client names the command
		case len(failed) > 0:
			// The first reason too: the listing is on stdout, this on stderr.
			return fmt.Errorf("%d messages not %s (%s)", len(failed), opDone[v], failed[0])
		}
		return nil
	})
}

// resolve finds the message id names, in core or on disk (off the loop).
func (d *Daemon) resolve(id string) (target, error) {
	var lk core.Lookup
	var err error
	if !d.inLoop(func() { lk, err = d.core.Find(id) }, loopWait) {
		return target{}, errLoop
	}
	if err != nil {
		return target{}, err
	}
	if lk.InCore {
		return target{rel: lk.Path, qid: lk.QID, inum: lk.Inum}, nil
	}
	o, err := d.findOnDisk(id)
	if err != nil {
		return target{}, err
	}
	return target{rel: o.rel, qid: o.qid, inum: o.f.Inum, control: o.f.Control, files: o.f.Files(o.rel)}, nil
}

// single carries out a one-message command of MAILQ v2's (KILL MSG, HOLD
// MSG, RELEASE MSG) for a message that may be on disk: answered from the
// loop when it is in core, else from a goroutine that reads the file.
func (d *Daemon) single(req *control.Request, v opVerb, id string) {
	now := d.now()
	lk, err := d.core.Find(id)
	if err != nil {
		req.Respond(control.Fail(err.Error()))
		return
	}
	if lk.InCore {
		line, err := d.act(now, v, target{rel: lk.Path, qid: lk.QID, inum: lk.Inum}, false, peerArgs(req.Peer))
		if err == nil {
			err = d.commitHolds()
		}
		if err != nil {
			req.Respond(control.Fail(err.Error()))
			return
		}
		req.Respond(singleReply(v, lk.QID, line))
		return
	}
	go func() {
		asHelper()
		t, err := d.resolve(id)
		var line string
		if err == nil && !d.inLoop(func() {
			if line, err = d.act(d.now(), v, t, false, peerArgs(req.Peer)); err == nil {
				err = d.commitHolds()
			}
		}, loopWait) {
			err = errLoop
		}
		if err == nil && v == opKill && line != "" && !strings.HasSuffix(line, "in core") {
			err = d.removeKilled(t)
		}
		if err != nil {
			req.Respond(control.Fail(err.Error()))
			return
		}
		req.Respond(singleReply(v, t.qid, line))
	}()
}

// singleReply is the answer to a one-message command; KILL MSG keeps
// MAILQ v2's words, which its clients look for.
func singleReply(v opVerb, qid, line string) control.Reply {
	switch {
	case line == "":
		return control.OK(qid + "\tnothing to do")
	case v == opKill:
		return control.OK("OK; KILLed something.")
	}
	return control.OK(line)
}

// whyOnDisk is WHY for a message not in core: read from disk, described
// as the listing describes it (off the loop; the reply from there).
func (d *Daemon) whyOnDisk(req *control.Request, id string) {
	go func() {
		asHelper()
		o, err := d.findOnDisk(id)
		if err != nil {
			req.Respond(control.Fail(err.Error()))
			return
		}
		var q mailq.Message
		var waiting []string
		if !d.inLoop(func() {
			now := d.now()
			q = d.describe(now, o)
			waiting = d.whyWaiting(now, o.rel)
		}, loopWait) {
			req.Respond(control.Fail(errLoop.Error()))
			return
		}
		held := ""
		if q.Held {
			held = ", held"
		}
		lines := []string{fmt.Sprintf("message %s (%s), not in core: on disk, queued %s ago, %d recipients pending%s",
			q.ID, q.Path, age(time.Since(q.Arrival)), len(q.Recipients), held)}
		lines = append(lines, waiting...)
		for _, r := range q.Recipients {
			state := r.State
			if r.Until != nil {
				state += " until " + r.Until.Format(time.RFC3339)
			}
			lines = append(lines, strings.Join([]string{strconv.FormatInt(r.Offset, 10), r.Address,
				r.Channel + "/" + r.Host, state, r.Reason, "attempts=" + strconv.Itoa(r.Attempts), "last=\"\""}, "\t"))
		}
		req.Respond(control.Listing(lines))
	}()
}

// cat is SHOW MSG (postcat): the control file decoded, the headers, and
// with "body" the body; read off the loop.
func (d *Daemon) cat(args []string) control.Reply {
	id := args[0]
	withBody := len(args) > 1 && strings.EqualFold(args[1], "body")
	return control.Stream(func(emit func(string) bool) error {
		o, err := d.findOnDisk(id)
		if err != nil {
			return err
		}
		f := o.f
		emit(fmt.Sprintf("*** ENVELOPE RECORDS %s (control file transport/%s, %d bytes) ***", o.qid, o.rel, len(o.data)))
		emit(fmt.Sprintf("format: %#x", f.Format))
		emit("body: queue/" + path.Join(path.Dir(o.rel), f.ID) + " from offset " + strconv.FormatInt(f.BodyOffset, 10))
		if !f.Arrival.IsZero() {
			emit("arrival: " + f.Arrival.UTC().Format(time.RFC3339))
		}
		emit("log ident: " + f.LogIdent)
		emit("error address: <" + f.ErrorAddr + ">")
		for _, s := range f.Senders {
			emit(fmt.Sprintf("sender: %s/%s <%s>", s.Channel, s.Host, s.User))
		}
		for _, x := range []struct{ k, v string }{{"RET", f.RET}, {"ENVID", f.ENVID}, {"verbose", f.Verbose}} {
			if x.v != "" {
				emit(x.k + ": " + x.v)
			}
		}
		for _, r := range f.Rcpts {
			st := "'" + string(rune(statusByte(r.Status))) + "'"
			if r.Status == ctlfile.Locked {
				st += " pid " + strconv.Itoa(r.PID)
			}
			line := fmt.Sprintf("recipient @%d: status %s (%s) %s/%s <%s>", r.Offset, st, r.Status, r.Channel, r.Host, r.User)
			if r.Notify != 0 {
				line += " NOTIFY=" + r.Notify.String()
			}
			if r.ORCPT != "" {
				line += " ORCPT=" + r.ORCPT
			}
			emit(line)
		}
		for _, dg := range f.Diags {
			done := "pending"
			if dg.Status != ctlfile.Pending {
				done = "reported"
			}
			emit(fmt.Sprintf("d @%d: rcpt @%d %s at %s: %s | %s", dg.Offset, dg.RcptOffset, done,
				time.Unix(dg.Time, 0).UTC().Format(time.RFC3339), strings.ReplaceAll(dg.Notary, "\x01", " | "), dg.Text))
		}
		emit("*** HEADERS ***")
		off := int64(-1)
		if len(f.Rcpts) > 0 {
			off = f.Rcpts[0].HeaderOffset
		}
		for _, l := range strings.Split(strings.TrimRight(string(dsn.Headers(o.data, off)), "\n"), "\n") {
			emit(l)
		}
		if !withBody {
			return nil
		}
		emit("*** BODY ***")
		b, _, err := d.spool.ReadBody(o.rel, f.ID)
		if err != nil {
			return fmt.Errorf("daemon: body of %s: %w", o.qid, err)
		}
		if f.BodyOffset > 0 && f.BodyOffset <= int64(len(b)) {
			b = b[f.BodyOffset:]
		}
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if !emit(l) {
				return nil
			}
		}
		return nil
	})
}

// statusByte is the byte a status is written as in an r line.
func statusByte(s ctlfile.Status) byte {
	switch s {
	case ctlfile.Done:
		return '+'
	case ctlfile.Failed:
		return '-'
	case ctlfile.Locked:
		return '~'
	}
	return ' '
}

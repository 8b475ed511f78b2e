package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"zsched/core"
	"zsched/ctlfile"
	"zsched/dsn"
	"zsched/report"
)

// Completion and delivery status notifications (DESIGN §2 step 7, §9).
//
// A message that completes owes its sender a DSN for every d line not yet
// reported that the recipient's NOTIFY asks for (package dsn decides). The
// order is what makes it crash-safe:
//
//  1. the reports are queued (ctlfile.Spool.Enqueue: body and control file
//     written, fsynced, renamed, directories fsynced);
//  2. the d lines are marked '+' (Spool.MarkDiags, fsynced);
//  3. the control file and body are removed.
//
// A crash after 1 and before 2 sends a report twice when the file is read
// again at restart; a crash after 2 only leaves the files to remove. No
// crash loses a report. If queuing or marking fails, the reports just
// queued are withdrawn and nothing is removed: the file stays in the queue
// with nothing pending, and the next scan completes it again.
//
// Routing of a report, which the router would otherwise decide: an address
// with a domain goes on channel "smtp" to host = its domain (lowercased), as
// `scheduler enqueue` routes a plain address; one without '@' (postmaster)
// on channel "local", host "localhost". Its envelope sender is <> (sender
// channel "error"), so a report that fails is a double fault and goes to the
// postmaster.

// finish completes a message of the core: its DSN, then its files removed,
// each only while it is the file that was read (intake.ids).
func (d *Daemon) finish(c core.Complete) {
	ids := d.in.ids[c.Inum]
	if ids.qid != "" {
		// Its retry state and its hold end with it (queue.go); an
		// incomplete finish brings it back through a scan, as new.
		d.retry.forget('X', ids.qid)
		d.holdEnded(ids.qid)
	}
	d.finishFiles(c, ctlfile.Files{Rel: c.Path, ID: c.ID, Control: ids.control, Body: ids.body})
	delete(d.in.ids, c.Inum)
}

// finishFiles is finish with the files to remove.
func (d *Daemon) finishFiles(c core.Complete, files ctlfile.Files) {
	if c.Killed {
		delete(d.unwritten, c.Path)
	} else if _, kept := d.unwritten[c.Path]; kept {
		if !d.writeUnwritten(c.Path) {
			// Its DSN would lack those recipients: leave the message on disk;
			// the next scan brings it back and finish tries again.
			d.log.Error("message not completed: d lines still unwritten; the next scan tries again", "msg", d.qid(c.Path))
			return
		}
		c.Diags = true // read back by a scan before they were written
	}
	// Only a message that may owe a report is read again: the core knows
	// of every d line an agent promised (ok2, error2), wrote itself, or
	// found in the file, and most messages have none.
	if !c.Killed && c.Diags {
		if err := d.report(c.Path); err != nil {
			d.log.Error("cannot send delivery status notification; the message stays queued and the next scan tries again",
				"msg", d.qid(c.Path), "error", err)
			return
		}
	}
	// A KILL is answered once the files are gone; and tests may drive
	// finish without Run.
	if c.Killed || d.rm == nil {
		done := "complete"
		if c.Killed {
			done = "killed" // KILL MSG: removed, no DSN
		}
		removeLogged(d.log, d.noise, d.now, files, done, d.spool.Remove(files))
		return
	}
	if _, ok := d.in.removing[c.Path]; !ok {
		d.in.removing[c.Path] = false // until its files are gone: no scan reads it
	}
	d.rm.remove(files)
}

// removed takes back the names the remover is done with: a scan may read
// them again, and one announced meanwhile — a new message under a reused
// inode number, say a DSN just queued — is read now.
func (d *Daemon) removed(rels []string) {
	for _, rel := range rels {
		again := d.in.removing[rel]
		delete(d.in.removing, rel)
		if again {
			d.enqueueRead(rel)
		}
	}
}

// notice sends the DSN the core asked for while the message stays queued
// (a delay warning). A failure is logged: the d lines stay pending and the
// report goes out with the message's next one.
func (d *Daemon) notice(n core.DSN) {
	if err := d.report(n.Path); err != nil {
		d.log.Error("cannot send delay warning", "msg", d.qid(n.Path), "error", err)
	}
}

// report queues the DSNs owed for rel's pending d lines and marks those
// lines reported. It reads the file itself rather than trusting the core's
// flag: an agent may have appended d lines the core never heard of.
func (d *Daemon) report(rel string) error {
	// Read as the intake reads: never waiting on what is at the name.
	data, err := d.spool.ReadControl(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("daemon: dsn: %w", err)
	}
	f, err := ctlfile.Parse(path.Base(rel), data)
	if err != nil {
		return fmt.Errorf("daemon: dsn: %w", err)
	}
	if !hasPendingDiags(f) {
		return nil
	}
	orig := dsn.Original{Header: dsn.Headers(data, headerOffset(f))}
	if b, mtime, err := d.spool.ReadBody(rel, f.ID); err == nil && f.BodyOffset >= 0 && f.BodyOffset <= int64(len(b)) {
		orig.Body = b[f.BodyOffset:]
		f.Arrival = mtime
	} else if err != nil {
		d.log.Warn("message body unreadable; the DSN returns the headers only", "msg", d.qid(rel), "error", err)
	}
	mta, err := os.Hostname()
	if err != nil || mta == "" {
		mta = "localhost"
	}
	res, err := dsn.Build(f, orig, dsn.Options{MTA: mta, Now: d.now()})
	if err != nil {
		return fmt.Errorf("daemon: dsn: %w", err)
	}
	// The reports become mail only with their d lines marked: if queuing
	// one or marking fails, those already queued are withdrawn, or the
	// retry would send them again.
	queued := make([]string, 0, len(res.Reports))
	for _, r := range res.Reports {
		q, err := d.spool.Enqueue(&ctlfile.Message{
			SenderChannel: "error",
			Rcpts:         []ctlfile.Address{route(r.To)},
			Header:        r.Header,
			Body:          r.Body,
		})
		if q != "" {
			queued = append(queued, q)
		}
		if err != nil {
			d.withdraw(rel, queued)
			return fmt.Errorf("daemon: dsn for %s: %w", rel, err)
		}
	}
	if err := d.spool.MarkDiags(rel, res.Done); err != nil {
		d.withdraw(rel, queued)
		return fmt.Errorf("daemon: dsn: %w", err)
	}
	for i, r := range res.Reports {
		to := route(r.To)
		d.enqueueRead(queued[i])
		d.log.Info("delivery status notification queued", "msg", d.qid(rel), "dsn", queued[i],
			"to", r.To, "channel", to.Channel, "host", to.Host, "double_fault", r.DoubleFault, "actions", actions(r.Actions))
	}
	if res.Dropped != "" {
		d.log.Error("delivery status notification dropped", "msg", d.qid(rel), "reason", res.Dropped)
	}
	return nil
}

// withdraw removes reports queued for rel whose d lines stay unmarked (no
// agent has seen them: only this goroutine reads the queue).
func (d *Daemon) withdraw(rel string, queued []string) {
	for _, q := range queued {
		// Just written by this goroutine: its name is its own.
		if err := d.spool.Remove(ctlfile.Files{Rel: q, ID: path.Base(q)}); err != nil {
			d.log.Error("cannot withdraw delivery status notification; it may be sent twice", "msg", d.qid(rel), "dsn", q, "error", err)
			continue
		}
		d.log.Warn("delivery status notification withdrawn", "msg", d.qid(rel), "dsn", q)
	}
}

// headerOffset picks the m block the report returns: that of the first
// recipient with a pending d line (ZMailer's router may write one per
// group of recipients), else the first recipient's.
func headerOffset(f *ctlfile.File) int64 {
	for _, dg := range f.Diags {
		if dg.Status != ctlfile.Pending {
			continue
		}
		if i, ok := f.RcptAt(dg.RcptOffset); ok && f.Rcpts[i].HeaderOffset >= 0 {
			return f.Rcpts[i].HeaderOffset
		}
	}
	if len(f.Rcpts) > 0 {
		return f.Rcpts[0].HeaderOffset
	}
	return -1
}

// route gives a report's recipient a channel and host (see above).
func route(addr string) ctlfile.Address {
	if at := strings.LastIndexByte(addr, '@'); at > 0 && at < len(addr)-1 {
		return ctlfile.Address{Channel: "smtp", Host: strings.ToLower(addr[at+1:]), User: addr}
	}
	return ctlfile.Address{Channel: "local", Host: "localhost", User: addr}
}

func actions(m map[string]int) string {
	var parts []string
	for _, a := range []string{dsn.Failed, dsn.Delayed, dsn.Delivered, dsn.Relayed, dsn.Expanded} {
		if n := m[a]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", a, n))
		}
	}
	return strings.Join(parts, ",")
}

// warned reports whether a message's delay warning was written before (a
// d line with action "delayed"): after a restart it is not sent again.
func warned(f *ctlfile.File) bool {
	for _, dg := range f.Diags {
		if strings.EqualFold(report.ParseNotary(dg.Notary).Action, dsn.Delayed) {
			return true
		}
	}
	return false
}

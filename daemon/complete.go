package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
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
// crash loses a report. If queuing fails, nothing is marked or removed: the
// file stays in the queue with nothing pending, and the next scan completes
// it again.
//
// Routing of a report, which the router would otherwise decide: an address
// with a domain goes on channel "smtp" to host = its domain (lowercased), as
// `scheduler enqueue` routes a plain address; one without '@' (postmaster)
// on channel "local", host "localhost". Its envelope sender is <> (sender
// channel "error"), so a report that fails is a double fault and goes to the
// postmaster.

// finish completes a message: its DSN, then its files removed.
func (d *Daemon) finish(c core.Complete) {
	if c.Killed {
		delete(d.unwritten, c.Path)
	} else if !d.writeUnwritten(c.Path) {
		// Its DSN would lack those recipients: leave the message on disk;
		// the next scan brings it back and finish tries again.
		d.log.Error("message not completed: d lines still unwritten; the next scan tries again", "msg", c.Path)
		return
	}
	if !c.Killed {
		if err := d.report(c.Path); err != nil {
			d.log.Error("cannot send delivery status notification; the message stays queued and the next scan tries again",
				"msg", c.Path, "error", err)
			return
		}
	}
	if err := d.spool.Remove(c.Path, c.ID); err != nil {
		d.log.Error("cannot remove completed message", "msg", c.Path, "error", err)
		return
	}
	d.log.Info("complete", "msg", c.Path)
}

// notice sends the DSN the core asked for while the message stays queued
// (a delay warning). A failure is logged: the d lines stay pending and the
// report goes out with the message's next one.
func (d *Daemon) notice(n core.DSN) {
	if err := d.report(n.Path); err != nil {
		d.log.Error("cannot send delay warning", "msg", n.Path, "error", err)
	}
}

// report queues the DSNs owed for rel's pending d lines and marks those
// lines reported. It reads the file itself rather than trusting the core's
// flag: an agent may have appended d lines the core never heard of.
func (d *Daemon) report(rel string) error {
	data, err := os.ReadFile(filepath.Join(d.spool.TransportDir(), filepath.FromSlash(rel)))
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
	body := filepath.Join(d.spool.TransportDir(), filepath.FromSlash(ctlfile.QueuePath(rel, f.ID)))
	if b, err := os.ReadFile(body); err == nil && f.BodyOffset >= 0 && f.BodyOffset <= int64(len(b)) {
		orig.Body = b[f.BodyOffset:]
		if st, err := os.Stat(body); err == nil {
			f.Arrival = st.ModTime()
		}
	} else if err != nil {
		d.log.Warn("message body unreadable; the DSN returns the headers only", "msg", rel, "error", err)
	}
	mta, err := os.Hostname()
	if err != nil || mta == "" {
		mta = "localhost"
	}
	res, err := dsn.Build(f, orig, dsn.Options{MTA: mta, Now: d.now()})
	if err != nil {
		return fmt.Errorf("daemon: dsn: %w", err)
	}
	for _, r := range res.Reports {
		to := route(r.To)
		queued, err := d.spool.Enqueue(&ctlfile.Message{
			SenderChannel: "error",
			Rcpts:         []ctlfile.Address{to},
			Header:        r.Header,
			Body:          r.Body,
		})
		if queued != "" {
			d.enqueueRead(queued)
		}
		if err != nil {
			return fmt.Errorf("daemon: dsn for %s: %w", rel, err)
		}
		d.log.Info("delivery status notification queued", "msg", rel, "dsn", queued,
			"to", r.To, "channel", to.Channel, "host", to.Host, "double_fault", r.DoubleFault, "actions", actions(r.Actions))
	}
	if res.Dropped != "" {
		d.log.Error("delivery status notification dropped", "msg", rel, "reason", res.Dropped)
	}
	if err := d.spool.MarkDiags(rel, res.Done); err != nil {
		return fmt.Errorf("daemon: dsn: %w", err)
	}
	return nil
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

package main

import (
	"errors"
	"net"
	"strings"

	"zsched/report"
	"zsched/smtpclient"
	"zsched/ta"
)

// rcpt is one recipient of a transaction: its index in the control file
// and what the outcome mapping needs to know about it.
type rcpt struct {
	idx           int    // into ta.Delivery.File.Rcpts
	addr          string // the RCPT address
	notifySuccess bool   // NOTIFY=SUCCESS: a success DSN is owed to the sender
}

// peer describes the session a transaction ran on, for the notary.
type peer struct {
	remoteMTA string // notary field 5
	dsn       bool   // the server offered DSN: NOTIFY went along
}

func peerOf(c *smtpclient.Conn) peer {
	_, dsn := c.Extension("DSN")
	return peer{remoteMTA: remoteMTA(c.Target(), c.LocalAddr()), dsn: dsn}
}

// remoteMTA is the notary's "while talking to" field, as ZMailer's smtp
// writes it: "X-IP-addr; [ip] (rip|rport|lip|lport)" for an address
// literal, "dns; name (rip|rport|lip|lport)" for a name.
func remoteMTA(t smtpclient.Target, local net.Addr) string {
	rip, rport, _ := net.SplitHostPort(t.Addr)
	ends := rip + "|" + rport
	if local != nil {
		if lip, lport, err := net.SplitHostPort(local.String()); err == nil {
			ends += "|" + lip + "|" + lport
		}
	}
	if t.Name == "" || strings.HasPrefix(t.Name, "[") {
		return "X-IP-addr; [" + rip + "] (" + ends + ")"
	}
	return "dns; " + t.Name + " (" + ends + ")"
}

// outcomes maps one transaction to a result per recipient (in rcpts
// order), following the table:
//
//	2xx after the dot        ok; ok2 (with a d line, action relayed) when the
//	                         recipient asked NOTIFY=SUCCESS of a server
//	                         without DSN; ok3 when the server took the duty
//	5xx at MAIL, RCPT, DATA  error2 (the agent library writes the d line)
//	    or after the dot
//	4xx at MAIL, RCPT, DATA  deferred
//	4xx after the dot        deferback (the message, not the recipient)
//	421 anywhere, or the     deferall: a site failure for every recipient
//	session breaking         whose fate no earlier reply settled
//
// err is Send's error; a 421 or a broken session lands in it. again lists
// the recipients refused with 452 "too many recipients" while others were
// accepted (RFC 5321 §4.5.3.1.10): they get no result here; the caller
// sends them in the next transaction.
func outcomes(tx *smtpclient.Tx, err error, rcpts []rcpt, p peer) (res []ta.Result, again []rcpt) {
	var siteReply smtpclient.Reply
	var e *smtpclient.Error
	if errors.As(err, &e) {
		siteReply = e.Reply
	}
	// The transcript ZMailer's smtp puts in every report: its commands
	// and the replies, one per CR-separated line.
	head := "\n<<- " + tx.MailCmd
	if !tx.Mail.IsZero() {
		head += "\n->> " + tx.Mail.String()
	}
	tail := ""
	if !tx.Data.IsZero() {
		tail += "\n<<- DATA\n->> " + tx.Data.String()
	}
	if !tx.Final.IsZero() {
		tail += "\n<<- .\n->> " + tx.Final.String()
	}
	for i, rc := range rcpts {
		text := head
		if i < len(tx.RcptCmds) {
			text += "\n<<- " + tx.RcptCmds[i]
			if r := tx.Rcpts[i]; !r.IsZero() {
				text += "\n->> " + r.String()
			}
		}
		// The reply that settles this recipient, in protocol order.
		var settle smtpclient.Reply
		stage := ""
		switch {
		case tx.Mail.Class() == 4 || tx.Mail.Class() == 5:
			settle, stage = tx.Mail, "mail"
		case i < len(tx.Rcpts) && tx.Rcpts[i].Class() != 2 && !tx.Rcpts[i].IsZero():
			settle, stage = tx.Rcpts[i], "rcpt"
			if settle.Code == 452 && tx.Accepted() > 0 && tooManyRcpts(settle) {
				again = append(again, rc)
				continue
			}
		case i < len(tx.Rcpts) && tx.Rcpts[i].Class() == 2 && (tx.Data.Class() == 4 || tx.Data.Class() == 5):
			settle, stage = tx.Data, "data"
			text += tail
		case i < len(tx.Rcpts) && tx.Rcpts[i].Class() == 2 && !tx.Final.IsZero():
			settle, stage = tx.Final, "dot"
			text += tail
		}
		if settle.ShutsDown() || settle.IsZero() {
			// Not settled by a reply of its own: the session ended (421
			// or broken) before it was. (Send's contract makes err set
			// here; a nil err is reported as a broken session too.)
			text += tail
			res = append(res, siteFailure(rc, siteReply, err, text, p))
			continue
		}
		n := report.Notary{
			Recipient:  rc.addr,
			Status:     settle.Status(),
			Diagnostic: "smtp; " + settle.String(),
			RemoteMTA:  p.remoteMTA,
		}
		r := ta.Result{Rcpt: rc.idx, Notary: n, Text: text}
		switch {
		case settle.Class() == 2:
			r.Notary.Action = "delivered"
			r.Status = report.OK
			if rc.notifySuccess {
				if p.dsn {
					// The next hop took the NOTIFY=SUCCESS duty (it got
					// NOTIFY with the RCPT): no DSN from us.
					r.Status = report.OK3
				} else {
					r.Notary.Action = "relayed"
					r.Status = report.OK2
				}
			}
		case settle.Class() == 5:
			r.Notary.Action = "failed"
			r.Status = report.Error2
		case stage == "dot":
			r.Notary.Action = "delayed"
			r.Status = report.Deferback
		default:
			r.Notary.Action = "delayed"
			r.Status = report.Deferred
		}
		res = append(res, r)
	}
	return res, again
}

// tooManyRcpts recognises a 452 that means "send the rest in another
// transaction" rather than "this mailbox is full".
func tooManyRcpts(r smtpclient.Reply) bool {
	return r.Enhanced == "4.5.3" || strings.Contains(strings.ToLower(r.Text()), "too many recipients")
}

// siteFailure is the deferall result for a recipient when the session
// failed: reply is the server's (a 421, a refusing greeting), zero when
// the network or DNS failed (err says how).
func siteFailure(rc rcpt, reply smtpclient.Reply, err error, text string, p peer) ta.Result {
	n := report.Notary{Recipient: rc.addr, Action: "delayed", RemoteMTA: p.remoteMTA}
	if !reply.IsZero() {
		n.Status = reply.Status()
		n.Diagnostic = "smtp; " + reply.String()
	} else {
		n.Status, n.Diagnostic = failureStatus(err)
	}
	if text == "" {
		text = describe(err)
	}
	return ta.Result{Rcpt: rc.idx, Status: report.DeferAll, Notary: n, Text: text}
}

// failureStatus gives the RFC 3463 status and a diagnostic for a failure
// that has no SMTP reply.
func failureStatus(err error) (status, diag string) {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns), errors.Is(err, smtpclient.ErrNoHost):
		status = "4.4.3 (directory server failure)"
	case isConnect(err):
		status = "4.4.1 (no answer from host)"
	default:
		status = "4.4.2 (bad connection)"
	}
	return status, "X-zsched; " + describe(err)
}

func isConnect(err error) bool {
	var e *smtpclient.Error
	return errors.As(err, &e) && e.Stage == smtpclient.StageConnect
}

// describe is an error as report text, without the package prefixes an
// operator does not need.
func describe(err error) string {
	if err == nil {
		return "session failed"
	}
	s := err.Error()
	s = strings.ReplaceAll(s, "smtpclient: ", "")
	return s
}

// permanent is the result for a recipient that cannot be delivered at
// all (null MX, an envelope the server cannot take): error2.
func permanent(rc rcpt, status, text string, p peer) ta.Result {
	return ta.Result{Rcpt: rc.idx, Status: report.Error2, Text: text, Notary: report.Notary{
		Recipient: rc.addr, Action: "failed", Status: status,
		Diagnostic: "X-zsched; " + text, RemoteMTA: p.remoteMTA,
	}}
}

// transient is a deferred result for a local, temporary problem.
func transient(rc rcpt, text string) ta.Result {
	return ta.Result{Rcpt: rc.idx, Status: report.Deferred, Text: text, Notary: report.Notary{
		Recipient: rc.addr, Action: "delayed", Status: "4.3.0 (local problem)", Diagnostic: "X-zsched; " + text,
	}}
}

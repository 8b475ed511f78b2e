package ctlfile

import (
	"fmt"
	"strings"
)

// Files observed in zmailer-ta-observed.md (A1, A2, A3, A9, A19): control
// files written in the layout of zmailer-mkmsg.py, then changed by ZMailer's
// real agents. Every number below — sizes, offsets — is copied from the
// document's listings, not computed here; the d lines are the document's
// bytes (its Python escapes decoded).
type observedFile struct {
	name   string
	rcpts  []string // users at dest.test, in file order
	notify string   // N line NOTIFY= value for every rcpt, "" = no N lines
	before int      // size before the agent ran
	after  int      // size after
	marks  string   // status byte of each r line after the run
	rOffs  []int64  // r line offsets
	nOffs  []int64  // N line offsets (-1 = none)
	mOff   int64    // offset of the m line (so headers at mOff+2)
	dLines []string // appended d lines
	dOffs  []int64
}

var observedFiles = []observedFile{
	{ // §3, A1: one recipient, ok3
		name: "10002561", rcpts: []string{"ok1@dest.test"}, before: 275, after: 275, marks: "+",
		rOffs: []int64{121}, nOffs: []int64{-1}, mOff: 164,
	},
	{ // A2, first message: ok / 550 / 451 at RCPT
		name: "10002591", rcpts: []string{"ok1@dest.test", "bad1@dest.test", "tmp1@dest.test"},
		before: 395, after: 808, marks: "+- ",
		rOffs: []int64{121, 164, 208}, nOffs: []int64{-1, -1, -1}, mOff: 252,
		dLines: []string{
			"d 164:254:-1::1795337543\tbad1@dest.test\u0001failed\u00015.1.1\u0001smtp; 550 (<bad1@dest.test>: Recipient address rejected: User unknown)\u0001X-IP-addr; [127.0.0.1] (127.0.0.1|2525|127.0.0.1|60284)\u0001smtp[21148]\t\r<<- MAIL From:<sender@example.org> BODY=8BITMIME SIZE=201\r->> 250 2.1.0 Ok\r<<- RCPT To:<bad1@dest.test> NOTIFY=FAILURE ORCPT=rfc822;bad1@dest.test\r->> 550 5.1.1 <bad1@dest.test>: Recipient address rejected: User unknown\n",
		},
		dOffs: []int64{395},
	},
	{ // A2, second message: NOTIFY=SUCCESS,FAILURE
		name: "10002593", rcpts: []string{"ok2@dest.test", "bad2@dest.test", "tmp2@dest.test"},
		notify: "SUCCESS,FAILURE", before: 553, after: 975, marks: "+- ",
		rOffs: []int64{121, 216, 313}, nOffs: []int64{164, 260, 357}, mOff: 410,
		dLines: []string{
			"d 216:412:260::1795337543\tbad2@dest.test\u0001failed\u00015.1.1\u0001smtp; 550 (<bad2@dest.test>: Recipient address rejected: User unknown)\u0001X-IP-addr; [127.0.0.1] (127.0.0.1|2525|127.0.0.1|60288)\u0001smtp[21148]\t\r<<- MAIL From:<sender@example.org> BODY=8BITMIME SIZE=201\r->> 250 2.1.0 Ok\r<<- RCPT To:<bad2@dest.test> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;bad2@dest.test\r->> 550 5.1.1 <bad2@dest.test>: Recipient address rejected: User unknown\n",
		},
		dOffs: []int64{553},
	},
	{ // A3: peer without DSN, ok2 and error2, two d lines
		name: "10002624", rcpts: []string{"ok3@dest.test", "bad3@dest.test"},
		notify: "SUCCESS,FAILURE", before: 440, after: 1175, marks: "+-",
		rOffs: []int64{121, 216}, nOffs: []int64{164, 260}, mOff: 313,
		dLines: []string{
			"d 216:315:260::1795337558\tbad3@dest.test\u0001failed\u00015.1.1\u0001smtp; 550 (<bad3@dest.test>: Recipient address rejected: User unknown)\u0001X-IP-addr; [127.0.0.1] (127.0.0.1|2526|127.0.0.1|44484)\u0001smtp[22553]\t\r<<- MAIL From:<sender@example.org> BODY=8BITMIME SIZE=185\r->> 250 2.1.0 Ok\r<<- RCPT To:<bad3@dest.test>\r->> 550 5.1.1 <bad3@dest.test>: Recipient address rejected: User unknown\n",
			"d 121:315:164::1795337558\tok3@dest.test\u0001relayed\u00012.0.0\u0001smtp; 250 (Ok: queued as FAKE1)\u0001X-IP-addr; [127.0.0.1] (127.0.0.1|2526|127.0.0.1|44484)\u0001smtp[22553]\t\r<<- MAIL From:<sender@example.org> BODY=8BITMIME SIZE=185\r->> 250 2.1.0 Ok\r<<- RCPT To:<ok3@dest.test>\r->> 250 2.1.5 Ok\r<<- DATA\r->> 354 End data with <CR><LF>.<CR><LF>\r<<- .\r->> 250 2.0.0 Ok: queued as FAKE1\n",
		},
		dOffs: []int64{440, 811},
	},
	{ // A19: NOTIFY=NEVER, the agent still writes the d line
		name: "10002747", rcpts: []string{"bad50@dest.test", "ok50@dest.test"},
		notify: "NEVER", before: 426, after: 801, marks: "-+",
		rOffs: []int64{121, 210}, nOffs: []int64{166, 254}, mOff: 297,
		dLines: []string{
			"d 121:299:166::1795339388\tbad50@dest.test\u0001failed\u00015.1.1\u0001smtp; 550 (<bad50@dest.test>: Recipient address rejected: User unknown)\u0001X-IP-addr; [127.0.0.1] (127.0.0.1|2526|127.0.0.1|36302)\u0001smtp[13590]\t\r<<- MAIL From:<sender@example.org> BODY=8BITMIME SIZE=187\r->> 250 2.1.0 Ok\r<<- RCPT To:<bad50@dest.test>\r->> 550 5.1.1 <bad50@dest.test>: Recipient address rejected: User unknown\n",
		},
		dOffs: []int64{426},
	},
	{ // A9: missing queue body, error2 with an almost empty notary
		name: "10002819", rcpts: []string{"ok17@dest.test"}, before: 277, after: 432, marks: "-",
		rOffs: []int64{121}, nOffs: []int64{-1}, mOff: 165,
		dLines: []string{
			"d 121:167:-1::1795337600\t\u0001failed\u0001\u0001\u0001\u0001smtp[29440]\tmessage file is missing(!) -- possibly due to delivery scheduler restart.  Consider resending your message\n",
		},
		dOffs: []int64{277},
	},
}

// mkmsgLayout writes a control file as zmailer-mkmsg.py does (defaults:
// sender sender@example.org, channel smtp, host dest.test, format
// 0x00000007, subject "ZMailer TA test").
func mkmsgLayout(name string, rcpts []string, notify string) []byte {
	const sender = "sender@example.org"
	headers := fmt.Sprintf("From: %s\nTo: %s\nSubject: ZMailer TA test\n", sender, strings.Join(rcpts, ", "))
	envelope := fmt.Sprintf("from <%s>\nto <%s>\nenv-end\n", sender, rcpts[0])
	var b strings.Builder
	fmt.Fprintf(&b, "@ 0x00000007\ni %s\no %d\nl <%s.test@example.org>\ne %s\n", name, len(envelope)+len(headers)+1, name, sender)
	fmt.Fprintf(&b, "s smtp example.org %s 0\n", sender)
	for _, r := range rcpts {
		fmt.Fprintf(&b, "r           smtp dest.test %s 0\n", r)
		if notify != "" {
			fmt.Fprintf(&b, "N NOTIFY=%s ORCPT=rfc822;%s\n", notify, r)
		}
	}
	fmt.Fprintf(&b, "m\n%sMessage-Id: <%s.test@example.org>\n\n", headers, name)
	return []byte(b.String())
}

// beforeBytes and afterBytes are the observed file before and after its run.
func (o observedFile) beforeBytes() []byte { return mkmsgLayout(o.name, o.rcpts, o.notify) }

func (o observedFile) afterBytes() []byte {
	b := o.beforeBytes()
	for i, off := range o.rOffs {
		b[off+1] = o.marks[i]
	}
	for _, d := range o.dLines {
		b = append(b, d...)
	}
	return b
}

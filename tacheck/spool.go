package tacheck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"zsched/ctlfile"
	"zsched/report"
)

// postoffice is a case's throw-away spool.
type postoffice struct {
	root      string
	transport string
	channel   string
	host      string
	msgs      []*msg
}

// msg is one control file a case made.
type msg struct {
	rel  string // relative to transport/, as job lines name it
	path string // the control file
	body string // the message body
	orig []byte // the control file as the agent was given it
	file *ctlfile.File
	mine []int64 // offsets of its r lines on (channel, host): the job's recipients
}

func newPostoffice(root, channel, host string) *postoffice {
	return &postoffice{root: root, transport: filepath.Join(root, "transport"), channel: channel, host: host}
}

func (p *postoffice) init() error {
	return (&ctlfile.Spool{Root: p.root}).Init()
}

// Recipient kinds for message.
const (
	mine        = iota // channel and host of the kit's Config
	mineSuccess        // the same, with NOTIFY=SUCCESS (an agent owes ok2 and a d line, or ok)
	otherHost          // same channel, another host
	otherChan          // another channel, same host
)

// message enqueues a message with one recipient per kind, in hash levels
// hash, as ZMailer's router lays it out.
func (p *postoffice) message(hash int, kinds ...int) (*msg, error) {
	m := &ctlfile.Message{
		Sender: "sender@example.org",
		Header: []byte("From: sender@example.org\nSubject: zsched ta-check\n"),
		Body:   []byte("This is a ta-check test message.\n"),
	}
	var to []string
	for i, k := range kinds {
		a := ctlfile.Address{Channel: p.channel, Host: p.host}
		switch k {
		case mineSuccess:
			a.Notify = "SUCCESS"
		case otherHost:
			a.Host = "elsewhere." + p.host
		case otherChan:
			a.Channel = p.channel + "x"
		}
		a.User = "rcpt" + strconv.Itoa(i+1) + "@" + a.Host
		to = append(to, a.User)
		m.Rcpts = append(m.Rcpts, a)
	}
	m.Header = append(m.Header, "To: "+strings.Join(to, ", ")+"\n"...)
	rel, err := (&ctlfile.Spool{Root: p.root, Hash: hash}).Enqueue(m)
	if err != nil {
		return nil, err
	}
	x := &msg{rel: rel, path: filepath.Join(p.transport, rel)}
	if err := x.reload(); err != nil {
		return nil, err
	}
	x.body = filepath.Join(p.root, "queue", filepath.Dir(rel), x.file.ID)
	for i, r := range x.file.Rcpts {
		if kinds[i] == mine || kinds[i] == mineSuccess {
			x.mine = append(x.mine, r.Offset)
		}
	}
	p.msgs = append(p.msgs, x)
	return x, nil
}

// reload takes the control file as it is now as the one given to the agent
// (after a case edited it by hand).
func (m *msg) reload() error {
	b, err := os.ReadFile(m.path)
	if err != nil {
		return err
	}
	f, err := ctlfile.Parse(filepath.Base(m.path), b)
	if err != nil {
		return err
	}
	m.orig, m.file = b, f
	return nil
}

// fifoBody replaces m's body with a FIFO holding the same bytes, so that an
// agent reading it blocks until the kit feeds it: the moment to look at its
// locks.
func (p *postoffice) fifoBody(m *msg) ([]byte, error) {
	data, err := os.ReadFile(m.body)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(m.body); err != nil {
		return nil, err
	}
	if err := syscall.Mkfifo(m.body, 0o644); err != nil {
		return nil, err
	}
	return data, nil
}

// pidWidth is the PID column count of m's r lines.
func (m *msg) pidWidth() int {
	if m.file.Format&ctlfile.FlagPID != 0 {
		return 6
	}
	return 0
}

func (m *msg) isMine(off int64) bool { return slices.Contains(m.mine, off) }

// unchanged checks that the agent left m's control file byte for byte as
// it was given.
func (m *msg) unchanged() error {
	b, err := os.ReadFile(m.path)
	if err != nil {
		return fmt.Errorf("control file %s: %w", m.rel, err)
	}
	if !bytes.Equal(b, m.orig) {
		return fmt.Errorf("control file %s was changed (%s)", m.rel, firstDiff(m.orig, b))
	}
	return nil
}

// checkReports checks one answer's reports against job m: each names m's
// inum and the offset of one of the job's own r lines, at most once. With
// all, every recipient of the job must be reported.
func (m *msg) checkReports(a answer, seen map[int64]bool, all bool) error {
	for _, r := range a.reports {
		key := strconv.FormatInt(r.Inum, 10) + "/" + strconv.FormatInt(r.Offset, 10)
		switch {
		case r.Inum != m.file.Inum:
			return fmt.Errorf("report %s for job %s: the inum should be %d", key, m.rel, m.file.Inum)
		case !m.isMine(r.Offset):
			if i, ok := m.file.RcptAt(r.Offset); ok {
				rc := m.file.Rcpts[i]
				return fmt.Errorf("report %s names the r line of %s on %s/%s, not a recipient of this job", key, rc.User, rc.Channel, rc.Host)
			}
			return fmt.Errorf("report %s: no r line starts at offset %d of %s (r lines at %v)", key, r.Offset, m.rel, m.mine)
		case seen[r.Offset]:
			return fmt.Errorf("report %s: a second report for the same recipient", key)
		}
		seen[r.Offset] = true
	}
	if all {
		for _, off := range m.mine {
			if !seen[off] {
				return fmt.Errorf("no report for %d/%d, a recipient of job %s", m.file.Inum, off, m.rel)
			}
		}
	}
	return nil
}

// checkOthers checks that the agent changed nothing in m's control file
// but the status bytes and PID columns of the job's own r lines, and
// appended nothing but whole d lines. It returns the file as it is now.
func (m *msg) checkOthers() ([]byte, *ctlfile.File, error) {
	after, err := os.ReadFile(m.path)
	if err != nil {
		return nil, nil, fmt.Errorf("control file %s: %w", m.rel, err)
	}
	if len(after) < len(m.orig) {
		return nil, nil, fmt.Errorf("control file %s shrank from %d to %d bytes", m.rel, len(m.orig), len(after))
	}
	pw := m.pidWidth()
	may := make(map[int]bool)
	for _, off := range m.mine {
		for i := 1; i <= 1+pw; i++ {
			may[int(off)+i] = true
		}
	}
	for i := range m.orig {
		if after[i] != m.orig[i] && !may[i] {
			what := fmt.Sprintf("byte %d", i)
			if j, ok := m.lineAt(int64(i)); ok {
				rc := m.file.Rcpts[j]
				what = fmt.Sprintf("byte %d, in the r line of %s on %s/%s (not this job's)", i, rc.User, rc.Channel, rc.Host)
			}
			return nil, nil, fmt.Errorf("control file %s: %s changed from %q to %q; an agent writes only status bytes and PID columns of its own r lines, and appends d lines",
				m.rel, what, m.orig[i], after[i])
		}
	}
	tail := after[len(m.orig):]
	for _, l := range bytes.SplitAfter(tail, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		if l[0] != 'd' || l[len(l)-1] != '\n' {
			return nil, nil, fmt.Errorf("control file %s: appended %q, which is not a whole d line", m.rel, l)
		}
	}
	f, err := ctlfile.Parse(filepath.Base(m.path), after)
	if err != nil {
		return nil, nil, fmt.Errorf("control file %s no longer parses: %w", m.rel, err)
	}
	return after, f, nil
}

// lineAt returns the index of the recipient whose r line holds byte off.
func (m *msg) lineAt(off int64) (int, bool) {
	for i, r := range m.file.Rcpts {
		end := int64(bytes.IndexByte(m.orig[r.Offset:], '\n'))
		if off >= r.Offset && (end < 0 || off <= r.Offset+end) {
			return i, true
		}
	}
	return 0, false
}

// checkMarks checks the job's own r lines against the reports the agent
// gave (after checkOthers): each reported recipient marked by its status
// word's class with the PID columns blank; unreported ones back to blank;
// ok2 and error2 with their d line. It returns the marks it saw.
func (m *msg) checkMarks(reports []report.Line) (string, error) {
	after, f, err := m.checkOthers()
	if err != nil {
		return "", err
	}
	pw := m.pidWidth()
	byOff := make(map[int64]report.Line)
	for _, r := range reports {
		byOff[r.Offset] = r
	}
	var marks []string
	for _, off := range m.mine {
		st := after[off+1]
		pid := string(after[off+2 : off+2+int64(pw)])
		key := fmt.Sprintf("%d/%d", m.file.Inum, off)
		r, reported := byOff[off]
		want := byte(ctlfile.Pending)
		if reported {
			switch r.Status.Class() {
			case report.Delivered:
				want = byte(ctlfile.Done)
			case report.Permanent:
				want = byte(ctlfile.Failed)
			}
		}
		switch {
		case st != want && reported:
			return "", fmt.Errorf("%s reported %s but marked %q, want %q", key, r.Status, st, want)
		case st != want:
			return "", fmt.Errorf("%s was not reported but marked %q; an unreported recipient must be left (or put back) blank", key, st)
		case strings.TrimSpace(pid) != "":
			return "", fmt.Errorf("%s marked %q but the PID columns still hold %q; they must be blanked", key, st, pid)
		}
		if reported && (r.Status == report.OK2 || r.Status == report.Error2) && !hasDiag(f, off, int64(len(m.orig))) {
			return "", fmt.Errorf("%s reported %s, which says the agent appended a d line for it, but there is none", key, r.Status)
		}
		if reported {
			marks = append(marks, fmt.Sprintf("%s %s→%q", key, r.Status, st))
		}
	}
	return strings.Join(marks, ", "), nil
}

func hasDiag(f *ctlfile.File, rcpt, from int64) bool {
	for _, d := range f.Diags {
		if d.RcptOffset == rcpt && d.Offset >= from {
			return true
		}
	}
	return false
}

// lockedLines reads m's control file and returns the status and PID
// columns of the job's r lines, and whether all of them are locked.
func (m *msg) lockedLines() ([]byte, bool) {
	b, err := os.ReadFile(m.path)
	if err != nil || len(b) < len(m.orig) {
		return nil, false
	}
	var cols []byte
	all := true
	for _, off := range m.mine {
		c := b[off+1 : off+2+int64(m.pidWidth())]
		cols = append(cols, c...)
		all = all && c[0] == byte(ctlfile.Locked)
	}
	return cols, all
}

// heldBy reports whether the columns lockedLines returned name pid in
// every PID field.
func (m *msg) heldBy(cols []byte, pid int) bool {
	pw := m.pidWidth()
	want := fmt.Sprintf("~%*d", pw, pid)[:1+pw]
	for i := range m.mine {
		if string(cols[i*(1+pw):(i+1)*(1+pw)]) != want {
			return false
		}
	}
	return true
}

// checkLocked judges the locks lockedLines saw: each the locker's PID
// right-aligned in the PID columns. The PID should be the agent's; another
// live process is accepted with a note (a wrapper that did not exec, a
// helper it runs), a dead or missing one is not: the scheduler would take
// the lock for stale and reset it.
func (m *msg) checkLocked(cols []byte, agentPid int, note func(string, ...any)) error {
	pw := m.pidWidth()
	for i, off := range m.mine {
		c := cols[i*(1+pw) : (i+1)*(1+pw)]
		key := fmt.Sprintf("%d/%d", m.file.Inum, off)
		note("while the agent holds it: %s locked as %q", key, "r"+string(c))
		if pw == 0 {
			continue
		}
		field := string(c[1:])
		want := fmt.Sprintf("%*d", pw, agentPid)
		if field == want {
			continue
		}
		digits := strings.TrimLeft(field, " ")
		pid, err := strconv.Atoi(digits)
		if err != nil || len(digits) == 0 {
			return fmt.Errorf("%s: PID columns %q, want the agent's PID right-aligned, %q", key, field, want)
		}
		if !alive(pid) {
			return fmt.Errorf("%s: PID columns name %d, which is not a live process (the agent is %d): the scheduler resets such a lock as stale", key, pid, agentPid)
		}
		note("%s is locked by pid %d, a live process but not the agent (%d): a wrapper that did not exec?", key, pid, agentPid)
	}
	return nil
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// firstDiff describes where two byte strings first differ.
func firstDiff(a, b []byte) string {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("byte %d: %q became %q", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("%d bytes became %d", len(a), len(b))
}

// listing gives the '@', 'r' and 'd' lines of a control file with their
// byte offsets, as zmailer-dumpctl.py prints them.
func listing(b []byte) []string {
	var out []string
	off := 0
	inBlock := false
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		line := b
		if i >= 0 {
			line = b[:i]
		}
		switch {
		case inBlock:
			inBlock = len(line) != 0
		case string(line) == "m" || string(line) == "M":
			inBlock = true
		case len(line) > 0 && (line[0] == '@' || line[0] == 'r' || line[0] == 'd'):
			out = append(out, fmt.Sprintf("%5d| %s", off, escape(string(line))))
		}
		if i < 0 {
			break
		}
		off += i + 1
		b = b[i+1:]
	}
	return out
}

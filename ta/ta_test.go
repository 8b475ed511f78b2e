package ta

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/ctlfile"
	"zsched/report"
)

// a1 is control file 10002561 of zmailer-ta-observed.md §3, byte for byte.
const a1 = "@ 0x00000007\n" +
	"i 10002561\n" +
	"o 122\n" +
	"l <10002561.test@example.org>\n" +
	"e sender@example.org\n" +
	"s smtp example.org sender@example.org 0\n" +
	"r           smtp dest.test ok1@dest.test 0\n" +
	"m\n" +
	"From: sender@example.org\n" +
	"To: ok1@dest.test\n" +
	"Subject: ZMailer TA test\n" +
	"Message-Id: <10002561.test@example.org>\n" +
	"\n"

// a1Text is the smtp agent's report text in A1.
const a1Text = "\r<<- MAIL From:<sender@example.org> BODY=8BITMIME SIZE=168\r->> 250 2.1.0 Ok\r<<- RCPT To:<ok1@dest.test> NOTIFY=FAILURE ORCPT=rfc822;ok1@dest.test\r->> 250 2.1.5 Ok\r<<- DATA\r->> 354 End data with <CR><LF>.<CR><LF>\r<<- .\r->> 250 2.0.0 Ok: queued as FAKE1"

const testPID = 4242

var testNow = time.Unix(1795337543, 0)

// rcptLine is one r line to build: lead is what follows the letter r (the
// status byte, 6 PID and 4 delay columns), quad is "channel host user priv".
type rcptLine struct {
	lead, quad, n string
}

func pending(quad string) rcptLine { return rcptLine{lead: strings.Repeat(" ", 11), quad: quad} }

// msg builds a control file laid out as ZMailer's router writes it
// (zmailer-mkmsg.py), recording where each r line and the headers start.
type msg struct {
	name   string
	format string
	rcpts  []rcptLine
}

type built struct {
	data   []byte
	offs   []int64 // of each r line
	noffs  []int64 // of each N line, -1 if none
	header int64   // first header line of the m block
}

func (m msg) build() built {
	var b bytes.Buffer
	var out built
	format := m.format
	if format == "" {
		format = "0x00000007"
	}
	fmt.Fprintf(&b, "@ %s\ni %s\no 122\nl <%s.test@example.org>\ne sender@example.org\n", format, m.name, m.name)
	b.WriteString("s smtp example.org sender@example.org 0\n")
	var to []string
	for _, r := range m.rcpts {
		out.offs = append(out.offs, int64(b.Len()))
		b.WriteString("r" + r.lead + r.quad + "\n")
		out.noffs = append(out.noffs, -1)
		if r.n != "" {
			out.noffs[len(out.noffs)-1] = int64(b.Len())
			b.WriteString("N " + r.n + "\n")
		}
		f := strings.Fields(r.quad)
		to = append(to, f[2])
	}
	b.WriteString("m\n")
	out.header = int64(b.Len())
	fmt.Fprintf(&b, "From: sender@example.org\nTo: %s\nSubject: ZMailer TA test\nMessage-Id: <%s.test@example.org>\n\n",
		strings.Join(to, ", "), m.name)
	out.data = b.Bytes()
	return out
}

const testBody = "This is a test body line 1.\nLine 2.\n..leading dot line\n"

// spool makes a postoffice and returns its transport directory.
func spool(t *testing.T) string {
	t.Helper()
	po := t.TempDir()
	for _, d := range []string{"transport", "queue"} {
		if err := os.Mkdir(filepath.Join(po, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(po, "transport")
}

// put writes a control file and, with body, its message file.
func put(t *testing.T, dir, name string, data []byte, body bool) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if body {
		b := strings.Repeat("h", 122) + testBody
		if err := os.WriteFile(filepath.Join(dir, "..", "queue", filepath.Base(name)), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func read(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// conv drives Serve in-process over pipes.
type conv struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan string
	done  chan error
}

func serve(t *testing.T, a *Agent, deliver func(*Delivery) []Result) *conv {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a.In, a.Out = inR, outW
	if a.PID == 0 {
		a.PID = testPID
	}
	if a.Now == nil {
		a.Now = func() time.Time { return testNow }
	}
	if a.Name == "" {
		a.Name = "tst"
	}
	c := &conv{t: t, in: inW, lines: make(chan string, 1024), done: make(chan error, 1)}
	go func() {
		r := bufio.NewReader(outR)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				if l != "" {
					c.lines <- "PARTIAL:" + l
				}
				close(c.lines)
				return
			}
			c.lines <- strings.TrimSuffix(l, "\n")
		}
	}()
	go func() {
		err := a.Serve(deliver)
		outW.Close()
		c.done <- err
	}()
	t.Cleanup(func() {
		inW.Close()
		outR.Close()
	})
	return c
}

const wait = 5 * time.Second

func (c *conv) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, s); err != nil {
		c.t.Fatalf("send %q: %v", s, err)
	}
}

func (c *conv) next() string {
	c.t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			c.t.Fatal("agent output ended")
		}
		return l
	case <-time.After(wait):
		c.t.Fatal("no line from the agent")
	}
	return ""
}

func (c *conv) expect(want ...string) {
	c.t.Helper()
	for _, w := range want {
		if got := c.next(); got != w {
			c.t.Fatalf("got line %q, want %q", got, w)
		}
	}
}

// finish waits for Serve to return and checks nothing more was written.
func (c *conv) finish() error {
	c.t.Helper()
	var err error
	select {
	case err = <-c.done:
	case <-time.After(wait):
		c.t.Fatal("Serve did not return")
	}
	for l := range c.lines {
		c.t.Errorf("unexpected line after the end: %q", l)
	}
	return err
}

func (c *conv) end() {
	c.t.Helper()
	c.send("\n")
	if err := c.finish(); err != nil {
		c.t.Fatalf("Serve: %v", err)
	}
}

func lockBytes(pid int) string { return fmt.Sprintf("~%6d", pid) }

// patch returns b with s written at off, as a pwrite would.
func patch(b []byte, off int64, s string) []byte {
	c := bytes.Clone(b)
	copy(c[off:], s)
	return c
}

func TestA1Transcript(t *testing.T) {
	dir := spool(t)
	if len(a1) != 275 || !strings.HasPrefix(a1[121:], "r ") {
		t.Fatalf("a1 is %d bytes, want the 275 of the observed file with r at 121", len(a1))
	}
	put(t, dir, "10002561", []byte(a1), true)
	var during []byte
	var body []byte
	var got Delivery
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		got = *d
		during, _ = os.ReadFile(filepath.Join(dir, "10002561"))
		if _, err := d.Body().Seek(d.File.BodyOffset, io.SeekStart); err != nil {
			t.Error(err)
		}
		body, _ = io.ReadAll(d.Body())
		return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3, Text: a1Text}}
	})
	c.expect("#hungry")
	c.send("10002561\tdest.test\n")
	c.expect("10002561/121\t\tok3 "+a1Text, "#hungry")
	c.send("#idle\n")
	c.expect("#hungry")
	c.end()

	if got.Path != "10002561" || got.Host != "dest.test" || len(got.Rcpts) != 1 || got.Rcpts[0] != 0 {
		t.Errorf("delivery = path %q host %q rcpts %v", got.Path, got.Host, got.Rcpts)
	}
	if want := patch([]byte(a1), 122, lockBytes(testPID)); !bytes.Equal(during, want) {
		t.Errorf("file during delivery:\n%q\nwant\n%q", during, want)
	}
	if string(body) != testBody {
		t.Errorf("body from BodyOffset = %q, want %q", body, testBody)
	}
	if after, want := read(t, dir, "10002561"), patch([]byte(a1), 121, "r+          smtp"); !bytes.Equal(after, want) {
		t.Errorf("file after:\n%q\nwant\n%q", after, want)
	}
}

// BodyFD reads the same message file as Body, before and after Body made
// its *os.File.
func TestBodyFD(t *testing.T) {
	dir := spool(t)
	put(t, dir, "10002561", []byte(a1), true)
	var raw, viaFile []byte
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		pread := func() []byte {
			b := make([]byte, len(testBody)+10)
			n, err := syscall.Pread(d.BodyFD(), b, d.File.BodyOffset)
			if err != nil {
				t.Error(err)
			}
			return b[:n]
		}
		raw = pread()
		d.Body()
		viaFile = pread()
		return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3, Text: a1Text}}
	})
	c.expect("#hungry")
	c.send("10002561\tdest.test\n")
	c.expect("10002561/121\t\tok3 "+a1Text, "#hungry")
	c.end()
	if string(raw) != testBody || string(viaFile) != testBody {
		t.Errorf("body through BodyFD = %q, after Body %q; want %q", raw, viaFile, testBody)
	}
}

// TestSettle checks every outcome's report line, mark and d line, and that
// no other byte of the file changes.
func TestSettle(t *testing.T) {
	dir := spool(t)
	m := msg{name: "777", rcpts: []rcptLine{
		pending("smtp dest.test ok3@dest.test 0"),
		{lead: strings.Repeat(" ", 11), quad: "smtp dest.test ok2@dest.test 0", n: "NOTIFY=SUCCESS ORCPT=rfc822;ok2@dest.test"},
		pending("smtp dest.test bad@dest.test 0"),
		pending("smtp dest.test tmp@dest.test 0"),
		pending("smtp dest.test site@dest.test 0"),
		pending("smtp dest.test later@dest.test 0"),
		pending("smtp dest.test forgot@dest.test 0"),
		pending("smtp dest.test perm@dest.test 0"),
		pending("smtp dest.test plainok@dest.test 0"),
	}}
	f := m.build()
	put(t, dir, "777", f.data, true)
	tmpNotary := report.Notary{Recipient: "tmp@dest.test", Action: "delayed", Status: "4.2.1", Diagnostic: "smtp; 451 busy"}
	results := []Result{
		{Rcpt: 0, Status: report.OK3, Text: "fine"},
		{Rcpt: 1, Status: report.OK2, Text: "relayed\nwithout DSN"},
		{Rcpt: 2, Status: report.Error2, Text: "550 no such user",
			Notary: report.Notary{Recipient: "bad@dest.test", Action: "failed", Status: "5.1.1", Diagnostic: "smtp; 550 (no such user)", Agent: "smtp[1]"}},
		{Rcpt: 3, Status: report.Deferred, Text: "451 busy", Notary: tmpNotary},
		{Rcpt: 4, Status: report.DeferAll, Text: "connection refused"},
		{Rcpt: 5, Status: report.RetryAt, Text: "greeting 421"},
		{Rcpt: 7, Status: report.Error, Text: "rejected"},
		{Rcpt: 8, Status: report.OK, Text: "fine too"},
	}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		if len(d.Rcpts) != len(m.rcpts) {
			t.Errorf("locked %v, want all %d", d.Rcpts, len(m.rcpts))
		}
		return results
	})
	c.expect("#hungry")
	c.send("777\tdest.test\n")
	got := map[int64]report.Line{}
	for range m.rcpts {
		l, err := report.Parse(c.next())
		if err != nil {
			t.Fatal(err)
		}
		if l.Inum != 777 {
			t.Errorf("inum %d, want 777", l.Inum)
		}
		got[l.Offset] = l
	}
	c.expect("#hungry")
	c.end()

	withAgent := tmpNotary
	withAgent.Agent = "tst[4242]"
	want := []struct {
		st     report.Status
		mark   byte
		notary report.Notary
		text   string
		retry  string
	}{
		{report.OK3, '+', report.Notary{}, "fine", ""},
		{report.OK2, '+', report.Notary{}, "relayed\rwithout DSN", ""},
		{report.Error2, '-', report.Notary{}, "550 no such user", ""},
		{report.Deferred, ' ', withAgent, "451 busy", ""},
		{report.DeferAll, ' ', report.Notary{}, "connection refused", ""},
		{report.RetryAt, ' ', report.Notary{}, "greeting 421", "+60"},
		{report.Deferred, ' ', report.Notary{}, "address was left locked", ""},
		{report.Error, '-', report.Notary{}, "rejected", ""},
		{report.OK, '+', report.Notary{}, "fine too", ""},
	}
	wantFile := f.data
	for i, w := range want {
		l, ok := got[f.offs[i]]
		if !ok {
			t.Errorf("rcpt %d: no report for offset %d", i, f.offs[i])
			continue
		}
		if l.Status != w.st || l.Notary != w.notary || l.Text != w.text || l.Retry != w.retry {
			t.Errorf("rcpt %d: report %+v, want %+v", i, l, w)
		}
		wantFile = patch(wantFile, f.offs[i]+1, string(w.mark)+"      ")
	}
	// ok2 and error2 promise a d line (zmailer-ta-observed.md O17).
	wantFile = fmt.Appendf(wantFile, "d %d:%d:%d::%d\tok2@dest.test\x01delivered\x012.0.0\x01\x01\x01tst[4242]\trelayed\rwithout DSN\n",
		f.offs[1], f.header, f.noffs[1], testNow.Unix())
	wantFile = fmt.Appendf(wantFile, "d %d:%d:-1::%d\t%s\t550 no such user\n",
		f.offs[2], f.header, testNow.Unix(), results[2].Notary.String())
	if after := read(t, dir, "777"); !bytes.Equal(after, wantFile) {
		t.Errorf("file after:\n%s\nwant\n%s", after, wantFile)
	}
}

func TestResync(t *testing.T) {
	done := "+" + strings.Repeat(" ", 10)
	tests := []struct {
		name  string
		rcpts []rcptLine
		job   string // %s is the file name
		agent Agent
	}{
		{"nothing pending", []rcptLine{{lead: done, quad: "smtp dest.test a@dest.test 0"}}, "%s\tdest.test", Agent{Channel: "smtp"}},
		{"wrong host", []rcptLine{pending("smtp dest.test a@dest.test 0")}, "%s\tother.test", Agent{Channel: "smtp"}},
		{"wrong channel", []rcptLine{pending("smtp dest.test a@dest.test 0")}, "%s\tdest.test", Agent{Channel: "smtpx"}},
		{"channel case differs", []rcptLine{pending("smtp dest.test a@dest.test 0")}, "%s\tdest.test", Agent{Channel: "SMTP"}},
		{"wrong argv host", []rcptLine{pending("smtp dest.test a@dest.test 0")}, "%s", Agent{Channel: "smtp", Host: "other.test"}},
		{"locked by a dead pid", []rcptLine{{lead: "~999999    ", quad: "smtp dest.test a@dest.test 0"}}, "%s\tdest.test", Agent{Channel: "smtp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := spool(t)
			f := msg{name: "10002815", rcpts: tt.rcpts}.build()
			put(t, dir, "10002815", f.data, true)
			a := tt.agent
			a.Dir = dir
			c := serve(t, &a, func(d *Delivery) []Result {
				t.Errorf("deliver called with %v", d.Rcpts)
				return nil
			})
			c.expect("#hungry")
			c.send(fmt.Sprintf(tt.job, "10002815") + "\n")
			c.expect("#resync 10002815", "#hungry")
			c.end()
			if after := read(t, dir, "10002815"); !bytes.Equal(after, f.data) {
				t.Errorf("file changed:\n%s", after)
			}
		})
	}
	t.Run("missing control file", func(t *testing.T) {
		c := serve(t, &Agent{Channel: "smtp", Dir: spool(t)}, nil)
		c.expect("#hungry")
		c.send("99999999\tdest.test\n")
		if l := c.next(); !strings.HasPrefix(l, "# tst: ") {
			t.Errorf("got %q, want a # comment about the file", l)
		}
		c.expect("#resync 99999999", "#hungry")
		c.end()
	})
}

// TestHosts checks which host a job selects: the job line's, without case,
// else the agent's own (host-bound), else any.
func TestHosts(t *testing.T) {
	tests := []struct {
		name, job, host string
		want            []int
	}{
		{"job host in upper case", "5\tDEST.TEST", "", []int{0, 2}},
		{"job host wins over argv", "5\tother.test", "dest.test", []int{1}},
		{"host-bound", "5", "other.test", []int{1}},
		{"no host anywhere matches all", "5", "", []int{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := spool(t)
			f := msg{name: "5", rcpts: []rcptLine{
				pending("smtp dest.test a@dest.test 0"),
				pending("smtp other.test b@other.test 0"),
				pending("smtp Dest.Test c@dest.test 0"),
			}}.build()
			put(t, dir, "5", f.data, true)
			var got []int
			c := serve(t, &Agent{Channel: "smtp", Host: tt.host, Dir: dir}, func(d *Delivery) []Result {
				got = d.Rcpts
				var res []Result
				for _, i := range d.Rcpts {
					res = append(res, Result{Rcpt: i, Status: report.OK3})
				}
				return res
			})
			c.expect("#hungry")
			c.send(tt.job + "\n")
			for _, i := range tt.want {
				c.expect(fmt.Sprintf("5/%d\t\tok3 ", f.offs[i]))
			}
			c.expect("#hungry")
			c.end()
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("delivered %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUnknownFormat(t *testing.T) {
	dir := spool(t)
	f := msg{name: "10002979", format: "0x00000017", rcpts: []rcptLine{pending("smtp dest.test ok25@dest.test 0")}}.build()
	put(t, dir, "10002979", f.data, true)
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, nil)
	c.expect("#hungry")
	c.send("10002979\tdest.test\n")
	if l := c.next(); !strings.HasPrefix(l, "# tst: unsupported format flags") {
		t.Errorf("got %q, want the unsupported format comment", l)
	}
	c.expect("#resync 10002979")
	if err := c.finish(); !errors.Is(err, ErrUnsupportedFormat) || !errors.Is(err, ctlfile.ErrUnknownFormat) {
		t.Errorf("Serve = %v, want ErrUnsupportedFormat wrapping ctlfile.ErrUnknownFormat", err)
	}
	if after := read(t, dir, "10002979"); !bytes.Equal(after, f.data) {
		t.Errorf("file changed:\n%s", after)
	}
}

func TestPartialLineAtEOF(t *testing.T) {
	dir := spool(t)
	put(t, dir, "10002561", []byte(a1), true)
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		t.Error("deliver called for a partial line")
		return nil
	})
	c.expect("#hungry")
	c.send("10002561\tdest.test")
	c.in.Close()
	if err := c.finish(); err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	if after := read(t, dir, "10002561"); after[122] != ' ' {
		t.Errorf("status byte %q, want the file untouched", after[122])
	}
}

// TestOverfeed sends three jobs and #idle in one write (A12): each is
// answered by exactly one #hungry.
func TestOverfeed(t *testing.T) {
	dir := spool(t)
	names := []string{"10002609", "10002646", "10002648"}
	for _, n := range names {
		put(t, dir, n, msg{name: n, rcpts: []rcptLine{pending("smtp dest.test ok@dest.test 0")}}.build().data, true)
	}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3, Text: d.Path}}
	})
	c.expect("#hungry")
	c.send(names[0] + "\tdest.test\n" + names[1] + "\tdest.test\n" + names[2] + "\tdest.test\n#idle\n")
	for _, n := range names {
		c.expect(n+"/121\t\tok3 "+n, "#hungry")
	}
	c.expect("#hungry")
	c.end()
}

// TestMissingBody: a job whose message file is gone fails permanently,
// with the d line and #resync ZMailer's agents write (A9, O22).
func TestMissingBody(t *testing.T) {
	dir := spool(t)
	f := msg{name: "10002819", rcpts: []rcptLine{pending("smtp dest.test ok17@dest.test 0")}}.build()
	put(t, dir, "10002819", f.data, false)
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		t.Error("deliver called without a body")
		return nil
	})
	c.expect("#hungry")
	c.send("10002819\tdest.test\n")
	c.expect("10002819/121\t\terror2 " + missingBody)
	if l := c.next(); !strings.HasPrefix(l, "# tst: ") {
		t.Errorf("got %q, want a # comment about the message file", l)
	}
	c.expect("#resync 10002819", "#hungry")
	c.end()
	want := patch(f.data, 122, "-      ")
	want = fmt.Appendf(want, "d 121:%d:-1::%d\t\x01failed\x01\x01\x01\x01tst[4242]\t%s\n", f.header, testNow.Unix(), missingBody)
	if after := read(t, dir, "10002819"); !bytes.Equal(after, want) {
		t.Errorf("file after:\n%q\nwant\n%q", after, want)
	}
}

// TestReportEarly: a result reported during delivery reaches the
// scheduler before the delivery function returns, and only once.
func TestReportEarly(t *testing.T) {
	dir := spool(t)
	f := msg{name: "9", rcpts: []rcptLine{
		pending("smtp dest.test bad@dest.test 0"),
		pending("smtp dest.test ok@dest.test 0"),
	}}.build()
	put(t, dir, "9", f.data, true)
	var c *conv
	delivered := make(chan struct{})
	c = serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		defer close(delivered)
		if err := d.Report(Result{Rcpt: 0, Status: report.Error, Text: "550 at RCPT"}); err != nil {
			t.Error(err)
		}
		// Serve's goroutine: no t.Fatal here.
		select {
		case l := <-c.lines:
			if want := fmt.Sprintf("9/%d\t\terror 550 at RCPT", f.offs[0]); l != want {
				t.Errorf("during delivery got %q, want %q", l, want)
			}
		case <-time.After(wait):
			t.Error("the early report did not arrive during delivery")
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "9")); b[f.offs[0]+1] != '-' {
			t.Errorf("status byte %q after Report, want '-'", b[f.offs[0]+1])
		}
		return []Result{{Rcpt: 0, Status: report.OK3}, {Rcpt: 1, Status: report.OK3, Text: "ok"}}
	})
	c.expect("#hungry")
	c.send("9\tdest.test\n")
	// The delivery function reads its own early report; wait for it.
	select {
	case <-delivered:
	case <-time.After(wait):
		t.Fatal("delivery did not finish")
	}
	if l := c.next(); !strings.HasPrefix(l, "# tst: ignored") {
		t.Errorf("got %q, want a comment about the second result for rcpt 0", l)
	}
	c.expect(fmt.Sprintf("9/%d\t\tok3 ok", f.offs[1]), "#hungry")
	c.end()
	if b := read(t, dir, "9"); b[f.offs[0]+1] != '-' || b[f.offs[1]+1] != '+' {
		t.Errorf("marks %q %q, want - and +", b[f.offs[0]+1], b[f.offs[1]+1])
	}
}

func TestHashedPath(t *testing.T) {
	dir := spool(t)
	if err := os.MkdirAll(filepath.Join(dir, "I", "X"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "..", "queue", "I", "X"), 0o755); err != nil {
		t.Fatal(err)
	}
	put(t, dir, "I/X/10003003", msg{name: "10003003", rcpts: []rcptLine{pending("smtp dest.test a@dest.test 0")}}.build().data, false)
	if err := os.WriteFile(filepath.Join(dir, "..", "queue", "I", "X", "10003003"), []byte(testBody), 0o644); err != nil {
		t.Fatal(err)
	}
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		return []Result{{Rcpt: d.Rcpts[0], Status: report.OK3}}
	})
	c.expect("#hungry")
	c.send("I/X/10003003\tdest.test\n")
	c.expect("10003003/121\t\tok3 ", "#hungry")
	c.end()
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args          []string
		def           string
		channel, host string
		err           bool
	}{
		{args: []string{"-c", "smtp", "dest.test"}, channel: "smtp", host: "dest.test"},
		{args: []string{"-c", "local"}, channel: "local"},
		{args: nil, def: "smtp", channel: "smtp"},
		{args: nil, err: true},
		{args: []string{"-c", "smtp", "a", "b"}, err: true},
		{args: []string{"-x"}, def: "smtp", err: true},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("sink", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		a, err := ParseFlags(fs, tt.args, tt.def)
		if tt.err {
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%q: err = %v, want ErrUsage", tt.args, err)
			}
			continue
		}
		if err != nil || a.Channel != tt.channel || a.Host != tt.host || a.Name != "sink" {
			t.Errorf("%q: got %+v, %v", tt.args, a, err)
		}
	}
}

// BenchmarkServe feeds one job per iteration through the whole path:
// open, lock, open the body, mark, report. The recipients are deferred so
// the file stays pending for the next iteration. A job of one recipient is
// the drain benchmark's (each recipient at its own domain); ten shows the
// per-recipient part.
func BenchmarkServe(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run("rcpts="+strconv.Itoa(n), func(b *testing.B) { benchServe(b, n) })
	}
}

func benchServe(b *testing.B, rcpts int) {
	po := b.TempDir()
	dir := filepath.Join(po, "transport")
	for _, d := range []string{dir, filepath.Join(po, "queue")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	var rc []rcptLine
	for i := range rcpts {
		rc = append(rc, pending("smtp dest.test u"+strconv.Itoa(i)+"@dest.test 0"))
	}
	if err := os.WriteFile(filepath.Join(dir, "1"), msg{name: "1", rcpts: rc}.build().data, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(po, "queue", "1"), []byte(testBody), 0o644); err != nil {
		b.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a := &Agent{Channel: "smtp", Dir: dir, In: inR, Out: outW, Name: "bench"}
	done := make(chan error, 1)
	go func() {
		done <- a.Serve(func(d *Delivery) []Result {
			res := make([]Result, 0, len(d.Rcpts))
			for _, i := range d.Rcpts {
				res = append(res, Result{Rcpt: i, Status: report.Deferred, Text: "later"})
			}
			return res
		})
		outW.Close()
	}()
	r := bufio.NewReader(outR)
	hungry := func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if l == "#hungry\n" {
				return
			}
		}
	}
	hungry()
	b.ResetTimer()
	for range b.N {
		io.WriteString(inW, "1\tdest.test\n")
		hungry()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*len(rc))/b.Elapsed().Seconds(), "rcpts/s")
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkJobs measures Serve's cost per job alone, in this process: job
// lines from memory, reports to io.Discard, on a spool laid out as the
// scheduler's (hash directories, the working directory transport/ and Dir
// "", as an agent runs). One message of 5 recipients at 5 hosts, one job
// per host in turn; the delivery defers, so every job finds its recipient
// pending again. Besides ns/op it reports this process's CPU time per job,
// user and system.
func BenchmarkJobs(b *testing.B) {
	sp := &ctlfile.Spool{Root: b.TempDir(), Hash: 2, NoSync: true}
	if err := sp.Init(); err != nil {
		b.Fatal(err)
	}
	m := &ctlfile.Message{Sender: "bench@example.org", Header: []byte("From: bench@example.org\nSubject: bench\n"),
		Body: []byte("This is a benchmark message.\n")}
	var hosts []string
	for r := range 5 {
		host := "d" + strconv.Itoa(r) + ".test"
		hosts = append(hosts, host)
		m.Rcpts = append(m.Rcpts, ctlfile.Address{Channel: "smtp", Host: host, User: "u@" + host})
	}
	rel, err := sp.Enqueue(m)
	if err != nil {
		b.Fatal(err)
	}
	var in bytes.Buffer
	for i := range b.N {
		in.WriteString(rel + "\t" + hosts[i%len(hosts)] + "\n")
	}
	b.Chdir(sp.TransportDir())
	a := &Agent{Channel: "smtp", In: &in, Out: io.Discard, Name: "bench"}
	deliver := func(d *Delivery) []Result {
		res := make([]Result, 0, len(d.Rcpts))
		for _, i := range d.Rcpts {
			res = append(res, Result{Rcpt: i, Status: report.Deferred, Text: "later"})
		}
		return res
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	if err := a.Serve(deliver); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	n := float64(b.N)
	b.ReportMetric(float64(after.Utime.Nano()-before.Utime.Nano())/1e3/n, "user-µs/job")
	b.ReportMetric(float64(after.Stime.Nano()-before.Stime.Nano())/1e3/n, "sys-µs/job")
}

// writeReport formats exactly what report.Line.String does.
func TestWriteReportIsLineString(t *testing.T) {
	lines := []report.Line{
		{Inum: 10002561, Offset: 121, Status: report.OK3, Text: "delivered"},
		{Inum: 0, Offset: 0, Status: report.OK},
		{Inum: 1 << 62, Offset: 1<<62 + 7, Status: report.Deferred, Text: "a\nb\n", Notary: report.Notary{Recipient: "a@b", Action: "delayed"}},
		{Inum: 9, Offset: 99, Status: report.RetryAt, Retry: "+60", Text: "421 later"},
		{Inum: 9, Offset: 99, Status: report.RetryAt, Retry: "1795337543", Text: ""},
		{Inum: 9, Offset: 99, Status: report.Error2, Text: strings.Repeat("x", 70<<10),
			Notary: report.Notary{Recipient: "t\tab", Action: "failed", Status: "5.0.0", Diagnostic: "smtp; 550\nno", RemoteMTA: "mx", Agent: "a[1]"}},
	}
	var out bytes.Buffer
	s := &session{w: bufio.NewWriterSize(&out, 64<<10)}
	var want strings.Builder
	for i := range lines {
		s.w.WriteString("#x\n") // the buffer is not empty
		s.writeReport(&lines[i])
		want.WriteString("#x\n" + lines[i].String() + "\n")
	}
	s.w.Flush()
	if out.String() != want.String() {
		t.Errorf("writeReport wrote\n%.300q\nwant\n%.300q", out.String(), want.String())
	}
}

// Job paths that are not plain hashed names are opened by their whole
// path, as before the directory descriptors; a queue directory that
// appears after Serve started is used; a body named by its i line, not by
// the control file's name, is found; many recipients fit.
func TestJobPathsAndDirectories(t *testing.T) {
	po := t.TempDir()
	dir := filepath.Join(po, "transport")
	if err := os.MkdirAll(filepath.Join(dir, "I", "X"), 0o755); err != nil {
		t.Fatal(err)
	}
	var many []rcptLine
	for i := range 20 {
		many = append(many, pending("smtp dest.test u"+strconv.Itoa(i)+"@dest.test 0"))
	}
	put(t, dir, "I/X/10003003", msg{name: "10003003", rcpts: many}.build().data, false)
	// A file named 10003004 whose i line says 10003005: its body is
	// queue/I/X/10003005.
	put(t, dir, "I/X/10003004", msg{name: "10003005", rcpts: []rcptLine{pending("smtp dest.test a@dest.test 0")}}.build().data, false)
	var bodies []string
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		b, err := io.ReadAll(d.Body())
		if err != nil {
			t.Error(err)
		}
		if !strings.HasPrefix(string(b), "@") { // not a control file
			b = b[:min(len(b), 8)]
		} else {
			b = []byte("ctl")
		}
		bodies = append(bodies, d.Body().Name()+" "+string(b))
		var res []Result
		for _, i := range d.Rcpts {
			res = append(res, Result{Rcpt: i, Status: report.Deferred, Text: "later"})
		}
		return res
	})
	c.expect("#hungry")
	// No queue directory yet: the message file is missing, error2.
	c.send("I/X/10003004\tdest.test\n")
	c.expect("10003004/121\t\terror2 " + missingBody)
	if l := c.next(); !strings.Contains(l, filepath.Join(po, "queue", "I", "X", "10003005")) {
		t.Errorf("got %q, want a comment naming the message file", l)
	}
	c.expect("#resync I/X/10003004", "#hungry")

	q := filepath.Join(po, "queue", "I", "X")
	if err := os.MkdirAll(q, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"10003003", "10003005"} {
		if err := os.WriteFile(filepath.Join(q, id), []byte(id), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The file's recipient is failed now; mark it pending again.
	put(t, dir, "I/X/10003004", msg{name: "10003005", rcpts: []rcptLine{pending("smtp dest.test a@dest.test 0")}}.build().data, false)
	// The last: queue/../transport/I/X/10003003 is the control file
	// itself, as it always was.
	jobs := []string{"I/X/10003004", "./I/X/10003003", "I/X/../X/10003003", "../transport/I/X/10003003"}
	for _, j := range jobs {
		c.send(j + "\tdest.test\n")
		for range c.linesFor(j) {
		}
	}
	// An absolute job path is taken relative to Dir, as it always was.
	abs := filepath.Join(dir, "I/X/10003003")
	c.send(abs + "\tdest.test\n")
	if l := c.next(); !strings.Contains(l, "not found") {
		t.Errorf("got %q, want a comment: not found", l)
	}
	c.expect("#resync "+abs, "#hungry")
	c.end()
	want := []string{
		filepath.Join(q, "10003005") + " 10003005",
		filepath.Join(q, "10003003") + " 10003003",
		filepath.Join(q, "10003003") + " 10003003",
		filepath.Join(dir, "I/X/10003003") + " ctl",
	}
	if !slices.Equal(bodies, want) {
		t.Errorf("bodies\n%q\nwant\n%q", bodies, want)
	}
}

// linesFor reads the reports of one job up to its #hungry and returns
// them; a #resync or a comment fails the test.
func (c *conv) linesFor(job string) []string {
	c.t.Helper()
	var ls []string
	for {
		l := c.next()
		if l == "#hungry" {
			return ls
		}
		if strings.HasPrefix(l, "#") {
			c.t.Errorf("job %s: %q", job, l)
			continue
		}
		ls = append(ls, l)
	}
}

// The descriptors of finished jobs are closed by the time their reports
// are out (but the last message's, kept for its next job: here none, its
// job ends in #resync), and Serve leaves none open.
func TestServeClosesFiles(t *testing.T) {
	dir := spool(t)
	for i := range 3 {
		name := strconv.Itoa(10004000 + i)
		put(t, dir, name, msg{name: name, rcpts: []rcptLine{pending("smtp dest.test a@dest.test 0")}}.build().data, i != 2)
	}
	before := openFDs(t)
	c := serve(t, &Agent{Channel: "smtp", Dir: dir}, func(d *Delivery) []Result {
		if d.File.Inum == 10004001 {
			d.Body() // an *os.File, closed as such
		}
		return []Result{{Rcpt: d.Rcpts[0], Status: report.Deferred, Text: "later"}}
	})
	c.expect("#hungry")
	// The pipes of serve, the reader goroutine, the two directories.
	during := openFDs(t)
	for round := range 3 {
		// Several jobs in one write: their reports go out in one flush.
		c.send("10004000\tdest.test\n10004001\tdest.test\n10004002\tdest.test\n")
		for _, j := range []string{"10004000", "10004001"} {
			c.linesFor(j)
		}
		for l := c.next(); l != "#hungry"; l = c.next() {
		}
		if n := openFDs(t); n != during {
			t.Errorf("round %d: %d descriptors open, want %d", round, n, during)
		}
	}
	c.end()
	if n := openFDs(t); n > before {
		t.Errorf("%d descriptors open after Serve, %d before", n, before)
	}
}

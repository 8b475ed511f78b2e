package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"net/textproto"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/ctlfile"
	"zsched/report"
)

type completionWriter struct{ t *testing.T }

func (w completionWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func completionLog(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "zsched", Output: completionWriter{t}, Level: hclog.Debug})
}

// completionDaemon is a daemon with only what completion needs: a spool and a
// clock (no core, no sockets, no agents).
func completionDaemon(t *testing.T) *Daemon {
	sp := &ctlfile.Spool{Root: t.TempDir()}
	if err := sp.Init(); err != nil {
		t.Fatal(err)
	}
	return &Daemon{log: completionLog(t), spool: sp, now: time.Now, in: newIntake(&config.Scheduler{})}
}

const origHeader = "From: someone@sender.test\nTo: a@dest.test, b@dest.test\nSubject: the original\n"

// queueFailed queues a message to a@dest.test (default NOTIFY) and
// b@dest.test (notify), and plays an agent that fails both, with the d lines
// libta writes for error2.
func queueFailed(t *testing.T, d *Daemon, notify string, action string) (rel string, f *ctlfile.File) {
	t.Helper()
	rel, err := d.spool.Enqueue(&ctlfile.Message{
		Sender: "someone@sender.test",
		Rcpts: []ctlfile.Address{
			{Channel: "smtp", Host: "dest.test", User: "a@dest.test"},
			{Channel: "smtp", Host: "dest.test", User: "b@dest.test", Notify: notify},
		},
		Header: []byte(origHeader),
		Body:   []byte("the body\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ctlfile.Open(filepath.Join(d.spool.TransportDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i, r := range h.File.Rcpts {
		if action == "failed" {
			if err := h.Mark(i, ctlfile.Failed); err != nil {
				t.Fatal(err)
			}
		}
		n := report.Notary{Recipient: r.User, Action: action, Status: "5.1.1", Diagnostic: "smtp; 550 (" + r.User + ": no such user)"}
		if action != "failed" {
			n.Status, n.Diagnostic = "4.4.1", "smtp; 421 (try later)"
		}
		if err := h.AppendDiag(ctlfile.Diag{RcptOffset: r.Offset, HeaderOffset: r.HeaderOffset, NOffset: r.NOffset,
			Time: time.Now().Unix(), Notary: n.String(), Text: "\r<<- RCPT To:<" + r.User + ">\r->> 550 no"}); err != nil {
			t.Fatal(err)
		}
	}
	return rel, h.File
}

// otherFiles returns the control files in transport/ other than skip.
func otherFiles(t *testing.T, d *Daemon, skip string) []string {
	t.Helper()
	var out []string
	if err := d.spool.Scan(func(rel string) {
		if rel != skip {
			out = append(out, rel)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// readDSN reads a queued report and returns its control file, its header
// and its per-recipient delivery-status fields.
func readDSN(t *testing.T, sp *ctlfile.Spool, rel string) (*ctlfile.File, mail.Header, []textproto.MIMEHeader) {
	t.Helper()
	f, err := sp.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(sp.TransportDir(), ctlfile.QueuePath(rel, f.ID)))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := mail.ReadMessage(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("queued DSN does not parse: %v", err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/report" {
		t.Fatalf("DSN Content-Type %q", msg.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	var status []byte
	parts := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		if p.Header.Get("Content-Type") == "message/delivery-status" {
			status = b
		}
		parts++
	}
	if parts != 3 || status == nil {
		t.Fatalf("DSN has %d parts, delivery-status %v", parts, status != nil)
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(status)))
	if _, err := tp.ReadMIMEHeader(); err != nil {
		t.Fatal(err)
	}
	var rcpts []textproto.MIMEHeader
	for {
		h, err := tp.ReadMIMEHeader()
		if len(h) > 0 {
			rcpts = append(rcpts, h)
		}
		if err != nil {
			break
		}
	}
	return f, msg.Header, rcpts
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, os.ErrNotExist)
}

func TestFinishQueuesTheDSNThenRemoves(t *testing.T) {
	d := completionDaemon(t)
	rel, f := queueFailed(t, d, "NEVER", "failed")
	d.finish(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum, Diags: true})
	if fileExists(filepath.Join(d.spool.TransportDir(), rel)) || fileExists(filepath.Join(d.spool.QueueDir(), f.ID)) {
		t.Fatal("the completed message's files are still there")
	}
	dsns := otherFiles(t, d, rel)
	if len(dsns) != 1 {
		t.Fatalf("%d files queued, want one DSN", len(dsns))
	}
	if !d.in.known[dsns[0]] {
		t.Fatal("the DSN was not handed to the scheduler's own read queue")
	}
	df, hdr, rcpts := readDSN(t, d.spool, dsns[0])
	if !df.IsBounce() || len(df.Rcpts) != 1 {
		t.Fatalf("DSN envelope: bounce %v, %d recipients", df.IsBounce(), len(df.Rcpts))
	}
	r := df.Rcpts[0]
	if r.Channel != "smtp" || r.Host != "sender.test" || r.User != "someone@sender.test" {
		t.Fatalf("DSN routed to %s/%s/%s", r.Channel, r.Host, r.User)
	}
	if len(rcpts) != 1 || rcpts[0].Get("Final-Recipient") != "rfc822; a@dest.test" || rcpts[0].Get("Action") != "failed" ||
		rcpts[0].Get("Status") != "5.1.1" || rcpts[0].Get("Diagnostic-Code") != "smtp; 550 (a@dest.test: no such user)" {
		t.Fatalf("DSN recipients %v (b asked NOTIFY=NEVER)", rcpts)
	}
	if !strings.Contains(hdr.Get("Subject"), "FAILED(1)") {
		t.Fatalf("Subject %q", hdr.Get("Subject"))
	}
}

func TestFinishAfterACrashPastTheMarks(t *testing.T) {
	d := completionDaemon(t)
	rel, f := queueFailed(t, d, "", "failed")
	var offs []int64
	for _, dg := range f.Diags {
		offs = append(offs, dg.Offset)
	}
	// The DSN went out and the marks were written, then the crash: the
	// restarted scheduler completes the file again and sends nothing.
	if err := d.spool.MarkDiags(rel, offs); err != nil {
		t.Fatal(err)
	}
	d.finish(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum})
	if n := len(otherFiles(t, d, rel)); n != 0 || fileExists(filepath.Join(d.spool.TransportDir(), rel)) {
		t.Fatalf("%d DSNs after the marks; original still there: %v", n, fileExists(filepath.Join(d.spool.TransportDir(), rel)))
	}
}

func TestKilledMessageSendsNoDSN(t *testing.T) {
	d := completionDaemon(t)
	rel, f := queueFailed(t, d, "", "failed")
	d.finish(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum, Killed: true})
	if n := len(otherFiles(t, d, rel)); n != 0 || fileExists(filepath.Join(d.spool.TransportDir(), rel)) {
		t.Fatalf("a killed message: %d DSNs, files left %v", n, fileExists(filepath.Join(d.spool.TransportDir(), rel)))
	}
}

// TestDelayWarningKeepsTheMessage: a DSN request (delay warning) queues the
// report and marks the d lines, and leaves the message queued; a second
// request finds nothing to report.
func TestDelayWarningKeepsTheMessage(t *testing.T) {
	d := completionDaemon(t)
	rel, f := queueFailed(t, d, "DELAY,FAILURE", "delayed")
	d.notice(core.DSN{Path: rel, ID: f.ID, Inum: f.Inum})
	dsns := otherFiles(t, d, rel)
	if len(dsns) != 1 || !fileExists(filepath.Join(d.spool.TransportDir(), rel)) {
		t.Fatalf("%d DSNs; message still queued: %v", len(dsns), fileExists(filepath.Join(d.spool.TransportDir(), rel)))
	}
	_, _, rcpts := readDSN(t, d.spool, dsns[0])
	if len(rcpts) != 1 || rcpts[0].Get("Final-Recipient") != "rfc822; b@dest.test" || rcpts[0].Get("Action") != "delayed" {
		t.Fatalf("warning reports %v, want b (NOTIFY=DELAY) delayed", rcpts)
	}
	again, err := d.spool.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	for _, dg := range again.Diags {
		if dg.Status != ctlfile.Done {
			t.Fatalf("d line at %d not marked reported", dg.Offset)
		}
	}
	if !warned(again) {
		t.Fatal("the file does not show its warning: a restart would send it again")
	}
	d.notice(core.DSN{Path: rel, ID: f.ID, Inum: f.Inum})
	if n := len(otherFiles(t, d, rel)); n != 1 {
		t.Fatalf("%d DSNs after a second request, want still 1", n)
	}
}

func TestRoute(t *testing.T) {
	for addr, want := range map[string]string{
		"someone@Sender.Test": "smtp/sender.test/someone@Sender.Test",
		"postmaster":          "local/localhost/postmaster",
		"odd@":                "local/localhost/odd@",
	} {
		a := route(addr)
		if got := a.Channel + "/" + a.Host + "/" + a.User; got != want {
			t.Errorf("route(%q) = %s, want %s", addr, got, want)
		}
	}
}

// TestExpiryEndToEnd runs the daemon with real agents: a destination whose
// agent refuses every connection (testagents/deferall), expiry 3s: the
// recipient expires, the DSN appears in the queue for the sender (routed to
// a queueonly clause, so it stays there), it parses and says why, and the
// original message is gone.
func TestExpiryEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real agents")
	}
	deferall := bins.AgentsFor(t)["deferall"]
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "scheduler.toml"), []byte(fmt.Sprintf(`
[scheduler]
postoffice = %q
scaninterval = "1s"
shutdown_timeout = "5s"

[[clause]]
select = "smtp/sender.test"
command = "sink"
queueonly = true

[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp"]
interval = "1s"
retries = [1]
expiry = "3s"
expiry2 = "1s"
`, filepath.Join(dir, "po"), deferall)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, completionLog(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := d.spool.Enqueue(&ctlfile.Message{
		Sender: "someone@sender.test",
		Rcpts:  []ctlfile.Address{{Channel: "smtp", Host: "down.test", User: "u@down.test"}},
		Header: []byte(origHeader), Body: []byte("the body\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- d.Run(ctx) }()
	// Run ends every agent it started before it returns.
	var runErr error
	running := true
	stop := func() {
		if running {
			running = false
			cancel()
			runErr = <-done
		}
	}
	t.Cleanup(stop)
	// Wait for the observable end: the original gone, one other file.
	var dsns []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		gone := !fileExists(filepath.Join(d.spool.TransportDir(), rel))
		dsns = otherFiles(t, d, rel)
		if gone && len(dsns) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: original gone %v, %d other files", gone, len(dsns))
		}
		time.Sleep(50 * time.Millisecond) // polling the spool: the scheduler is a separate loop
	}
	took := time.Since(start)
	stop()
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	if len(dsns) != 1 {
		t.Fatalf("%d DSNs, want 1", len(dsns))
	}
	if fileExists(filepath.Join(d.spool.QueueDir(), path.Base(rel))) {
		t.Fatal("the original body is still queued")
	}
	df, _, rcpts := readDSN(t, d.spool, dsns[0])
	if !df.IsBounce() || df.Rcpts[0].User != "someone@sender.test" || df.Rcpts[0].Status != ctlfile.Pending {
		t.Fatalf("DSN envelope: bounce %v, recipient %+v", df.IsBounce(), df.Rcpts[0])
	}
	if len(rcpts) != 1 {
		t.Fatalf("DSN reports %d recipients", len(rcpts))
	}
	r := rcpts[0]
	if r.Get("Final-Recipient") != "rfc822; u@down.test" || r.Get("Action") != "failed" ||
		r.Get("Status") != "4.4.1 (TCP/IP-connection failure)" ||
		r.Get("Diagnostic-Code") != "smtp; 500 (connect to down.test: Connection refused)" {
		t.Fatalf("DSN fields %v", r)
	}
	t.Logf("expiry 3s: DSN queued %s after start", took.Round(10*time.Millisecond))
}

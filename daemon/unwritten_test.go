package daemon

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"zsched/core"
	"zsched/ctlfile"
	"zsched/report"
)

// queueMarked queues a message to a@dest.test (with notify) whose one
// recipient an agent has marked final with mark.
func queueMarked(t *testing.T, d *Daemon, notify string, mark ctlfile.Status) (string, *ctlfile.File) {
	t.Helper()
	rel, err := d.spool.Enqueue(&ctlfile.Message{
		Sender: "someone@sender.test",
		Rcpts:  []ctlfile.Address{{Channel: "smtp", Host: "dest.test", User: "a@dest.test", Notify: notify}},
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
	if err := h.Mark(0, mark); err != nil {
		t.Fatal(err)
	}
	return rel, h.File
}

// TestUnwrittenDiagIsRetriedBeforeCompletion: the scheduler's own d line
// (for an agent's plain `error`) fails to append; the message must not
// complete without it, and once the disk recovers its DSN names the
// recipient.
func TestUnwrittenDiagIsRetriedBeforeCompletion(t *testing.T) {
	d := completionDaemon(t)
	// The agent reported `error` and marked the line: the d line is ours.
	rel, f := queueMarked(t, d, "", ctlfile.Failed)
	full := fmt.Errorf("write: %w", syscall.ENOSPC)
	d.appendDiags = func(string, []ctlfile.Diag) error { return full }
	d.diags([]core.Diag{{Path: rel, Inum: f.Inum, Offset: f.Rcpts[0].Offset,
		Notary: report.Notary{Recipient: "a@dest.test", Action: "failed", Status: "5.1.1", Diagnostic: "smtp; 550 no such user"},
		Text:   "550 no such user"}})

	complete := core.Complete{Path: rel, ID: f.ID, Inum: f.Inum, Diags: true}
	d.finish(complete)
	if !fileExists(filepath.Join(d.spool.TransportDir(), rel)) {
		t.Fatal("the message completed while its d line was unwritten")
	}
	if dsns := otherFiles(t, d, rel); len(dsns) != 0 {
		t.Fatalf("a DSN was queued without the unwritten d line: %v", dsns)
	}

	d.appendDiags = nil // the disk recovered
	d.finish(complete)
	if fileExists(filepath.Join(d.spool.TransportDir(), rel)) {
		t.Fatal("the message did not complete once its d line could be written")
	}
	dsns := otherFiles(t, d, rel)
	if len(dsns) != 1 {
		t.Fatalf("%d files queued, want one DSN", len(dsns))
	}
	_, _, rcpts := readDSN(t, d.spool, dsns[0])
	if len(rcpts) != 1 || rcpts[0].Get("Final-Recipient") != "rfc822; a@dest.test" || rcpts[0].Get("Status") != "5.1.1" {
		t.Fatalf("DSN recipients %v", rcpts)
	}
	if _, ok := d.unwritten[rel]; ok {
		t.Fatal("the retried d lines are still kept")
	}
}

// TestUnwrittenDiagAtStop: at a stop the kept d lines get one more try;
// one that still fails is logged with what it held (they live in memory
// only), and one that now succeeds lands in the file and is not logged.
func TestUnwrittenDiagAtStop(t *testing.T) {
	var logged bytes.Buffer
	d := completionDaemon(t)
	d.log = hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Error})
	var rels []string
	for _, user := range []string{"a@dest.test", "b@dest.test"} {
		rel, err := d.spool.Enqueue(&ctlfile.Message{
			Rcpts:  []ctlfile.Address{{Channel: "smtp", Host: "dest.test", User: user}},
			Header: []byte(origHeader),
		})
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
		f, err := d.spool.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		d.appendDiags = func(string, []ctlfile.Diag) error { return fmt.Errorf("write: %w", syscall.ENOSPC) }
		d.diags([]core.Diag{{Path: rel, Inum: f.Inum, Offset: f.Rcpts[0].Offset,
			Notary: report.Notary{Recipient: user, Action: "failed", Status: "5.1.1"}, Text: "550 no such user " + user}})
	}
	// The disk has room again for the first file only.
	d.appendDiags = func(rel string, ds []ctlfile.Diag) error {
		if rel == rels[0] {
			return d.spool.AppendDiags(rel, ds)
		}
		return fmt.Errorf("write: %w", syscall.EIO)
	}
	d.lastUnwritten()
	f, err := d.spool.Read(rels[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Diags) != 1 {
		t.Errorf("%s has %d d lines after the stop, want the kept one", rels[0], len(f.Diags))
	}
	out := logged.String()
	if strings.Contains(out, "no such user a@dest.test") || !strings.Contains(out, "no such user b@dest.test") ||
		!strings.Contains(out, "d line lost at stop") {
		t.Errorf("log at stop:\n%s\nwant only b's d line reported lost", out)
	}
}

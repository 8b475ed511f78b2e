package daemon

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zsched/admission"
	"zsched/ctlfile"
)

// TestBodyAfterControlFileWaits: a control file read before its body is in
// queue/ (a writer that renames the control file first) is not moved to
// bad/: it waits, WHY says why, and it is read into core once its body
// comes. Quarantined at once, the body that came a moment later was
// debris to the sweep, removed an hour on: the message lost.
func TestBodyAfterControlFileWaits(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 0, 1, false)
	t.Cleanup(d.close)
	rel, err := d.spool.Enqueue(&ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: late\n"), Body: []byte("b\n"),
		Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "a.test", User: "u@a.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	body := filepath.Join(d.spool.QueueDir(), filepath.FromSlash(rel))
	aside := filepath.Join(t.TempDir(), "body")
	if err := os.Rename(body, aside); err != nil {
		t.Fatal(err)
	}

	d.enqueueRead(rel)
	step(d)
	if _, err := os.Lstat(filepath.Join(d.spool.TransportDir(), filepath.FromSlash(rel))); err != nil {
		t.Fatalf("the control file left transport/ while its body was on its way: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(d.spool.BadDir(), path.Base(rel))); err == nil {
		t.Fatal("the control file was quarantined while its body was on its way")
	}
	lines, err := d.why(d.now(), path.Base(rel))
	if err != nil || !strings.Contains(strings.Join(lines, "\n"), "body missing") {
		t.Fatalf("WHY of the waiting message: %q, %v; want its missing body", lines, err)
	}

	if err := os.Rename(aside, body); err != nil {
		t.Fatal(err)
	}
	d.intakeTick(d.now().Add(admission.ReadRetryMin + time.Second))
	step(d)
	if d.core.Messages() != 1 {
		t.Fatalf("%d messages in core once the body came, want 1", d.core.Messages())
	}
}

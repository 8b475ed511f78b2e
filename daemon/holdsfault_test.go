package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHoldSaveRetried: a message hold the holds file could not take (a
// full disk, EIO) holds the message in core, and reaches the file once it
// can be written, without another change: a restart before then would send
// held mail, or hold released mail again.
func TestHoldSaveRetried(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	d.loadHolds()
	d.startScan(d.now())
	for range 4 {
		step(d)
	}
	if d.core.Messages() != 1 {
		t.Fatalf("%d messages in core, want 1", d.core.Messages())
	}
	qid := ""
	for _, id := range d.in.ids {
		qid = id.qid
	}
	lk, err := d.core.Find(qid)
	if err != nil || !lk.InCore {
		t.Fatalf("find %q: %+v, %v", qid, lk, err)
	}

	path := d.holds.path
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d.holds.path = filepath.Join(blocker, "holds") // its directory is a file: every save fails
	if _, err := d.act(d.now(), opHold, target{rel: lk.Path, qid: lk.QID, inum: lk.Inum}, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.commitHolds(); err == nil {
		t.Fatal("the hold was saved to a file that cannot be written")
	}
	if mv, ok := d.core.MessageOf(d.now(), lk.Inum); !ok || !mv.Held {
		t.Fatal("the message is not held in core")
	}

	d.holds.path = path // the disk recovered
	later := d.now().Add(holdsRetry)
	d.now = func() time.Time { return later }
	d.commitHoldsDue() // a turn of the loop
	data, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(data), "msg "+qid+" ") {
		t.Fatalf("holds file after the disk recovered: %q, %v; want the hold of %s", data, err, qid)
	}
}

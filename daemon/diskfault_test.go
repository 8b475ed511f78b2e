package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/core"
	"zsched/ctlfile"
	"zsched/internal/tinyfs"
	"zsched/report"
	"zsched/statefile"
	"zsched/thread"
)

// TestStateSaveOnFullDisk: saving learned destination state on a full
// filesystem fails with the reason, leaves the previous file whole and no
// temporary file behind, and the same state is saved once there is space
// (the failed save is not taken as done).
func TestStateSaveOnFullDisk(t *testing.T) {
	dir := tinyfs.Mount(t, 128<<10)
	t0 := time.Unix(1_700_000_000, 0)
	dest := func(n int) []core.Destination {
		var ds []core.Destination
		for i := 0; i < n; i++ {
			ds = append(ds, core.Destination{Channel: "smtp", Host: fmt.Sprintf("h%d.example", i),
				Window: thread.WindowState{Concurrency: 5}, Updated: t0})
		}
		return ds
	}
	state := filepath.Join(dir, "state")
	sf := newStateFile(state)
	if err := sf.save(dest(1)); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(sf.path)
	if err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	big := dest(2000) // far more than the few bytes left
	err = sf.save(big)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("save on a full disk: %v, want ENOSPC", err)
	}
	t.Logf("save on a full disk: %v", err)
	if now, _ := os.ReadFile(sf.path); !bytes.Equal(now, old) {
		t.Fatal("the state file changed after a failed save")
	}
	ents, _ := os.ReadDir(state)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".destinations-") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}

	os.Remove(filler)
	if err := sf.save(big); err != nil {
		t.Fatalf("save after freeing space: %v", err)
	}
	got, err := statefile.Parse(mustRead(t, sf.path))
	if err != nil || len(got) != len(big) {
		t.Fatalf("state after the retry: %d destinations (%v), want %d", len(got), err, len(big))
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestUnwrittenDiagRetriedByScan: the d line the scheduler owes (an agent's
// `ok` under NOTIFY=SUCCESS) cannot be appended; the message is found again
// by a scan, whose file shows no pending d line. Writing the kept line
// then must still send its DSN: the file read before it was written does
// not say a report is owed.
func TestUnwrittenDiagRetriedByScan(t *testing.T) {
	d := completionDaemon(t)
	rel, f := queueMarked(t, d, "SUCCESS", ctlfile.Done)
	d.appendDiags = func(string, []ctlfile.Diag) error { return fmt.Errorf("write: %w", syscall.ENOSPC) }
	d.diags([]core.Diag{{Path: rel, Inum: f.Inum, Offset: f.Rcpts[0].Offset,
		Notary: report.Notary{Recipient: "a@dest.test", Action: "delivered", Status: "2.0.0", Diagnostic: "smtp; 250 ok"},
		Text:   "250 ok"}})
	d.finish(core.Complete{Path: rel, ID: f.ID, Inum: f.Inum, Diags: true})
	if !fileExists(filepath.Join(d.spool.TransportDir(), rel)) {
		t.Fatal("the message completed while its d line was unwritten")
	}

	d.appendDiags = nil // the disk recovered; the scan reads the file again
	again, err := d.spool.Read(rel)
	if err != nil {
		t.Fatal(err)
	}
	d.admit(d.now(), fetched{rel: rel, f: again})
	if fileExists(filepath.Join(d.spool.TransportDir(), rel)) {
		t.Fatal("the message did not complete once its d line could be written")
	}
	dsns := otherFiles(t, d, rel)
	if len(dsns) != 1 {
		t.Fatalf("%d files queued, want one DSN: the kept d line's report was lost", len(dsns))
	}
	if _, _, rcpts := readDSN(t, d.spool, dsns[0]); len(rcpts) != 1 || rcpts[0].Get("Final-Recipient") != "rfc822; a@dest.test" {
		t.Fatalf("DSN recipients %v", rcpts)
	}
}

// TestRetryJournalOnFullDisk: lines the retry journal cannot append (a
// full disk) are kept and appended once there is space, none cut in half,
// and the failure is logged once, not at every flush.
func TestRetryJournalOnFullDisk(t *testing.T) {
	dir := tinyfs.Mount(t, 64<<10)
	var logged bytes.Buffer
	j := &journal{path: filepath.Join(dir, "retry"),
		log: hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Info})}
	if err := j.rewrite(); err != nil {
		t.Fatal(err)
	}
	next := time.UnixMilli(1_700_000_000_000)
	defer1 := func(qid string) {
		j.deferred(qid, core.Outcome{Offset: 100, Attempts: 2, Retry: 1, Next: next})
	}
	defer1("1.before")
	j.write()

	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 512)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	// More than the bytes left: the append fails, some of it written.
	var want []string
	for i := range 200 {
		qid := fmt.Sprintf("%d.full", 1000+i)
		want = append(want, qid)
		defer1(qid)
	}
	j.write()
	j.write() // a flush with nothing new: the kept lines fail again
	j.forget('X', "1.before")
	j.write()

	os.Remove(filler)
	j.write()
	m := make(map[string]map[int64]retryRec)
	data := mustRead(t, j.path)
	if bad := replayJournal(bytes.NewReader(data), m); bad != 0 {
		t.Errorf("%d lines of the journal unreadable (cut by the full disk)", bad)
	}
	for _, qid := range want {
		if r, ok := m[qid][100]; !ok || r.attempts != 2 || !r.next.Equal(next) {
			t.Fatalf("recipient of %s deferred while the disk was full: %+v (%v), want its state kept", qid, r, ok)
		}
	}
	if _, ok := m["1.before"]; ok {
		t.Error("X of 1.before, recorded while the disk was full, lost")
	}
	if n := strings.Count(logged.String(), "cannot append to the retry journal"); n != 1 {
		t.Errorf("the failure logged %d times, want once:\n%s", n, logged.String())
	}
}

package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/core"
	"zsched/ctlfile"
)

// TestJournalReplay: the last record of a recipient wins; X (gone) and F
// (flushed) forget a message; a line cut by a crash is skipped, not fatal.
func TestJournalReplay(t *testing.T) {
	in := journalHeader + `
D 1.a 100 1 0 1000
D 1.a 100 2 1 2000
D 1.a 200 1 0 1500
D 2.b 100 5 4 9000
X 2.b
D 3.c 100 1 0 3000
F 3.c
D 4.d 100 3 2 4000
D 4.d 2
`
	m := make(map[string]map[int64]retryRec)
	if bad := replayJournal(strings.NewReader(in), m); bad != 1 {
		t.Fatalf("%d bad lines, want 1", bad)
	}
	want := map[string]map[int64]retryRec{
		"1.a": {100: {attempts: 2, retry: 1, next: time.UnixMilli(2000)}, 200: {attempts: 1, next: time.UnixMilli(1500)}},
		"4.d": {100: {attempts: 3, retry: 2, next: time.UnixMilli(4000)}},
	}
	if len(m) != len(want) {
		t.Fatalf("replayed %v, want %v", m, want)
	}
	for q, rs := range want {
		for off, r := range rs {
			if got := m[q][off]; got.attempts != r.attempts || got.retry != r.retry || !got.next.Equal(r.next) {
				t.Fatalf("%s@%d: %+v, want %+v", q, off, got, r)
			}
		}
	}
	// What is written is read back the same.
	again := make(map[string]map[int64]retryRec)
	replayJournal(strings.NewReader(string(formatJournal(m))), again)
	if len(again) != 2 || again["1.a"][100] != m["1.a"][100] {
		t.Fatalf("format/replay: %v", again)
	}
}

// TestSpreadAt: overdue recipients are spread over the window, the same
// message always at the same place.
func TestSpreadAt(t *testing.T) {
	start := time.Unix(1e9, 0)
	w := time.Hour
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		q := "1234." + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		at := spreadAt(q, start, w)
		if at.Before(start) || !at.Before(start.Add(w)) {
			t.Fatalf("%s at %v, outside [start, start+%v)", q, at, w)
		}
		if !spreadAt(q, start, w).Equal(at) {
			t.Fatal("not deterministic")
		}
		seen[at.Sub(start)/time.Minute] = true
	}
	if len(seen) < 50 {
		t.Fatalf("1000 messages over only %d minutes of the hour", len(seen))
	}
}

// TestHoldsFile: holds written and read back; a damaged line is skipped,
// the others kept.
func TestHoldsFile(t *testing.T) {
	h := newHoldStore(t.TempDir())
	set := time.Unix(1e9, 0).UTC()
	h.dests[core.Dest{Channel: "smtp", Host: "*.example"}] = set
	h.msgs["12345.abc"] = set
	data := string(h.format()) + "garbage line\n"
	back := newHoldStore(t.TempDir())
	if errs := back.parse([]byte(data)); len(errs) != 1 {
		t.Fatalf("errors %v, want one for the garbage line", errs)
	}
	if !back.dests[core.Dest{Channel: "smtp", Host: "*.example"}].Equal(set) || !back.msgs["12345.abc"].Equal(set) {
		t.Fatalf("read back %+v %+v", back.dests, back.msgs)
	}
	if errs := back.parse([]byte("something else\n")); len(errs) != 1 {
		t.Fatal("a foreign file was read")
	}
}

// TestRetryAfterClockStepBack: a deferred recipient's kept retry time is
// wall-clock time; when the clock is an hour behind the time the journal
// was written at the next start (it was stepped back), the recipient
// waits what it was asked to wait, from now, not that plus the hour.
func TestRetryAfterClockStepBack(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 1, 1, false)
	t.Cleanup(d.close)
	ents, err := os.ReadDir(d.spool.TransportDir())
	if err != nil {
		t.Fatal(err)
	}
	var f *ctlfile.File
	for _, e := range ents {
		if ctlfile.IsControlPath(e.Name()) {
			if f, _, err = d.spool.Peek(e.Name()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if f == nil {
		t.Fatal("no message queued")
	}
	// The journal a run wrote at t0, its clock right: due again in 20 s.
	t0 := time.Now().Truncate(time.Millisecond)
	d.retry.close()
	journal := fmt.Sprintf("%s\n%s%d\nD %s %d 2 1 %d\n", journalHeader, stampPrefix, t0.UnixMilli(),
		f.QueueID(), f.Rcpts[0].Offset, t0.Add(20*time.Second).UnixMilli())
	if err := os.WriteFile(filepath.Join(d.spool.StateDir(), "retry"), []byte(journal), 0o644); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(-time.Hour) // the clock stepped back an hour; the scheduler starts again
	d.now = func() time.Time { return now }
	d.loadJournal()
	d.startScan(now)
	for range 4 {
		step(d)
	}
	mv, err := d.core.Message(now, f.QueueID())
	if err != nil || len(mv.Vertices) != 1 {
		t.Fatalf("message in core: %+v, %v", mv, err)
	}
	v := mv.Vertices[0]
	if v.Attempts != 2 {
		t.Errorf("attempts %d, want the 2 kept", v.Attempts)
	}
	if until := v.Why.Until.Sub(now); until <= 0 || until > 20*time.Second {
		t.Fatalf("due again in %v (%s until %v), want within the 20 s the journal asked for", until, v.Why.Reason, v.Why.Until)
	}
	// The rewrite at start keeps the time it was written.
	m := make(map[string]map[int64]retryRec)
	replayJournal(strings.NewReader(string(mustRead(t, filepath.Join(d.spool.StateDir(), "retry")))), m)
	if r := m[f.QueueID()][f.Rcpts[0].Offset]; !r.at.Equal(t0) {
		t.Errorf("rewritten record written at %v, want %v", r.at, t0)
	}
}

// TestJournalStampsWrites: each write says when it was written, and a
// record replayed takes that time.
func TestJournalStampsWrites(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_123)
	j := &journal{path: filepath.Join(t.TempDir(), "retry"), now: func() time.Time { return t0 }}
	j.deferred("1.a", core.Outcome{Offset: 100, Attempts: 1, Next: t0.Add(time.Minute)})
	j.write()
	m := make(map[string]map[int64]retryRec)
	if bad := replayJournal(strings.NewReader(string(mustRead(t, j.path))), m); bad != 0 {
		t.Fatalf("%d bad lines", bad)
	}
	if r := m["1.a"][100]; !r.at.Equal(t0) || !r.next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("replayed %+v, want written at %v", r, t0)
	}
}

// TestUnreadableJournalLeftAlone: a retry journal that cannot be read at
// start (here a symbolic link to itself: ELOOP, as an EIO would) is left
// as it is, not replaced by what could be read of it (nothing): it may be
// read whole once the fault is fixed.
func TestUnreadableJournalLeftAlone(t *testing.T) {
	d := intakeDaemon(t, "", 100, 100, 0, 1, false)
	t.Cleanup(d.close)
	d.retry.close()
	path := filepath.Join(d.spool.StateDir(), "retry")
	os.Remove(path)
	if err := os.Symlink("retry", path); err != nil {
		t.Fatal(err)
	}
	d.loadJournal()
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the unreadable journal was replaced: %v, %v", fi.Mode(), err)
	}
}

// TestCompactLeavesUnreadJournal: a compaction whose read of the journal
// fails part way (EIO) leaves the journal as it is, as a start does
// (TestUnreadableJournalLeftAlone): rewritten with what could be read of
// it, the records after the fault would be lost for good.
func TestCompactLeavesUnreadJournal(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_123)
	j := &journal{path: filepath.Join(t.TempDir(), "retry"), now: func() time.Time { return t0 }}
	j.deferred("1.a", core.Outcome{Offset: 100, Attempts: 1, Next: t0.Add(time.Minute)})
	j.deferred("2.b", core.Outcome{Offset: 100, Attempts: 1, Next: t0.Add(time.Minute)})
	j.write()
	whole := mustRead(t, j.path)
	cut := bytes.Index(whole, []byte("D 2.b"))
	r := io.MultiReader(bytes.NewReader(whole[:cut]), iotest.ErrReader(syscall.EIO))
	if err := j.compactFrom(r); !errors.Is(err, syscall.EIO) {
		t.Errorf("compaction of a journal read in part: %v, want EIO", err)
	}
	if got := mustRead(t, j.path); !bytes.Equal(got, whole) {
		t.Fatalf("the journal was rewritten with what was read of it:\n%s\nwant\n%s", got, whole)
	}
}

// TestJournalKeptLinesKeepTheirStamp: lines a failed write kept are
// appended later under the time they were first written, and those
// buffered since under theirs: stamped with the later write's time, a
// record would count its wait from then after a clock step back, and its
// recipient be retried early by as long as the journal could not be
// written.
func TestJournalKeptLinesKeepTheirStamp(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_123)
	now := t0
	dir := filepath.Join(t.TempDir(), "state")
	j := &journal{path: filepath.Join(dir, "retry"), log: hclog.NewNullLogger(), now: func() time.Time { return now }}
	j.deferred("1.a", core.Outcome{Offset: 100, Attempts: 1, Next: t0.Add(2 * time.Hour)})
	j.write() // no directory yet: fails, the line is kept
	if _, err := os.Stat(j.path); err == nil {
		t.Fatal("the first write did not fail")
	}
	now = t0.Add(time.Hour)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	j.deferred("2.b", core.Outcome{Offset: 100, Attempts: 1, Next: now.Add(time.Minute)})
	j.write()
	m := make(map[string]map[int64]retryRec)
	if bad := replayJournal(bytes.NewReader(mustRead(t, j.path)), m); bad != 0 {
		t.Fatalf("%d bad lines", bad)
	}
	if r := m["1.a"][100]; !r.at.Equal(t0) {
		t.Errorf("kept record written at %v, want %v (when it was first written)", r.at, t0)
	}
	if r := m["2.b"][100]; !r.at.Equal(now) {
		t.Errorf("record buffered since written at %v, want %v", r.at, now)
	}
}

package daemon

import (
	"strings"
	"testing"
	"time"

	"zsched/core"
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
		"1.a": {100: {2, 1, time.UnixMilli(2000)}, 200: {1, 0, time.UnixMilli(1500)}},
		"4.d": {100: {3, 2, time.UnixMilli(4000)}},
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

package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/statefile"
	"zsched/statefile/statefiletest"
	"zsched/thread"
)

// The fixtures the state file's own tests share.
var (
	t0     = statefiletest.T0
	sample = statefiletest.Sample
	many   = statefiletest.Many
)

func TestStateSaveIsAtomicAndSkipsUnchanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := newStateFile(dir)
	if err := s.save(sample()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, statefile.Format(sample())) {
		t.Fatalf("saved file differs:\n%s", data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("state dir holds %d files after a save, want only destinations (no temp files)", len(entries))
	}
	// An unchanged state is not written again: the old time stays.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(s.path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := s.save(sample()); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(s.path); !fi.ModTime().Equal(old) {
		t.Fatal("unchanged state was written")
	}
	ds := sample()[:1]
	if err := s.save(ds); err != nil {
		t.Fatal(err)
	}
	if got := newStateFileAt(s.path).load(hclog.NewNullLogger()); !reflect.DeepEqual(got, ds) {
		t.Fatalf("after a changed save, load gives %+v", got)
	}
}

func newStateFileAt(path string) *stateFile {
	s := newStateFile(filepath.Dir(path))
	return &s
}

// Issue 16.19: the whole state file was rewritten every 30 s (12 MB at
// 240 000 destinations), since destinations in core carry the save's time.
// Now a save appends only what changed; the same windows half a minute
// later write nothing.
func TestStateSaveAppendsOnlyChanges(t *testing.T) {
	s := newStateFile(filepath.Join(t.TempDir(), "state"))
	ds := many(1000, t0)
	if err := s.save(ds); err != nil {
		t.Fatal(err)
	}
	whole := mustRead(t, s.path)

	// Half a minute on, nothing learned: nothing written.
	later := many(1000, t0.Add(stateSaveEvery))
	if err := s.save(later); err != nil {
		t.Fatal(err)
	}
	if now := mustRead(t, s.path); !bytes.Equal(now, whole) {
		t.Fatalf("a save with nothing learned wrote the file: %d bytes, was %d", len(now), len(whole))
	}

	// One window changed and one destination forgotten: two lines appended.
	later[10].Window.Concurrency = 6
	later = slices.Delete(later, 20, 21)
	if err := s.save(later); err != nil {
		t.Fatal(err)
	}
	now := mustRead(t, s.path)
	if !bytes.HasPrefix(now, whole) {
		t.Fatal("a save rewrote the file's earlier lines")
	}
	want := "smtp h000010.example 6 0.25 0 0 - 2026-03-01T12:00:30Z 0 0 - 0\n- smtp h000020.example\n"
	if tail := string(now[len(whole):]); tail != want {
		t.Fatalf("appended %q, want %q", tail, want)
	}
	if got := newStateFileAt(s.path).load(hclog.NewNullLogger()); len(got) != 999 || got[10].Window.Concurrency != 6 || got[19].Host != "h000019.example" || got[20].Host != "h000021.example" {
		t.Fatalf("journal loads %d destinations, want 999 with h000010's new window and h000020 gone", len(got))
	}

	// A destination in core whose state never changes is written again
	// every statefile.Refresh, so that its age at a restart stays true.
	refreshed := slices.Clone(later)
	for i := range refreshed {
		refreshed[i].Updated = t0.Add(statefile.Refresh + stateSaveEvery)
	}
	if err := s.save(refreshed); err != nil {
		t.Fatal(err)
	}
	if got := newStateFileAt(s.path).load(hclog.NewNullLogger()); !reflect.DeepEqual(got, refreshed) {
		t.Fatal("after statefile.Refresh the journal does not carry the new updated times")
	}
}

// The journal is rewritten whole once superseded lines outnumber live ones
// (plus statefile.Slack): its size stays within a few times the live state's.
func TestStateJournalCompacts(t *testing.T) {
	s := newStateFile(filepath.Join(t.TempDir(), "state"))
	ds := many(500, t0)
	wholeSize := len(statefile.Format(ds))
	maxSize := 0
	for round := range 40 {
		for i := range ds {
			ds[i].Window.Concurrency = 1 + round%10
		}
		if err := s.save(ds); err != nil {
			t.Fatal(err)
		}
		maxSize = max(maxSize, len(mustRead(t, s.path)))
	}
	line := wholeSize / len(ds)
	if bound := 3*wholeSize + statefile.Slack*line; maxSize > bound {
		t.Fatalf("journal grew to %d bytes, bound %d (whole state %d)", maxSize, bound, wholeSize)
	}
	if got := newStateFileAt(s.path).load(hclog.NewNullLogger()); !reflect.DeepEqual(got, ds) {
		t.Fatal("compacted journal does not load the last state")
	}
}

// A crash in the middle of an append leaves a torn last line: the lines
// before it load, and the next save rewrites the file whole.
func TestStateTornAppend(t *testing.T) {
	s := newStateFile(filepath.Join(t.TempDir(), "state"))
	ds := many(3, t0)
	if err := s.save(ds); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("smtp h000001.example 9 0.25 0 0 - 2026-03-01T12:")
	f.Close()
	r := newStateFileAt(s.path)
	if got := r.load(hclog.NewNullLogger()); !reflect.DeepEqual(got, ds) {
		t.Fatalf("torn journal loads %+v, want the lines before the tear", got)
	}
	ds[1].Window.Concurrency = 4
	if err := r.save(ds); err != nil {
		t.Fatal(err)
	}
	if b := mustRead(t, s.path); !bytes.Equal(b, statefile.Format(ds)) {
		t.Fatalf("after a torn append the next save does not rewrite the file:\n%s", b)
	}
}

// newDaemon makes a daemon on a fresh postoffice whose state file holds
// data (none when nil), logging into logs.
func newDaemon(t *testing.T, data []byte, logs *bytes.Buffer) (*Daemon, string) {
	t.Helper()
	po := filepath.Join(t.TempDir(), "po")
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "s.toml"), []byte(`[scheduler]
postoffice = "`+po+`"
[[clause]]
select = "smtp/*"
command = "/bin/false"
`))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(po, "state", "destinations")
	if data != nil {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
	d, err := New(cfg, log, Options{Now: func() time.Time { return t0 }, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return d, path
}

func TestDaemonRestoresAndSavesState(t *testing.T) {
	var logs bytes.Buffer
	d, path := newDaemon(t, statefile.Format(sample()), &logs)
	if got := d.Core().Destinations(t0); !reflect.DeepEqual(got, sample()) {
		t.Fatalf("restored %+v, want %+v", got, sample())
	}
	// Something learned while running reaches the file at shutdown.
	more := core.Destination{Channel: "smtp", Host: "b.example", Window: thread.WindowState{Concurrency: 3, Failure: 0.5}, Updated: t0}
	d.Core().Learn(t0, []core.Destination{more})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := append(sample()[:1:1], append([]core.Destination{more}, sample()[1:]...)...)
	if got, err := statefile.Parse(b); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("saved at shutdown %+v (%v), want %+v", got, err, want)
	}
}

func TestDaemonIgnoresDamagedState(t *testing.T) {
	var logs bytes.Buffer
	d, path := newDaemon(t, []byte("# zsched destinations v1\nsmtp a.example seven 0 0 0 - 2026-03-01T12:00:00Z\n"), &logs)
	if got := d.Core().Destinations(t0); len(got) != 0 {
		t.Fatalf("took %+v from a damaged file", got)
	}
	if !strings.Contains(logs.String(), "[WARN]") || !strings.Contains(logs.String(), "line 2") {
		t.Fatalf("no warning naming the damage:\n%s", logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// The damaged file is replaced by a valid one.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := statefile.Parse(b); err != nil {
		t.Fatalf("file after shutdown: %v\n%s", err, b)
	}
}

// TestStateAfterClockStepBack: destination state saved an hour later than
// the clock says at the next start (the clock was stepped back) waits what
// it had left to wait: a dead destination is not kept dead an hour more.
func TestStateAfterClockStepBack(t *testing.T) {
	saved := sample()
	for i := range saved {
		d := &saved[i]
		d.Updated = d.Updated.Add(time.Hour)
		if !d.DeadUntil.IsZero() {
			d.DeadUntil = d.DeadUntil.Add(time.Hour)
		}
		if !d.Window.CeilingAt.IsZero() {
			d.Window.CeilingAt = d.Window.CeilingAt.Add(time.Hour)
		}
	}
	var logs bytes.Buffer
	d, _ := newDaemon(t, statefile.Format(saved), &logs)
	got := d.Core().Destinations(t0)
	want := map[string]time.Duration{"dead.example": 17*time.Minute + 123*time.Millisecond}
	for _, g := range got {
		if g.Updated.After(t0) {
			t.Errorf("%s: updated %v, after now %v", g.Host, g.Updated, t0)
		}
		if w, ok := want[g.Host]; ok && g.DeadUntil.Sub(t0) != w {
			t.Errorf("%s: dead for %v more, want %v (what it had left when saved)", g.Host, g.DeadUntil.Sub(t0), w)
		}
	}
	if len(got) != len(saved) {
		t.Fatalf("restored %d destinations, want %d", len(got), len(saved))
	}
}

package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/config"
	"zsched/core"
	"zsched/thread"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sample() []core.Destination {
	return []core.Destination{
		{Channel: "smtp", Host: "a.example", Window: thread.WindowState{Concurrency: 7, Success: 1.0 / 3, Failure: 0.1, FailCohorts: 0.2,
			Ceiling: 6, Strikes: 2, CeilingAt: t0.Add(-2 * time.Minute)},
			Updated: t0.Add(-time.Minute)},
		{Channel: "smtp", Host: "dead.example", Window: thread.WindowState{Concurrency: 0},
			DeadUntil: t0.Add(17*time.Minute + 123*time.Millisecond), Updated: t0},
	}
}

func TestStateRoundTrip(t *testing.T) {
	data := formatDestinations(sample())
	got, err := parseDestinations(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, sample()) {
		t.Fatalf("round trip:\n got %+v\nwant %+v\nfile:\n%s", got, sample(), data)
	}
	// Human-readable: one line per destination, its fields in plain words.
	if !strings.Contains(string(data), "\nsmtp dead.example 0 0 0 0 2026-03-01T12:17:00.123Z 2026-03-01T12:00:00Z 0 0 -\n") {
		t.Fatalf("unexpected layout:\n%s", data)
	}
}

func TestStateRejectsForeignOrDamagedFiles(t *testing.T) {
	good := string(formatDestinations(sample()))
	for name, data := range map[string]string{
		"empty":            "",
		"foreign":          "smtp a.example 7 0 0 0 - 2026-03-01T12:00:00Z\n",
		"other version":    strings.Replace(good, "v2", "v3", 1),
		"v1 with v2 lines": strings.Replace(good, "v2", "v1", 1),
		"bad ceiling":      good + "smtp b.example 3 0 0 0 - 2026-03-01T12:00:00Z x 0 -\n",
		"short line":       good + "smtp b.example 3 0 0\n",
		"bad window":       good + "smtp b.example -1 0 0 0 - 2026-03-01T12:00:00Z\n",
		"NaN":              good + "smtp b.example 3 NaN 0 0 - 2026-03-01T12:00:00Z\n",
		"bad time":         good + "smtp b.example 3 0 0 0 - yesterday\n",
		"truncated":        good[:len(good)-9],
	} {
		if ds, err := parseDestinations([]byte(data)); err == nil {
			t.Errorf("%s: accepted, got %+v", name, ds)
		}
	}
}

// TestStateReadsVersion1: a file written before ceilings were learned
// still restores its windows, without ceilings.
func TestStateReadsVersion1(t *testing.T) {
	got, err := parseDestinations([]byte("# zsched destinations v1\nsmtp a.example 7 0 0.5 0 - 2026-03-01T12:00:00Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []core.Destination{{Channel: "smtp", Host: "a.example", Window: thread.WindowState{Concurrency: 7, Failure: 0.5}, Updated: t0}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v1 file gives %+v, want %+v", got, want)
	}
}

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
	if !bytes.Equal(data, formatDestinations(sample())) {
		t.Fatalf("saved file differs:\n%s", data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("state dir holds %d files after a save, want only destinations (no temp files)", len(entries))
	}
	// An unchanged state is not written again: the marker survives.
	if err := os.WriteFile(s.path, []byte("marker"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.save(sample()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(s.path); string(b) != "marker" {
		t.Fatal("unchanged state was rewritten")
	}
	ds := sample()[:1]
	if err := s.save(ds); err != nil {
		t.Fatal(err)
	}
	if got := s.load(hclog.NewNullLogger()); !reflect.DeepEqual(got, ds) {
		t.Fatalf("after a changed save, load gives %+v", got)
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
	d, path := newDaemon(t, formatDestinations(sample()), &logs)
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
	want := append(sample()[:1:1], more, sample()[1])
	if got, err := parseDestinations(b); err != nil || !reflect.DeepEqual(got, want) {
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
	if _, err := parseDestinations(b); err != nil {
		t.Fatalf("file after shutdown: %v\n%s", err, b)
	}
}

package statefile

import (
	"reflect"
	"strings"
	"testing"
	"time"

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
	data := Format(sample())
	got, err := Parse(data)
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
	good := string(Format(sample()))
	for name, data := range map[string]string{
		"empty":            "",
		"foreign":          "smtp a.example 7 0 0 0 - 2026-03-01T12:00:00Z\n",
		"other version":    strings.Replace(good, "v3", "v9", 1),
		"v1 with v3 lines": strings.Replace(good, "v3", "v1", 1),
		"v2 tombstone":     strings.Replace(good, "v3", "v2", 1) + "- smtp a.example\n",
		"short tombstone":  good + "- smtp\n",
		"truncated v2":     strings.Replace(good, "v3", "v2", 1)[:len(good)-9],
		"bad ceiling":      good + "smtp b.example 3 0 0 0 - 2026-03-01T12:00:00Z x 0 -\n",
		"short line":       good + "smtp b.example 3 0 0\n",
		"bad window":       good + "smtp b.example -1 0 0 0 - 2026-03-01T12:00:00Z\n",
		"NaN":              good + "smtp b.example 3 NaN 0 0 - 2026-03-01T12:00:00Z\n",
		"bad time":         good + "smtp b.example 3 0 0 0 - yesterday\n",
	} {
		if ds, err := Parse([]byte(data)); err == nil {
			t.Errorf("%s: accepted, got %+v", name, ds)
		}
	}
}

// TestStateReadsVersion1: a file written before ceilings were learned
// still restores its windows, without ceilings.
func TestStateReadsVersion1(t *testing.T) {
	got, err := Parse([]byte("# zsched destinations v1\nsmtp a.example 7 0 0.5 0 - 2026-03-01T12:00:00Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []core.Destination{{Channel: "smtp", Host: "a.example", Window: thread.WindowState{Concurrency: 7, Failure: 0.5}, Updated: t0}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("v1 file gives %+v, want %+v", got, want)
	}
}

package statefile

import (
	"reflect"
	"strings"
	"testing"

	"zsched/config"
	"zsched/core"
	"zsched/statefile/statefiletest"
	"zsched/thread"
)

// The fixtures the daemon's state tests share.
var (
	t0     = statefiletest.T0
	sample = statefiletest.Sample
	many   = statefiletest.Many
)

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
	if !strings.Contains(string(data), "\nsmtp dead.example 0 0 0 0 2026-03-01T12:17:00.123Z 2026-03-01T12:00:00Z 0 0 - 0\n") {
		t.Fatalf("unexpected layout:\n%s", data)
	}
}

func TestStateRejectsForeignOrDamagedFiles(t *testing.T) {
	good := string(Format(sample()))
	for name, data := range map[string]string{
		"empty":            "",
		"foreign":          "smtp a.example 7 0 0 0 - 2026-03-01T12:00:00Z\n",
		"other version":    strings.Replace(good, "v4", "v9", 1),
		"v1 with v4 lines": strings.Replace(good, "v4", "v1", 1),
		"v3 with v4 lines": strings.Replace(good, "v4", "v3", 1),
		"v4 with v3 lines": good + "smtp b.example 3 0 0 0 - 2026-03-01T12:00:00Z 0 0 -\n",
		"v2 tombstone":     older(good, HeaderV2) + "- smtp a.example\n",
		"short tombstone":  good + "- smtp\n",
		"truncated v2":     older(good, HeaderV2)[:len(older(good, HeaderV2))-9],
		"bad ceiling":      good + "smtp b.example 3 0 0 0 - 2026-03-01T12:00:00Z x 0 - 0\n",
		"bad slow_start":   good + "smtp b.example 3 0 0 0 - 2026-03-01T12:00:00Z 0 0 - yes\n",
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

// older turns a file Format wrote into one of an older version that has
// the same columns but slow_start (version 2 or 3), as that version wrote it.
func older(file, header string) string {
	lines := strings.SplitAfter(file, "\n")
	lines[0] = header + "\n"
	for i, l := range lines {
		if i >= 2 && l != "" && !strings.HasPrefix(l, "- ") {
			lines[i] = l[:strings.LastIndexByte(l, ' ')] + "\n"
		}
	}
	return strings.Join(lines, "")
}

// TestStateKeepsSlowStart: a window in mid slow start is saved so, and a
// restart resumes the slow start where it was (one more session once as
// many deliveries as it allows got through; a failure at one session does
// not count as a whole pseudo-cohort), neither at the initial window nor
// as a window feedback governs. One that finished its slow start stays
// where feedback took it.
func TestStateKeepsSlowStart(t *testing.T) {
	cfg, err := config.Parse("t.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n[[clause]]\nselect = \"*/*\"\ncommand = \"x\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := &cfg.Clauses[0]
	if !c.SlowStart || c.InitialConcurrency != 5 || c.FailedCohortLimit != 1 {
		t.Fatalf("the defaults changed (slow_start %v, initial %d, failed_cohort_limit %d): revise the test",
			c.SlowStart, c.InitialConcurrency, c.FailedCohortLimit)
	}
	// Before the restart: two deliveries at one session, one at two.
	w := thread.NewWindow(c)
	w.Succeeded(1, t0)
	w.Succeeded(2, t0)
	if !w.Starting || w.Concurrency != 2 || w.Success != 0.5 {
		t.Fatalf("slow start went elsewhere: %+v", w.State())
	}
	past := thread.NewWindow(c)
	for range 1 + 2 + 3 + 4 {
		past.Succeeded(1, t0)
	}
	if past.Starting || past.Concurrency != 5 {
		t.Fatalf("slow start did not end at the initial window: %+v", past.State())
	}
	data := Format([]core.Destination{
		{Channel: "smtp", Host: "mid.example", Window: w.State(), Updated: t0},
		{Channel: "smtp", Host: "past.example", Window: past.State(), Updated: t0},
	})
	ds, err := Parse(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	mid, after := thread.NewWindow(c), thread.NewWindow(c)
	mid.Restore(ds[0].Window)
	after.Restore(ds[1].Window)
	if !mid.Starting || mid.Concurrency != 2 || mid.Success != 0.5 {
		t.Fatalf("restored mid slow start as %+v, want it at 2 sessions, half way to 3\nfile:\n%s", mid.State(), data)
	}
	if after.Starting || after.Concurrency != 5 {
		t.Fatalf("restored past its slow start as %+v, want 5 sessions and feedback\nfile:\n%s", after.State(), data)
	}
	mid.Succeeded(2, t0)
	if mid.Concurrency != 3 || !mid.Starting {
		t.Fatalf("the resumed slow start did not take its next step: %+v", mid.State())
	}
}

// TestStateReadsOlderVersions: a file of version 3 or 2 (written before
// slow start was saved) reads as it did, its windows not in slow start.
func TestStateReadsOlderVersions(t *testing.T) {
	want := sample()
	want[2].Window.Starting = false
	for _, h := range []string{HeaderV3, HeaderV2} {
		data := older(string(Format(sample())), h)
		got, err := Parse([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v\n%s", h, err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s gives %+v, want %+v", h, got, want)
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

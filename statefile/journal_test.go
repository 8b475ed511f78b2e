package statefile

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"zsched/core"
)

// file is a state file in memory, written as the daemon writes it.
type file struct{ data []byte }

func (f *file) save(t *testing.T, j *Journal, ds []core.Destination) Write {
	t.Helper()
	w := j.Save(ds)
	switch {
	case w.Empty():
	case w.Whole:
		f.data = bytes.Clone(w.Data)
	default:
		if int64(len(f.data)) != j.Size() {
			t.Fatalf("append to a file of %d bytes, the journal says %d", len(f.data), j.Size())
		}
		f.data = append(f.data, w.Data...)
	}
	j.Done(w, nil)
	return w
}

// TestJournalWritesOnlyChanges (issue 16.19): a save appends only what
// changed; the same windows half a minute later write nothing; a
// destination whose state never changes is written again every Refresh.
func TestJournalWritesOnlyChanges(t *testing.T) {
	j, f := NewJournal(), &file{}
	ds := many(1000, t0)
	if w := f.save(t, j, ds); !w.Whole {
		t.Fatal("the first save of a new journal is not whole")
	}
	whole := bytes.Clone(f.data)
	if w := f.save(t, j, many(1000, t0.Add(30*time.Second))); !w.Empty() {
		t.Fatalf("nothing learned, yet the save writes %q", w.Data)
	}
	later := many(1000, t0.Add(30*time.Second))
	later[10].Window.Concurrency = 6
	later = slices.Delete(later, 20, 21)
	w := f.save(t, j, later)
	want := "smtp h000010.example 6 0.25 0 0 - 2026-03-01T12:00:30Z 0 0 - 0\n- smtp h000020.example\n"
	if w.Whole || string(w.Data) != want || !bytes.HasPrefix(f.data, whole) {
		t.Fatalf("save wrote (whole %v) %q, want %q appended", w.Whole, w.Data, want)
	}
	if got, err := Parse(f.data); err != nil || len(got) != 999 || got[10].Window.Concurrency != 6 || got[20].Host != "h000021.example" {
		t.Fatalf("journal parses to %d destinations (%v)", len(got), err)
	}
	refreshed := slices.Clone(later)
	for i := range refreshed {
		refreshed[i].Updated = t0.Add(Refresh + 30*time.Second)
	}
	f.save(t, j, refreshed)
	if got, _ := Parse(f.data); !reflect.DeepEqual(got, refreshed) {
		t.Fatal("after Refresh the journal does not carry the new updated times")
	}
}

// TestJournalCompacts: the file is rewritten whole once superseded lines
// outnumber live ones (plus Slack).
func TestJournalCompacts(t *testing.T) {
	j, f := NewJournal(), &file{}
	ds := many(500, t0)
	wholeSize := len(Format(ds))
	maxSize, wholes := 0, 0
	for round := range 40 {
		for i := range ds {
			ds[i].Window.Concurrency = 1 + round%10
		}
		if f.save(t, j, ds).Whole {
			wholes++
		}
		maxSize = max(maxSize, len(f.data))
	}
	line := wholeSize / len(ds)
	if bound := 3*wholeSize + Slack*line; maxSize > bound || wholes < 2 {
		t.Fatalf("journal grew to %d bytes, bound %d; %d whole writes", maxSize, bound, wholes)
	}
	if got, _ := Parse(f.data); !reflect.DeepEqual(got, ds) {
		t.Fatal("compacted journal does not parse to the last state")
	}
}

// TestJournalRewritesAfterAFailureOrAnOldFile: a failed write, a torn last
// line or an older version makes the next save whole.
func TestJournalRewritesAfterAFailureOrAnOldFile(t *testing.T) {
	ds := many(3, t0)
	j := NewJournal()
	j.Done(j.Save(ds), nil)
	ds[1].Window.Concurrency = 4
	w := j.Save(ds)
	if w.Whole {
		t.Fatal("a change after a good save is written whole")
	}
	j.Done(w, errors.New("disk full"))
	ds[2].Window.Concurrency = 3
	if w := j.Save(ds); !w.Whole || !bytes.Equal(w.Data, Format(ds)) {
		t.Fatalf("the save after a failed one is not the whole file: %q", w.Data)
	}

	torn := append(Format(many(3, t0)), "smtp h000001.example 9 0.25 0 0 - 2026-03-01T12:"...)
	v3 := []byte(older(string(Format(many(3, t0))), HeaderV3))
	v2 := []byte(older(string(Format(many(3, t0))), HeaderV2))
	for name, data := range map[string][]byte{"torn": torn, "v3": v3, "v2": v2} {
		j := NewJournal()
		got, err := j.Load(data)
		if err != nil || !reflect.DeepEqual(got, many(3, t0)) {
			t.Fatalf("%s: loads %+v (%v)", name, got, err)
		}
		if w := j.Save(many(3, t0)); !w.Whole {
			t.Errorf("%s: the first save after loading it is not whole", name)
		}
	}
}

package statefile

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"time"

	"zsched/core"
)

// Refresh is how often a destination whose state did not change gets its
// line written again all the same: its updated time is what a restart
// judges its age by (learned_ttl), and it moves with every save, which
// must not mean a line per destination per save.
const Refresh = 10 * time.Minute

// Slack is how many superseded lines the journal may carry beyond as many
// as it has live ones before it is rewritten.
const Slack = 1024

// Journal tracks what one state file says, and decides what each save
// writes to it. The zero value is not ready: use NewJournal.
type Journal struct {
	// written is what the file says, per destination; gen marks those
	// present in the save under way.
	written map[[2]string]*writtenDest
	gen     uint64
	records int   // destination and tombstone lines in the file
	size    int64 // its size as last written: another size means someone else wrote it
	// rewrite says the file must be written whole at the next save: it is
	// missing, of an older version or damaged, or a write failed.
	rewrite bool
}

type writtenDest struct {
	d   core.Destination
	gen uint64
}

// NewJournal returns the journal of a file not read yet (or missing): the
// first save writes it whole.
func NewJournal() *Journal {
	return &Journal{written: make(map[[2]string]*writtenDest), rewrite: true}
}

// Load reads the file's contents: the destinations it holds, sorted by
// channel and host (Parse), which the journal now takes for what the file
// says. A file it may append to is of the current version with every line
// whole; another is rewritten at the first save. An error (ErrForeign, damage)
// leaves the journal as new.
func (j *Journal) Load(data []byte) ([]core.Destination, error) {
	ds, records, err := replay(data)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		j.written[[2]string{d.Channel, d.Host}] = &writtenDest{d: d}
	}
	j.records, j.size = records, int64(len(data))
	j.rewrite = !bytes.HasPrefix(data, []byte(Header+"\n")) || !bytes.HasSuffix(data, []byte("\n"))
	return ds, nil
}

// Write is what a save writes to the file: its whole contents (Whole), to
// replace it atomically, or lines to append; Data nil: nothing.
type Write struct {
	Whole   bool
	Data    []byte
	records int // the lines it writes
}

// Empty reports whether there is nothing to write.
func (w Write) Empty() bool { return w.Data == nil }

// Save returns what brings the file to ds (sorted by channel and host, as
// core.Destinations returns it): the lines that changed, or the whole file
// when the journal has grown too long or must be rewritten, or nothing
// when nothing changed. The caller writes it and reports with Done.
func (j *Journal) Save(ds []core.Destination) Write {
	j.gen++
	var changes bytes.Buffer
	n := 0
	for _, d := range ds {
		k := [2]string{d.Channel, d.Host}
		w := j.written[k]
		if w != nil && sameState(w.d, d) && d.Updated.Sub(w.d.Updated) < Refresh {
			w.gen = j.gen
			continue
		}
		if w == nil {
			w = &writtenDest{}
			j.written[k] = w
		}
		w.d, w.gen = d, j.gen
		appendLine(&changes, d)
		n++
	}
	var gone [][2]string
	for k, w := range j.written { // sorted below
		if w.gen != j.gen {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range gone {
		fmt.Fprintf(&changes, "- %s %s\n", k[0], k[1])
		delete(j.written, k)
		n++
	}
	switch {
	case j.rewrite || j.records+n > 2*len(j.written)+Slack:
		return j.Whole()
	case n == 0:
		return Write{}
	}
	return Write{Data: changes.Bytes(), records: n}
}

// Whole returns the whole file as the journal says it should be: for a
// save that found the file not as last written (another size, gone), so
// that lines appended to it would not say what they should.
func (j *Journal) Whole() Write {
	ds := make([]core.Destination, 0, len(j.written))
	for _, w := range j.written { // sorted below
		ds = append(ds, w.d)
	}
	sortByKey(ds)
	return Write{Whole: true, Data: Format(ds), records: len(ds)}
}

// Size is the file's size as last written: an append must find it so,
// else the caller writes Whole instead.
func (j *Journal) Size() int64 { return j.size }

// Done reports how writing w went. After a failure (the caller leaves the
// previous file whole: an append cut back, a replacement not renamed) the
// next save rewrites the file.
func (j *Journal) Done(w Write, err error) {
	switch {
	case err != nil:
		j.rewrite = true
	case w.Whole:
		j.rewrite, j.records, j.size = false, w.records, int64(len(w.Data))
	default:
		j.records += w.records
		j.size += int64(len(w.Data))
	}
}

// sameState reports whether a and b say the same of one destination,
// their updated times aside.
func sameState(a, b core.Destination) bool {
	wa, wb := a.Window, b.Window
	return a.DeadUntil.Equal(b.DeadUntil) && wa.CeilingAt.Equal(wb.CeilingAt) &&
		wa.Concurrency == wb.Concurrency && wa.Success == wb.Success && wa.Failure == wb.Failure &&
		wa.FailCohorts == wb.FailCohorts && wa.Ceiling == wb.Ceiling && wa.Strikes == wb.Strikes &&
		wa.Starting == wb.Starting
}

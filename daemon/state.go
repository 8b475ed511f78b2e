package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/core"
	"zsched/statefile"
)

// The learned destination state (DESIGN §3, §11): the core's windows,
// feedback cycles and dead-until times, saved as text under
// postoffice/state/destinations so that a restart does not learn them
// again. It is advisory: a file that is not ours, or is damaged, is ignored
// with a warning and the destinations start over at their initial
// concurrency, as Postfix's always do.
//
// The file's format, and what each save appends or rewrites, are package
// statefile's (a journal); here are when it is saved and the file's I/O.

// stateSaveEvery is how often the daemon saves the state while it runs; it
// also saves at shutdown. A crash loses at most this much learning.
const stateSaveEvery = 30 * time.Second

// stateFile is the destinations file of one daemon.
type stateFile struct {
	path    string
	journal *statefile.Journal
	next    time.Time // next periodic save
}

func newStateFile(stateDir string) stateFile {
	return stateFile{path: filepath.Join(stateDir, "destinations"), journal: statefile.NewJournal()}
}

// load reads the state file. A missing file is a fresh start; a foreign or
// damaged one is ignored with a warning (and later overwritten).
func (s *stateFile) load(log hclog.Logger) []core.Destination {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		log.Warn("cannot read learned destination state; starting afresh", "file", s.path, "error", err)
		return nil
	}
	ds, err := s.journal.Load(data)
	if err != nil {
		log.Warn("ignoring learned destination state; starting afresh", "file", s.path, "error", err)
		return nil
	}
	return ds
}

// save brings the file to ds (sorted by channel and host, as
// core.Destinations returns it), as the journal says: it appends what
// changed, or rewrites the file, or writes nothing when nothing changed.
// A failed save leaves the previous file whole and is redone in full by
// the next one.
func (s *stateFile) save(ds []core.Destination) error {
	w := s.journal.Save(ds)
	if w.Empty() {
		return nil
	}
	if !w.Whole {
		err := s.append(w.Data)
		if !errors.Is(err, errChanged) {
			s.journal.Done(w, err)
			return err
		}
		w = s.journal.Whole()
	}
	// writeAtomic (holds.go): a temporary file in the same directory,
	// fsync, rename, fsync the directory (chasquid's safeio), so a crash
	// leaves the old file or the new one, never a mix. Its errors name
	// the file.
	err := writeAtomic(s.path, w.Data)
	s.journal.Done(w, err)
	return err
}

// errChanged is append's answer when the file is not the one last written
// (gone, or of another size): it must be rewritten whole.
var errChanged = errors.New("daemon: state file changed behind the journal")

// append adds lines at the end of the file, unless it is not the one last
// written (errChanged). A write that fails is cut back off.
func (s *stateFile) append(lines []byte) error {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0)
	if errors.Is(err, os.ErrNotExist) {
		return errChanged
	}
	if err != nil {
		return fmt.Errorf("daemon: state: %w", err)
	}
	size := s.journal.Size()
	if fi, err := f.Stat(); err != nil || fi.Size() != size {
		f.Close()
		return errChanged
	}
	_, err = f.Write(lines)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Truncate(size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("daemon: state: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// loadState gives the core what earlier runs learned. Called by New.
func (d *Daemon) loadState() {
	d.state = newStateFile(d.spool.StateDir())
	if ds := d.state.load(d.log); len(ds) > 0 {
		if n := stepBack(ds, d.now()); n > 0 {
			d.log.Warn("learned destination state saved later than now (the clock was stepped back): its times are counted from now",
				"file", d.state.path, "destinations", n)
		}
		n := d.core.Learn(d.now(), ds)
		d.log.Info("learned destination state restored", "file", d.state.path, "destinations", n, "stale", len(ds)-n)
	}
	d.state.next = d.now().Add(stateSaveEvery)
}

// stepBack moves the times of destinations saved later than now — the
// wall clock was stepped back since — by as much, as if saved now: a dead
// destination then waits what it had left to wait, not that plus the
// step, and a ceiling's age counts from its save. It returns how many it
// moved.
func stepBack(ds []core.Destination, now time.Time) int {
	n := 0
	for i := range ds {
		d := &ds[i]
		if !d.Updated.After(now) {
			continue
		}
		n++
		by := d.Updated.Sub(now)
		d.Updated = now
		if !d.DeadUntil.IsZero() {
			d.DeadUntil = d.DeadUntil.Add(-by)
		}
		if !d.Window.CeilingAt.IsZero() {
			d.Window.CeilingAt = d.Window.CeilingAt.Add(-by)
		}
	}
	return n
}

// saveState saves the core's learned destination state now.
func (d *Daemon) saveState() {
	if d.state.path == "" {
		return
	}
	if err := d.state.save(d.core.Destinations(d.now())); err != nil {
		d.log.Warn("cannot save learned destination state", "error", err)
	}
}

// saveStateDue saves the state when stateSaveEvery has passed.
func (d *Daemon) saveStateDue(now time.Time) {
	if now.Before(d.state.next) {
		return
	}
	d.state.next = now.Add(stateSaveEvery)
	d.saveState()
}

package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"zsched/control"
	"zsched/core"
)

// Operator holds on disk (issue 17): a held destination (a pattern, which
// also holds mail that arrives later) and a held message stay held across
// a restart, a reload and a SIGKILL until released. They live in
// postoffice/state/holds, a small text file rewritten atomically (temp
// name, fsync, rename, fsync the directory) on every change, before the
// command is answered; New loads it before the first read of the queue,
// so nothing held goes out after a restart. The control files are not
// moved (Postfix moves held mail to hold/): ZMailer's agents and routers
// keep working on them as they are.
//
// A message hold is kept by queue id, so it applies when the message is
// read into core — at once, or later when the core has room — and it ends
// with the message (completed or killed). Each hold is logged once when
// set, once when released and once when restored at start.

// holdsHeader names the file's format.
const holdsHeader = "# zsched holds v1"

// holdStore is the daemon's holds as on disk; only Run's goroutine
// touches it.
type holdStore struct {
	path    string
	dests   map[core.Dest]time.Time // pattern → when set
	msgs    map[string]time.Time    // queue id → when set
	dirty   bool                    // changed since the last save (commitHolds)
	retryAt time.Time               // a failed save is tried again from then (commitHoldsDue)
}

func newHoldStore(stateDir string) *holdStore {
	return &holdStore{path: filepath.Join(stateDir, "holds"),
		dests: make(map[core.Dest]time.Time), msgs: make(map[string]time.Time)}
}

// format renders the store: "dest CHANNEL HOST SET" and "msg QID SET",
// sorted.
func (h *holdStore) format() []byte {
	var b bytes.Buffer
	b.WriteString(holdsHeader + "\n")
	for _, p := range slices.SortedFunc(maps.Keys(h.dests), func(a, b core.Dest) int {
		return strings.Compare(a.String(), b.String())
	}) {
		fmt.Fprintf(&b, "dest %s %s %s\n", p.Channel, p.Host, h.dests[p].UTC().Format(time.RFC3339))
	}
	for _, q := range slices.Sorted(maps.Keys(h.msgs)) {
		fmt.Fprintf(&b, "msg %s %s\n", q, h.msgs[q].UTC().Format(time.RFC3339))
	}
	return b.Bytes()
}

// parse reads the file. A damaged line is skipped with an error for the
// log, never the whole file: a hold lost is mail sent that was meant to
// wait.
func (h *holdStore) parse(data []byte) []error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	var errs []error
	if !sc.Scan() || sc.Text() != holdsHeader {
		return []error{errors.New("daemon: holds: not a zsched holds file")}
	}
	for n := 2; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		set := func(s string) time.Time {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return time.Time{}
			}
			return t
		}
		switch {
		case f[0] == "dest" && len(f) == 4:
			p, err := core.ParseDest(f[1] + "/" + f[2])
			if err != nil {
				errs = append(errs, fmt.Errorf("daemon: holds line %d: %w", n, err))
				continue
			}
			h.dests[p] = set(f[3])
		case f[0] == "msg" && len(f) == 3:
			h.msgs[f[1]] = set(f[2])
		default:
			errs = append(errs, fmt.Errorf("daemon: holds line %d: %q", n, sc.Text()))
		}
	}
	return errs
}

// save writes the store atomically.
func (h *holdStore) save() error {
	return writeAtomic(h.path, h.format())
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, fsync, rename, fsync the directory.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("daemon: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	return nil
}

// loadHolds restores the holds kept on disk: destinations into the core,
// messages for when they are read. Called by New, before any read.
func (d *Daemon) loadHolds() {
	h := newHoldStore(d.spool.StateDir())
	d.holds = h
	data, err := os.ReadFile(h.path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		// Unreadable: start without, but never overwrite what may still
		// be read after the operator fixes it.
		d.log.Error("cannot read the holds file; holds are not restored", "file", h.path, "error", err)
		d.holds.path = ""
		return
	}
	for _, err := range h.parse(data) {
		d.log.Error("holds file: line skipped", "file", h.path, "error", err)
	}
	now := d.now()
	for p := range maps.Keys(h.dests) {
		d.core.HoldThread(now, p.Channel, p.Host)
	}
	for _, p := range d.core.Holds() {
		d.log.Info("hold restored", "dest", p.String(), "since", h.dests[p].UTC().Format(time.RFC3339))
	}
	for _, q := range slices.Sorted(maps.Keys(h.msgs)) {
		d.log.Info("hold restored", "msg", q, "since", h.msgs[q].UTC().Format(time.RFC3339))
	}
}

// holdDest is HOLD THREAD: a destination pattern held, kept on disk
// before the answer.
func (d *Daemon) holdDest(now time.Time, p core.Dest, who []any) control.Reply {
	if _, ok := d.holds.dests[p]; ok {
		return control.OK("already holding " + p.String())
	}
	d.holds.dests[p] = now
	if err := d.saveHolds(); err != nil {
		delete(d.holds.dests, p)
		return control.Fail("hold " + p.String() + " not kept: " + err.Error())
	}
	n := d.core.HoldThread(now, p.Channel, p.Host)
	d.log.Info("hold", append([]any{"thread", p.String(), "in_core", n > 0}, who...)...)
	if n == 0 {
		return control.OK("holding " + p.String() + ": no destination in core matches now; mail for it that arrives is held")
	}
	return control.OK(fmt.Sprintf("holding %s: %d destinations in core", p.String(), n))
}

// releaseDest is RELEASE THREAD: the holds the pattern names end.
func (d *Daemon) releaseDest(now time.Time, p core.Dest, who []any) control.Reply {
	ended := d.core.ReleaseThread(now, p.Channel, p.Host)
	if len(ended) == 0 {
		return control.Fail("no hold on " + p.String())
	}
	var names []string
	for _, h := range ended {
		delete(d.holds.dests, h)
		names = append(names, h.String())
		d.log.Info("release", append([]any{"thread", h.String()}, who...)...)
	}
	if err := d.saveHolds(); err != nil {
		// Released in core: the file follows when it can be written.
		d.holds.dirty = true
		d.holds.retryAt = now.Add(holdsRetry)
		return control.Fail("released " + strings.Join(names, " ") + ", but not on disk yet (tried again every " +
			holdsRetry.String() + "): " + err.Error())
	}
	return control.OK("released " + strings.Join(names, " "))
}

// saveHolds writes the holds after a change; false (logged) when it could
// not, which the command that changed them reports.
func (d *Daemon) saveHolds() error {
	if d.holds.path == "" {
		return errors.New("daemon: the holds file could not be read at start; holds are not saved")
	}
	if err := d.holds.save(); err != nil {
		d.log.Error("cannot save holds", "file", d.holds.path, "error", err)
		return err
	}
	return nil
}

// holdsRetry is how often the loop tries again to save holds that a save
// could not write.
const holdsRetry = 10 * time.Second

// commitHolds saves the holds if they changed: once for a batch of
// message holds, before the command answers. A save that fails leaves
// them changed: what is in core (a message held, or released) must reach
// the file before a restart reads it, so the loop tries again
// (commitHoldsDue).
func (d *Daemon) commitHolds() error {
	if d.holds == nil || !d.holds.dirty {
		return nil
	}
	if err := d.saveHolds(); err != nil {
		d.holds.retryAt = d.now().Add(holdsRetry)
		return fmt.Errorf("not kept on disk (in core it is; the save is tried again every %v): %w", holdsRetry, err)
	}
	d.holds.dirty = false
	return nil
}

// commitHoldsDue is the loop's commitHolds, at each turn: the holds of
// messages that left the spool, and a failed save again every holdsRetry
// rather than at every turn.
func (d *Daemon) commitHoldsDue() {
	if d.holds == nil || !d.holds.dirty || d.now().Before(d.holds.retryAt) {
		return
	}
	d.commitHolds()
}

// msgHeld reports whether a message hold is kept for qid.
func (d *Daemon) msgHeld(qid string) bool {
	if d.holds == nil {
		return false
	}
	_, ok := d.holds.msgs[qid]
	return ok
}

// holdEnded forgets the hold of a message that left the spool.
func (d *Daemon) holdEnded(qid string) {
	if d.holds == nil {
		return
	}
	if _, ok := d.holds.msgs[qid]; !ok {
		return
	}
	delete(d.holds.msgs, qid)
	d.holds.dirty = true
}

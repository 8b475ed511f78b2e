package daemon

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"zsched/core"
)

// The learned destination state (DESIGN §3, §11): the core's windows,
// feedback cycles and dead-until times, saved as text under
// postoffice/state/destinations so that a restart does not learn them
// again. It is advisory: a file that is not ours, or is damaged, is ignored
// with a warning and the destinations start over at their initial
// concurrency, as Postfix's always do.
//
// The file is a journal: a save appends a line for each destination whose
// state changed and a tombstone ("- channel host") for each the core
// forgot; a later line supersedes an earlier one. When superseded lines
// outnumber live ones (and at the first save after a start on an older or
// damaged file) it is rewritten whole, atomically. So a save costs what
// changed, not what is known (240 000 destinations made a 12 MB file
// rewritten every 30 s), and an idle scheduler writes nothing.

// stateHeader is the first line of the file: it names the format and its
// version, so a foreign file is never taken for ours.
// Version 2 added the learned ceiling (three fields at the end); version 3
// made the file a journal (tombstones, later lines supersede). Versions 1
// and 2 still load, and are rewritten as version 3 at the first save.
const (
	stateHeader   = "# zsched destinations v3"
	stateHeaderV2 = "# zsched destinations v2"
	stateHeaderV1 = "# zsched destinations v1"
	stateColumns  = "# channel host window success failure fail_cohorts dead_until updated ceiling strikes ceiling_at; \"-\" channel host: forgotten"
)

// stateSaveEvery is how often the daemon saves the state while it runs; it
// also saves at shutdown. A crash loses at most this much learning.
const stateSaveEvery = 30 * time.Second

// stateRefresh is how often a destination in core whose state did not
// change gets its line written again all the same: its updated time is
// what a restart judges its age by (learned_ttl), and it moves with every
// save, which must not mean a line per destination per save.
const stateRefresh = 10 * time.Minute

// stateSlack is how many superseded lines the journal may carry beyond as
// many as it has live ones before it is rewritten.
const stateSlack = 1024

// stateFile tracks the destinations file of one daemon.
type stateFile struct {
	path string
	// written is what the file says, per destination; gen marks those
	// present in the save under way.
	written map[[2]string]*writtenDest
	gen     uint64
	records int   // destination and tombstone lines in the file
	size    int64 // its size as last written: another size means someone else wrote it
	// rewrite says the file must be written whole at the next save: it is
	// missing, of an older version or damaged, or a save failed.
	rewrite bool
	next    time.Time // next periodic save
}

type writtenDest struct {
	d   core.Destination
	gen uint64
}

func newStateFile(stateDir string) stateFile {
	return stateFile{path: filepath.Join(stateDir, "destinations"), written: make(map[[2]string]*writtenDest), rewrite: true}
}

// formatDestinations renders ds as a whole state file: one destination per
// line, fields separated by blanks (channels and hosts have none).
func formatDestinations(ds []core.Destination) []byte {
	var b bytes.Buffer
	b.WriteString(stateHeader + "\n")
	b.WriteString(stateColumns + "\n")
	for _, d := range ds {
		appendDestination(&b, d)
	}
	return b.Bytes()
}

func appendDestination(b *bytes.Buffer, d core.Destination) {
	dead := "-"
	if !d.DeadUntil.IsZero() {
		dead = d.DeadUntil.UTC().Format(time.RFC3339Nano)
	}
	at := "-"
	if !d.Window.CeilingAt.IsZero() {
		at = d.Window.CeilingAt.UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(b, "%s %s %d %s %s %s %s %s %d %d %s\n", d.Channel, d.Host, d.Window.Concurrency,
		ftoa(d.Window.Success), ftoa(d.Window.Failure), ftoa(d.Window.FailCohorts),
		dead, d.Updated.UTC().Format(time.RFC3339Nano), d.Window.Ceiling, d.Window.Strikes, at)
}

// ftoa formats f so that it parses back to the same float64.
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// errForeign is returned for a file that does not start with our header.
var errForeign = errors.New("daemon: not a zsched destinations file")

// parseDestinations reads a state file: the destinations it holds after
// its later lines have superseded earlier ones, sorted by channel and host.
// Any damage rejects the whole file (half a learned state is not worth the
// doubt), except a last line without its newline in a version 3 file: an
// append a crash cut short, whose earlier lines stand.
func parseDestinations(data []byte) ([]core.Destination, error) {
	ds, _, err := replayDestinations(data)
	return ds, err
}

// replayDestinations is parseDestinations, also returning how many
// destination and tombstone lines the file holds.
func replayDestinations(data []byte) ([]core.Destination, int, error) {
	header, _, _ := bytes.Cut(data, []byte("\n"))
	fields := 11
	switch string(header) {
	case stateHeader:
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1] // a torn last line
		}
	case stateHeaderV2:
	case stateHeaderV1:
		fields = 8
	default:
		return nil, 0, errForeign
	}
	v3 := string(header) == stateHeader
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	sc.Scan()
	byKey := make(map[[2]string]core.Destination)
	records := 0
	for n := 2; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		records++
		if rest, ok := strings.CutPrefix(line, "- "); ok && v3 {
			f := strings.Fields(rest)
			if len(f) != 2 {
				return nil, 0, fmt.Errorf("daemon: destinations line %d: tombstone of %d fields, want 2", n, len(f))
			}
			delete(byKey, [2]string{f[0], f[1]})
			continue
		}
		d, err := parseDestination(line, fields)
		if err != nil {
			return nil, 0, fmt.Errorf("daemon: destinations line %d: %w", n, err)
		}
		byKey[[2]string{d.Channel, d.Host}] = d
	}
	if err := sc.Err(); err != nil {
		return nil, 0, fmt.Errorf("daemon: destinations: %w", err)
	}
	ds := make([]core.Destination, 0, len(byKey))
	for _, d := range byKey {
		ds = append(ds, d)
	}
	sortDestinations(ds)
	return ds, records, nil
}

func sortDestinations(ds []core.Destination) {
	slices.SortFunc(ds, func(a, b core.Destination) int {
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Host, b.Host))
	})
}

func parseDestination(line string, fields int) (core.Destination, error) {
	f := strings.Fields(line)
	if len(f) != fields {
		return core.Destination{}, fmt.Errorf("%d fields, want %d", len(f), fields)
	}
	d := core.Destination{Channel: f[0], Host: f[1]}
	var err error
	if d.Window.Concurrency, err = strconv.Atoi(f[2]); err != nil || d.Window.Concurrency < 0 {
		return d, fmt.Errorf("window %q", f[2])
	}
	for i, p := range []*float64{&d.Window.Success, &d.Window.Failure, &d.Window.FailCohorts} {
		v, err := strconv.ParseFloat(f[3+i], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return d, fmt.Errorf("feedback field %q", f[3+i])
		}
		*p = v
	}
	if f[6] != "-" {
		if d.DeadUntil, err = time.Parse(time.RFC3339Nano, f[6]); err != nil {
			return d, fmt.Errorf("dead_until %q", f[6])
		}
	}
	if d.Updated, err = time.Parse(time.RFC3339Nano, f[7]); err != nil {
		return d, fmt.Errorf("updated %q", f[7])
	}
	if fields == 8 {
		return d, nil
	}
	if d.Window.Ceiling, err = strconv.Atoi(f[8]); err != nil || d.Window.Ceiling < 0 {
		return d, fmt.Errorf("ceiling %q", f[8])
	}
	if d.Window.Strikes, err = strconv.Atoi(f[9]); err != nil || d.Window.Strikes < 0 {
		return d, fmt.Errorf("strikes %q", f[9])
	}
	if f[10] != "-" {
		if d.Window.CeilingAt, err = time.Parse(time.RFC3339Nano, f[10]); err != nil {
			return d, fmt.Errorf("ceiling_at %q", f[10])
		}
	}
	return d, nil
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
	ds, records, err := replayDestinations(data)
	if err != nil {
		log.Warn("ignoring learned destination state; starting afresh", "file", s.path, "error", err)
		return nil
	}
	for _, d := range ds {
		s.written[[2]string{d.Channel, d.Host}] = &writtenDest{d: d}
	}
	s.records, s.size = records, int64(len(data))
	// Ours to append to: version 3, every line whole.
	s.rewrite = !bytes.HasPrefix(data, []byte(stateHeader+"\n")) || !bytes.HasSuffix(data, []byte("\n"))
	return ds
}

// sameState reports whether a and b say the same of one destination,
// their updated times aside.
func sameState(a, b core.Destination) bool {
	wa, wb := a.Window, b.Window
	return a.DeadUntil.Equal(b.DeadUntil) && wa.CeilingAt.Equal(wb.CeilingAt) &&
		wa.Concurrency == wb.Concurrency && wa.Success == wb.Success && wa.Failure == wb.Failure &&
		wa.FailCohorts == wb.FailCohorts && wa.Ceiling == wb.Ceiling && wa.Strikes == wb.Strikes
}

// save brings the file to ds (sorted by channel and host, as
// core.Destinations returns it): it appends what changed, or rewrites the
// file when the journal has grown, and writes nothing when nothing changed.
// A failed save leaves the previous file whole and is redone in full by the
// next one.
func (s *stateFile) save(ds []core.Destination) error {
	s.gen++
	var changes bytes.Buffer
	n := 0
	for _, d := range ds {
		k := [2]string{d.Channel, d.Host}
		w := s.written[k]
		if w != nil && sameState(w.d, d) && d.Updated.Sub(w.d.Updated) < stateRefresh {
			w.gen = s.gen
			continue
		}
		if w == nil {
			w = &writtenDest{}
			s.written[k] = w
		}
		w.d, w.gen = d, s.gen
		appendDestination(&changes, d)
		n++
	}
	var gone [][2]string
	for k, w := range s.written { // sorted below
		if w.gen != s.gen {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range gone {
		fmt.Fprintf(&changes, "- %s %s\n", k[0], k[1])
		delete(s.written, k)
		n++
	}
	switch {
	case s.rewrite || s.records+n > 2*len(s.written)+stateSlack:
		return s.writeWhole()
	case n == 0:
		return nil
	}
	whole, err := s.append(changes.Bytes())
	if err != nil {
		s.rewrite = true
		return err
	}
	if !whole {
		s.records += n
	}
	return nil
}

// append adds lines at the end of the file, unless the file is not the one
// last written: then it is rewritten, and whole says so. A write that fails
// is cut back off.
func (s *stateFile) append(lines []byte) (whole bool, err error) {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0)
	if errors.Is(err, os.ErrNotExist) {
		return true, s.writeWhole()
	}
	if err != nil {
		return false, fmt.Errorf("daemon: state: %w", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != s.size {
		f.Close()
		return true, s.writeWhole()
	}
	_, err = f.Write(lines)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Truncate(s.size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("daemon: state: %w", err)
	}
	s.size += int64(len(lines))
	return false, nil
}

// writeWhole writes what the file should say atomically: a temporary file
// in the same directory, fsync, rename, fsync the directory (chasquid's
// safeio), so a crash leaves the old file or the new one, never a mix.
func (s *stateFile) writeWhole() error {
	ds := make([]core.Destination, 0, len(s.written))
	for _, w := range s.written { // sorted below
		ds = append(ds, w.d)
	}
	sortDestinations(ds)
	data := formatDestinations(ds)
	s.rewrite = true // until the new file is in place
	// writeAtomic (holds.go): its errors name the file.
	if err := writeAtomic(s.path, data); err != nil {
		return err
	}
	s.rewrite, s.records, s.size = false, len(ds), int64(len(data))
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
		n := d.core.Learn(d.now(), ds)
		d.log.Info("learned destination state restored", "file", d.state.path, "destinations", n, "stale", len(ds)-n)
	}
	d.state.next = d.now().Add(stateSaveEvery)
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

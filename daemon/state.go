package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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

// stateHeader is the first line of the file: it names the format and its
// version, so a foreign file is never taken for ours.
// Version 2 added the learned ceiling (three fields at the end); a
// version 1 file still loads, without ceilings.
const (
	stateHeader   = "# zsched destinations v2"
	stateHeaderV1 = "# zsched destinations v1"
)

// stateSaveEvery is how often the daemon saves the state while it runs; it
// also saves at shutdown. A crash loses at most this much learning.
const stateSaveEvery = 30 * time.Second

// stateFile tracks the destinations file of one daemon.
type stateFile struct {
	path string
	last []byte    // what was last read or written: an unchanged state is not rewritten
	next time.Time // next periodic save
}

func newStateFile(stateDir string) stateFile {
	return stateFile{path: filepath.Join(stateDir, "destinations")}
}

// formatDestinations renders ds as the state file: one destination per
// line, fields separated by blanks (channels and hosts have none).
func formatDestinations(ds []core.Destination) []byte {
	var b bytes.Buffer
	b.WriteString(stateHeader + "\n")
	b.WriteString("# channel host window success failure fail_cohorts dead_until updated ceiling strikes ceiling_at\n")
	for _, d := range ds {
		dead := "-"
		if !d.DeadUntil.IsZero() {
			dead = d.DeadUntil.UTC().Format(time.RFC3339Nano)
		}
		at := "-"
		if !d.Window.CeilingAt.IsZero() {
			at = d.Window.CeilingAt.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(&b, "%s %s %d %s %s %s %s %s %d %d %s\n", d.Channel, d.Host, d.Window.Concurrency,
			ftoa(d.Window.Success), ftoa(d.Window.Failure), ftoa(d.Window.FailCohorts),
			dead, d.Updated.UTC().Format(time.RFC3339Nano), d.Window.Ceiling, d.Window.Strikes, at)
	}
	return b.Bytes()
}

// ftoa formats f so that it parses back to the same float64.
func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// errForeign is returned for a file that does not start with our header.
var errForeign = errors.New("daemon: not a zsched destinations file")

// parseDestinations reads a state file. Any damage rejects the whole file:
// half a learned state is not worth the doubt.
func parseDestinations(data []byte) ([]core.Destination, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	if !sc.Scan() || sc.Text() != stateHeader && sc.Text() != stateHeaderV1 {
		return nil, errForeign
	}
	fields := 11
	if sc.Text() == stateHeaderV1 {
		fields = 8
	}
	var ds []core.Destination
	for n := 2; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		d, err := parseDestination(line, fields)
		if err != nil {
			return nil, fmt.Errorf("daemon: destinations line %d: %w", n, err)
		}
		ds = append(ds, d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("daemon: destinations: %w", err)
	}
	return ds, nil
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
	ds, err := parseDestinations(data)
	if err != nil {
		log.Warn("ignoring learned destination state; starting afresh", "file", s.path, "error", err)
		return nil
	}
	s.last = data
	return ds
}

// save writes ds atomically, unless nothing changed since the last save:
// a temporary file in the same directory, fsync, rename, fsync the
// directory (chasquid's safeio), so a crash leaves the old file or the new
// one, never a mix.
func (s *stateFile) save(ds []core.Destination) error {
	data := formatDestinations(ds)
	if bytes.Equal(data, s.last) {
		return nil
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("daemon: state: %w", err)
	}
	f, err := os.CreateTemp(dir, ".destinations-*")
	if err != nil {
		return fmt.Errorf("daemon: state: %w", err)
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
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("daemon: state: %w", err)
	}
	s.last = data
	if err := syncDir(dir); err != nil {
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

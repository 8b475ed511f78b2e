package ctlfile

// Sweeping the debris interrupted writers leave in the spool.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SweepTemp removes the temporary files Enqueue leaves when it is killed
// midway — queue/.new-* (a body not yet named) and transport/.<name>.tmp (a
// control file not yet renamed) — that were last modified before cutoff.
// Nothing else writes those names, and a file younger than cutoff may still
// be an enqueue in progress. Scheduler-side; it returns the paths removed
// (relative to the postoffice).
func (s *Spool) SweepTemp(cutoff time.Time) ([]string, error) {
	var removed []string
	var errs []error
	for _, sub := range []struct {
		dir  string
		temp func(name string) bool
	}{
		{"queue", func(n string) bool { return strings.HasPrefix(n, ".new-") }},
		{"transport", func(n string) bool { return n[0] == '.' && strings.HasSuffix(n, ".tmp") }},
	} {
		d, err := os.Open(filepath.Join(s.Root, sub.dir))
		if err != nil {
			errs = append(errs, fmt.Errorf("ctlfile: sweep: %w", err))
			continue
		}
		for {
			ents, err := d.ReadDir(scanBatch)
			for _, e := range ents {
				name := e.Name()
				if name == "" || !sub.temp(name) || !e.Type().IsRegular() {
					continue
				}
				info, err := e.Info()
				if err != nil || !info.ModTime().Before(cutoff) {
					continue
				}
				p := filepath.Join(s.Root, sub.dir, name)
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, fmt.Errorf("ctlfile: sweep: %w", err))
					continue
				}
				removed = append(removed, filepath.Join(sub.dir, name))
			}
			if err != nil {
				if err != io.EOF {
					errs = append(errs, fmt.Errorf("ctlfile: sweep %s: %w", sub.dir, err))
				}
				break
			}
		}
		d.Close()
	}
	return removed, errors.Join(errs...)
}

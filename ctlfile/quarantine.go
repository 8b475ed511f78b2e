package ctlfile

// Moving a malformed control file aside into bad/.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Quarantine moves transport/rel into bad/ — never deleting anything; a name
// already taken in bad/ gets a ".1", ".2"… suffix — and writes
// bad/<name>.why with the reason and the time. The body stays in queue/.
func (s *Spool) Quarantine(rel string, why error) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if err := os.MkdirAll(s.BadDir(), 0o755); err != nil {
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	src := s.ctlPath(rel)
	base := path.Base(rel)
	var dst string
	for n := 0; ; n++ {
		if n > 10000 {
			return fmt.Errorf("ctlfile: quarantine %s: no free name in %s", rel, s.BadDir())
		}
		name := base
		if n > 0 {
			name = base + "." + strconv.Itoa(n)
		}
		dst = filepath.Join(s.BadDir(), name)
		// link fails if dst exists, where rename would silently replace it.
		err := os.Link(src, dst)
		if err == nil {
			break
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, rel)
		}
		// No hard links here (some filesystems): check, then rename.
		if _, lerr := os.Lstat(dst); lerr == nil {
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
		}
		break
	}
	if err := os.Remove(src); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	reason := "unknown"
	if why != nil {
		reason = why.Error()
	}
	note := fmt.Sprintf("file: transport/%s\ntime: %s\nreason: %s\n",
		rel, time.Now().UTC().Format(time.RFC3339), strings.ReplaceAll(reason, "\n", " "))
	if err := os.WriteFile(dst+".why", []byte(note), 0o644); err != nil {
		return fmt.Errorf("ctlfile: quarantine %s: %w", rel, err)
	}
	return syncDirs(s.BadDir(), filepath.Dir(src))
}

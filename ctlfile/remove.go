package ctlfile

// Removing a completed message's files.

import (
	"errors"
	"fmt"
	"io/fs"
)

// Remove unlinks the body (queue/<dir of rel>/<id>), then the control
// file; missing files are not errors. A crash in between leaves a control
// file whose recipients are all settled and whose body is gone, which Read
// returns as such (with a zero Arrival) for the scheduler to complete
// again; the other order would leave a body that nothing ever removes.
func (s *Spool) Remove(rel string, id string) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if id != "" {
		if err := checkID(id); err != nil {
			return err
		}
	}
	c := s.cache()
	if id != "" {
		if err := c.unlinkAt(treeQueue, bodyRel(rel, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("ctlfile: remove body of %s: %w", rel, err)
		}
	}
	if err := c.unlinkAt(treeTransport, rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("ctlfile: remove %s: %w", rel, err)
	}
	return nil
}

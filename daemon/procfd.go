package daemon

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"zsched/admission"
	"zsched/ctlfile"
)

// maxFDScan bounds hasFileOpen's scan of a process's descriptors: one with
// more is taken as one that may have the file open (waiting is the safe
// side), rather than have a read stat thousands of descriptors.
const maxFDScan = 4096

// hasFileOpen tells whether process pid has the control file id open, by
// its descriptors in /proc (each stat'ed, to the first whose device and
// inode are the file's). It is the clock-free test of a lock's holder: an
// agent keeps the file open while it delivers. Descriptors that cannot be
// read (another user's process: EACCES) or too many of them:
// admission.MayHaveOpen.
func hasFileOpen(pid int, id ctlfile.FileID) admission.FileOpen {
	if id.Ino == 0 {
		return admission.MayHaveOpen
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	f, err := os.Open(dir)
	if err != nil {
		return admission.MayHaveOpen
	}
	defer f.Close()
	fds, err := f.Readdirnames(maxFDScan + 1)
	if err != nil && !errors.Is(err, io.EOF) || len(fds) > maxFDScan {
		return admission.MayHaveOpen
	}
	for _, fd := range fds {
		var st syscall.Stat_t
		if err := syscall.Stat(dir+fd, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // closed since the listing
			}
			return admission.MayHaveOpen
		}
		if uint64(st.Dev) == id.Dev && st.Ino == id.Ino {
			return admission.HasOpen
		}
	}
	return admission.NotOpen
}

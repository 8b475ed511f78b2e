package rawsys

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxHandleSize is the largest file handle Linux hands out (MAX_HANDLE_SZ).
const MaxHandleSize = 128

// FileHandle is struct file_handle with room for any handle: what a
// filesystem gives a file so that it can be found again by it alone (NFS
// serves files by their handles). Bytes of Data are in use; Type says how
// the filesystem lays them out.
type FileHandle struct {
	Bytes uint32
	Type  int32
	Data  [MaxHandleSize]byte
}

// NameToHandleAt is name_to_handle_at(2) of path relative to dirfd, with
// flags (unix.AT_EMPTY_PATH: of dirfd itself; unix.AT_SYMLINK_FOLLOW),
// into h, as a raw system call retried on EINTR: it looks a name up as
// fstatat does and never waits on anything else. It returns the mount id.
// A filesystem without handles answers EOPNOTSUPP.
func NameToHandleAt(dirfd int, path string, flags int, h *FileHandle) (mountID int, err error) {
	var buf [256]byte
	var p *byte
	if len(path) < len(buf) {
		for i := 0; i < len(path); i++ {
			if path[i] == 0 {
				return 0, unix.EINVAL
			}
		}
		copy(buf[:], path)
		p = &buf[0]
	} else if p, err = unix.BytePtrFromString(path); err != nil {
		return 0, err
	}
	h.Bytes = MaxHandleSize
	var mnt int32
	for {
		_, _, e := syscall.RawSyscall6(unix.SYS_NAME_TO_HANDLE_AT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
			uintptr(unsafe.Pointer(h)), uintptr(unsafe.Pointer(&mnt)), uintptr(flags), 0)
		switch e {
		case 0:
			return int(mnt), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

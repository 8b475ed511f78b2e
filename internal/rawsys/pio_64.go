//go:build amd64 || arm64 || loong64 || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x

package rawsys

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Pread is pread(2), retried on EINTR.
func Pread(fd int, b []byte, off int64) (int, error) {
	for {
		r, _, e := syscall.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
			uintptr(off), 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// Pwrite is pwrite(2), retried on EINTR.
func Pwrite(fd int, b []byte, off int64) (int, error) {
	for {
		r, _, e := syscall.RawSyscall6(unix.SYS_PWRITE64, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
			uintptr(off), 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

//go:build linux && (amd64 || arm64 || riscv64)

package rawsys

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Fstatat is fstatat(2) of path relative to dirfd, flags 0, as a raw
// system call retried on EINTR: a stat of a file in the page cache costs
// less than the Go scheduler's bookkeeping around an ordinary call. The
// NUL-terminated copy of a short path stays on the stack.
func Fstatat(dirfd int, path string, st *unix.Stat_t) error {
	var buf [256]byte
	if len(path) >= len(buf) {
		return fstatatGo(dirfd, path, st)
	}
	copy(buf[:], path)
	for i := 0; i < len(path); i++ {
		if path[i] == 0 {
			return unix.EINVAL
		}
	}
	for {
		_, _, e := syscall.RawSyscall6(sysFstatat, uintptr(dirfd), uintptr(unsafe.Pointer(&buf[0])),
			uintptr(unsafe.Pointer(st)), 0, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

// Fstat is fstat(2) of fd, as a raw system call retried on EINTR.
func Fstat(fd int, st *unix.Stat_t) error {
	for {
		_, _, e := syscall.RawSyscall(unix.SYS_FSTAT, uintptr(fd), uintptr(unsafe.Pointer(st)), 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return e
	}
}

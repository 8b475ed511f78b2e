//go:build amd64 || arm64 || loong64 || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x

package rawsys

import (
	"golang.org/x/sys/unix"
)

// Pread is pread(2), retried on EINTR.
func Pread(fd int, b []byte, off int64) (int, error) {
	return bufCall(unix.SYS_PREAD64, fd, b, uintptr(off))
}

// Pwrite is pwrite(2), retried on EINTR.
func Pwrite(fd int, b []byte, off int64) (int, error) {
	return bufCall(unix.SYS_PWRITE64, fd, b, uintptr(off))
}

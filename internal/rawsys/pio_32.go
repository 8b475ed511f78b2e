//go:build !(amd64 || arm64 || loong64 || mips64 || mips64le || ppc64 || ppc64le || riscv64 || s390x)

package rawsys

import "golang.org/x/sys/unix"

// On 32-bit platforms the 64-bit offset is passed in a platform-specific
// register pair; unix.Pread and unix.Pwrite know how, at the cost of an
// ordinary system call.

// Pread is pread(2), retried on EINTR.
func Pread(fd int, b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(fd, b, off)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// Pwrite is pwrite(2), retried on EINTR.
func Pwrite(fd int, b []byte, off int64) (int, error) {
	for {
		n, err := unix.Pwrite(fd, b, off)
		if err != unix.EINTR {
			return n, err
		}
	}
}

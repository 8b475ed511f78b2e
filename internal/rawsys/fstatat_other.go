//go:build !(linux && (amd64 || arm64 || riscv64))

package rawsys

import "golang.org/x/sys/unix"

// Fstatat is fstatat(2) of path relative to dirfd, flags 0, retried on
// EINTR: an ordinary system call where no raw one is set up.
func Fstatat(dirfd int, path string, st *unix.Stat_t) error { return fstatatGo(dirfd, path, st) }

// Fstat is fstat(2) of fd, retried on EINTR.
func Fstat(fd int, st *unix.Stat_t) error {
	for {
		if err := unix.Fstat(fd, st); err != unix.EINTR {
			return err
		}
	}
}

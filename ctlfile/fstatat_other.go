//go:build !(linux && (amd64 || arm64 || riscv64))

package ctlfile

import "golang.org/x/sys/unix"

// fstatat is unix.Fstatat, retried on EINTR.
func fstatat(dirfd int, path string, st *unix.Stat_t) error {
	return ignoringEINTR(func() error { return unix.Fstatat(dirfd, path, st, 0) })
}

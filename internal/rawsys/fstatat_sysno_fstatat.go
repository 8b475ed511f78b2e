//go:build linux && (arm64 || riscv64)

package rawsys

import "golang.org/x/sys/unix"

const sysFstatat = unix.SYS_FSTATAT

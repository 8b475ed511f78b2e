//go:build linux && (arm64 || riscv64)

package ctlfile

import "golang.org/x/sys/unix"

const sysFstatat = unix.SYS_FSTATAT

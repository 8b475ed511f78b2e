// Package rawsys makes the few system calls of a transport agent's job
// without telling the Go scheduler: open, read, pread, pwrite, fstat,
// fstatat, name_to_handle_at, close and close_range on local files, and
// non-blocking reads and writes on the protocol's stdio. The scheduler's
// reads of control files use the same calls.
//
// A Go system call (syscall.Syscall) marks its P as in a system call and
// wakes the runtime's monitor thread (sysmon) when it sleeps; sysmon then
// polls every 20 µs until the process is idle again, and retakes the P of a
// call that lasts, starting another thread. An agent makes a handful of
// calls per job, each a few microseconds, and on a virtual machine where
// entering the kernel is expensive that bookkeeping (nanosleep, futex and
// context switches on other threads) costs as much as the calls themselves.
// A raw call (syscall.RawSyscall) skips it: the P stays with the goroutine.
//
// So only calls that cannot block for long belong here: a regular local
// file (the page cache; at worst a disk read), or a descriptor in
// non-blocking mode. Blocking waits go through the runtime poller, and
// fsync stays an ordinary system call. While a raw call runs, no other
// goroutine runs on its P and a stop-the-world waits for it.
package rawsys

import (
	"io/fs"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open opens path relative to the directory dirfd (AT_FDCWD for the
// working directory) with flags and O_CLOEXEC. Errors are *fs.PathError,
// as os.OpenFile gives.
func Open(dirfd int, path string, flags int) (int, error) {
	// The NUL-terminated copy of a short path stays on the stack.
	var buf [256]byte
	var p *byte
	if len(path) < len(buf) && strings.IndexByte(path, 0) < 0 {
		copy(buf[:], path)
		p = &buf[0]
	} else {
		var err error
		if p, err = unix.BytePtrFromString(path); err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
	}
	for {
		r, _, e := syscall.RawSyscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)),
			uintptr(flags|unix.O_CLOEXEC), 0, 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return -1, &fs.PathError{Op: "open", Path: path, Err: e}
	}
}

// OpenCwd is Open relative to the working directory.
func OpenCwd(path string, flags int) (int, error) { return Open(unix.AT_FDCWD, path, flags) }

// Close closes fd. It is never retried: Linux releases the descriptor even
// when close fails.
func Close(fd int) error {
	if _, _, e := syscall.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}

// CloseRange closes every descriptor from first to last, both included,
// in one system call: close_range(2), Linux 5.9 and later (ENOSYS before).
// The caller must own every descriptor in the range. Unlike Close it
// reports no error of an individual close.
func CloseRange(first, last int) error {
	if first < 0 || last < first {
		return unix.EINVAL
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_CLOSE_RANGE, uintptr(first), uintptr(last), 0); e != 0 {
		return e
	}
	return nil
}

// Read is read(2), retried on EINTR.
func Read(fd int, b []byte) (int, error) { return bufCall(unix.SYS_READ, fd, b, 0) }

// Write is write(2), retried on EINTR.
func Write(fd int, b []byte) (int, error) { return bufCall(unix.SYS_WRITE, fd, b, 0) }

// Recv is recv(2) with MSG_DONTWAIT, retried on EINTR: a non-blocking read
// of a socket whose descriptor may be in blocking mode.
func Recv(fd int, b []byte) (int, error) {
	return bufCall(unix.SYS_RECVFROM, fd, b, unix.MSG_DONTWAIT)
}

// Send is send(2) with MSG_DONTWAIT and MSG_NOSIGNAL, retried on EINTR: a
// non-blocking write of a socket whose descriptor may be in blocking mode.
// A closed peer is EPIPE, without SIGPIPE.
func Send(fd int, b []byte) (int, error) {
	return bufCall(unix.SYS_SENDTO, fd, b, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
}

// bufCall makes the raw call trap(fd, b, len(b), arg4, 0, 0) — the shape of
// read, write, pread, pwrite, recvfrom and sendto — retried on EINTR.
func bufCall(trap uintptr, fd int, b []byte, arg4 uintptr) (int, error) {
	for {
		r, _, e := syscall.RawSyscall6(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), arg4, 0, 0)
		switch e {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// fstatatGo is unix.Fstatat, retried on EINTR: Fstatat's way for a path
// too long for its stack copy, and its only way where no raw call is set up.
func fstatatGo(dirfd int, path string, st *unix.Stat_t) error {
	for {
		if err := unix.Fstatat(dirfd, path, st, 0); err != unix.EINTR {
			return err
		}
	}
}

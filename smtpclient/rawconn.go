package smtpclient

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// rawConn is a TCP connection read and written with raw non-blocking
// system calls (package rawsys), waiting in the runtime poller only when
// the socket has nothing to read or no room to write.
//
// Why: net.Conn's Read and Write are Go system calls, which mark the P as
// in a system call and wake the runtime's monitor thread (sysmon); sysmon
// then polls every 20 µs while the agent is busy. An SMTP transaction on a
// fast server is a few short writes and reads, and in the agent's profile
// that bookkeeping (sysmon's nanosleeps, futex wake-ups) cost as much as
// the socket calls themselves. A raw call skips it; a socket in
// non-blocking mode (as Go's sockets are) never blocks in one. Deadlines
// still apply: the waits go through the descriptor's poller, which honours
// SetDeadline.
type rawConn struct {
	net.Conn
	rc syscall.RawConn
}

// newRawConn wraps nc in a rawConn when it can (and not under the race
// detector: rawIO); otherwise it returns nc.
func newRawConn(nc net.Conn) net.Conn {
	if !rawIO {
		return nc
	}
	if rc := wrapRaw(nc); rc != nil {
		return rc
	}
	return nc
}

// wrapRaw wraps nc when it is a socket whose descriptor we can reach;
// otherwise (a net.Pipe in tests, a custom dialer's conn) it returns nil.
func wrapRaw(nc net.Conn) *rawConn {
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil
	}
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	return &rawConn{Conn: nc, rc: rc}
}

func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno error
	err := c.rc.Read(func(fd uintptr) bool {
		n, errno = rawsys.Recv(int(fd), b)
		return errno != unix.EAGAIN
	})
	switch {
	case err != nil: // a deadline, or the connection closed
		return 0, c.opError("read", err)
	case errno != nil:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *rawConn) Write(b []byte) (int, error) {
	done := 0
	var errno error
	err := c.rc.Write(func(fd uintptr) bool {
		for done < len(b) {
			n, e := rawsys.Send(int(fd), b[done:])
			if e == unix.EAGAIN {
				return false // wait in the poller for room
			}
			if e != nil {
				errno = e
				return true
			}
			done += n
		}
		return true
	})
	switch {
	case err != nil:
		return done, c.opError("write", err)
	case errno != nil:
		return done, c.opError("write", errno)
	}
	return done, nil
}

// opError wraps err as net.Conn's methods do, so that errors.Is(err,
// os.ErrDeadlineExceeded) and net.Error's Timeout work as on the plain
// connection.
func (c *rawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// pending reports whether the socket has something to read (data, or the
// peer's close), without blocking and without reading it: one recv with
// MSG_PEEK and MSG_DONTWAIT. ok is false when it cannot tell.
func (c *rawConn) pending() (readable, ok bool) {
	var b [1]byte
	var errno syscall.Errno
	err := c.rc.Control(func(fd uintptr) {
		for {
			_, _, errno = syscall.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
				unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
			if errno != unix.EINTR {
				return
			}
		}
	})
	switch {
	case err != nil:
		return false, false
	case errno == unix.EAGAIN:
		return false, true
	}
	// Data, the peer's close (0 bytes) or an error: each ends an idle
	// session.
	return true, true
}

package ta

import (
	"io"
	"os"
	"strconv"
	"syscall"

	"zsched/internal/rawsys"

	"golang.org/x/sys/unix"
)

// The protocol's stdin and stdout, when Agent.In and Agent.Out are nil.
//
// os.Stdin is in blocking mode (the scheduler's socket, pipe or terminal),
// so a read that waits for the next job line holds a thread in read(2):
// the Go runtime's monitor thread notices, polls every 20 µs, takes the P
// away and wakes another thread to hold it, and the reader must get it back
// when the line arrives: futex and nanosleep calls and context switches on
// every wait, which on a virtual machine cost as much as the job itself.
//
// Instead an idle agent waits in the runtime poller and reads and writes
// with raw non-blocking system calls (package rawsys), so that a quick job
// makes no Go system call at all and waiting is one thread asleep in
// epoll_wait:
//
//   - Input: a socket is read with recv and MSG_DONTWAIT, which does not
//     block whatever the file's mode; a pipe or a terminal is reopened
//     through /proc/self/fd with O_NONBLOCK, a new open file of the same
//     pipe or terminal that is non-blocking on its own. O_NONBLOCK is never
//     set on fd 0 itself: with the default socketpair, fds 0, 1 and 2 are
//     one open file, and the agent's other writes to stderr (and the
//     runtime's crash output) would fail with EAGAIN on a full socket.
//   - Waiting for input: the runtime poller registers every file for both
//     input and output, edge-triggered, so it would also wake the agent
//     each time the scheduler reads the agent's output (the socket becomes
//     writable again), a wasted wake-up per job. The input is therefore
//     watched by an epoll instance of our own, for input only, and that
//     instance is what the runtime poller watches.
//   - Output: send with MSG_DONTWAIT (a socket) or write on a reopened
//     O_NONBLOCK descriptor (a pipe or a terminal), never registered with
//     the poller; only when the scheduler has left the socket or pipe full
//     does a write wait, with poll(2) as an ordinary blocking system call.
//
// Anything else (a regular file, /dev/null, no /proc, a terminal we may not
// open) keeps os.Stdin or os.Stdout.

// stdio returns the reader of fd 0 (if wantIn) and the writer of fd 1 (if
// wantOut), and a function that closes the descriptors it opened for them
// (never fds 0 and 1).
func stdio(wantIn, wantOut bool) (io.Reader, io.Writer, func()) {
	var in io.Reader = os.Stdin
	var out io.Writer = os.Stdout
	var pin *pollIn
	var rout *rawOut
	if wantIn {
		if pin = newPollIn(0); pin != nil {
			in = pin
		}
	}
	if wantOut {
		if rout = newRawOut(1); rout != nil {
			out = rout
		}
	}
	return in, out, func() {
		if pin != nil {
			pin.close()
		}
		if rout != nil {
			rout.close()
		}
	}
}

// nonblocking returns a descriptor of fd on which raw reads or writes do
// not block: fd itself for a socket (recv and send take MSG_DONTWAIT), a
// new O_NONBLOCK open file of the same pipe or terminal otherwise. own says
// whether the caller must close it; ok is false when fd is something else
// or the reopen fails.
func nonblocking(fd, mode int) (nfd int, sock, own, ok bool) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -1, false, false, false
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return fd, true, false, true
	case unix.S_IFIFO, unix.S_IFCHR:
		nfd, err := rawsys.OpenCwd("/proc/self/fd/"+strconv.Itoa(fd), mode|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			return -1, false, false, false
		}
		return nfd, false, true, true
	}
	return -1, false, false, false
}

// pollIn reads fd 0 without blocking and waits for input in the runtime
// poller, through an epoll instance that watches the input only.
type pollIn struct {
	fd   int
	sock bool
	own  bool
	ep   *os.File // the epoll instance, registered with the runtime poller
	rc   syscall.RawConn
}

func newPollIn(fd int) *pollIn {
	nfd, sock, own, ok := nonblocking(fd, unix.O_RDONLY)
	if !ok {
		return nil
	}
	p := &pollIn{fd: nfd, sock: sock, own: own}
	if err := p.watch(); err != nil {
		p.close()
		return nil
	}
	return p
}

// watch sets up the epoll instance. A file that cannot be polled
// (/dev/null) fails EpollCtl.
func (p *pollIn) watch() error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(p.fd)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, p.fd, &ev); err != nil {
		unix.Close(ep)
		return err
	}
	// os.NewFile registers a descriptor with the runtime poller only if
	// it is non-blocking.
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return err
	}
	p.ep = os.NewFile(uintptr(ep), "stdin-epoll")
	rc, err := p.ep.SyscallConn()
	if err != nil {
		return err
	}
	p.rc = rc
	return nil
}

func (p *pollIn) close() {
	if p.ep != nil {
		p.ep.Close()
	}
	if p.own {
		rawsys.Close(p.fd)
	}
}

// Read reads what is there, waiting in the poller when nothing is.
func (p *pollIn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	// RawConn.Read calls the function, and while it returns false waits
	// until the epoll instance becomes readable, which it does (edge
	// triggered) each time input arrives.
	err := p.rc.Read(func(uintptr) bool {
		if p.sock {
			n, rerr = rawsys.Recv(p.fd, b)
		} else {
			n, rerr = rawsys.Read(p.fd, b)
		}
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, &os.PathError{Op: "read", Path: "stdin", Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// rawOut writes fd 1 with raw non-blocking writes.
type rawOut struct {
	fd   int
	sock bool
	own  bool
}

func newRawOut(fd int) *rawOut {
	nfd, sock, own, ok := nonblocking(fd, unix.O_WRONLY)
	if !ok {
		return nil
	}
	return &rawOut{fd: nfd, sock: sock, own: own}
}

func (w *rawOut) close() {
	if w.own {
		rawsys.Close(w.fd)
	}
}

// Write writes all of b. A closed reader is EPIPE, without SIGPIPE.
func (w *rawOut) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		var n int
		var err error
		if w.sock {
			n, err = rawsys.Send(w.fd, b[done:])
		} else {
			n, err = rawsys.Write(w.fd, b[done:])
		}
		if err == unix.EAGAIN {
			if err = w.wait(); err == nil {
				continue
			}
		}
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			return done, &os.PathError{Op: "write", Path: "stdout", Err: err}
		}
		done += n
	}
	return done, nil
}

// wait blocks until fd can take output: rare (the scheduler reads its
// agents all the time), so an ordinary system call.
func (w *rawOut) wait() error {
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLOUT}}
	for {
		_, err := unix.Poll(fds, -1)
		if err != unix.EINTR {
			return err
		}
	}
}

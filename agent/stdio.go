package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Stdio is how an agent's standard descriptors are connected to the
// scheduler. The values and their order are those of config.Stdio.
type Stdio uint8

const (
	Socketpair Stdio = iota // fds 0, 1 and 2 are one AF_UNIX stream socket, as ZMailer
	Pipes                   // stdin and stdout pipes; stderr a third pipe, sent as Stderr events
	PTY                     // a pseudo-terminal on fds 0, 1 and 2, for agents that only line-buffer on a tty
)

var stdioNames = [...]string{"socketpair", "pipes", "pty"}

func (s Stdio) String() string {
	if int(s) < len(stdioNames) {
		return stdioNames[s]
	}
	return "Stdio(" + strconv.Itoa(int(s)) + ")"
}

// ptyMaxInput is the longest line the tty driver passes in canonical mode
// (N_TTY_BUF_SIZE less the newline); longer input lines are cut by the kernel.
const ptyMaxInput = 4095

// endpoint is the parent's side of one stream: *os.File and *net.UnixConn
// both are, and both must be non-blocking so deadlines can unblock them.
type endpoint interface {
	io.ReadWriteCloser
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
	SyscallConn() (syscall.RawConn, error)
}

// wiring is what one Stdio mode sets up before the child is started.
type wiring struct {
	in     endpoint   // we write the agent's input here
	out    endpoint   // we read the agent's output here
	stderr endpoint   // Pipes only: the agent's stderr, sent as Stderr events
	child  []*os.File // the child's fds 0, 1, 2 (possibly the same file)
	// eot is written after End's empty line when the input cannot be
	// half-closed (a pty).
	eot []byte
	// closeInput gives the agent EOF on its input; nil when eot does it.
	closeInput func() error
	// eof reports whether a read error is the normal end of output.
	eof  func(error) bool
	ctty bool // the child needs a new session with fd 0 as its controlling tty
}

// closeChild closes the parent's copies of the child's descriptors.
func (w *wiring) closeChild() {
	for _, f := range w.child {
		f.Close() // the same *os.File may appear 3 times; later closes just fail
	}
}

// closeParent closes the parent's ends.
func (w *wiring) closeParent() {
	for _, e := range []endpoint{w.in, w.out, w.stderr} {
		if e != nil {
			e.Close() // in and out may be one endpoint; the second close just fails
		}
	}
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

func newWiring(mode Stdio) (*wiring, error) {
	switch mode {
	case Socketpair:
		return socketpairWiring()
	case Pipes:
		return pipeWiring()
	case PTY:
		return ptyWiring()
	}
	return nil, fmt.Errorf("agent: %w: %v", ErrStdio, mode)
}

func socketpairWiring() (*wiring, error) {
	// CLOEXEC at creation: another agent started concurrently must not
	// inherit our end, or this agent would never see EOF.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "agent-socket")
	theirs := os.NewFile(uintptr(fds[1]), "agent-socket-child")
	// FileConn dups (close-on-exec) and makes the dup non-blocking, so
	// deadlines work and CloseWrite is shutdown(SHUT_WR).
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("agent: socketpair: %w", err)
	}
	conn := c.(*net.UnixConn)
	return &wiring{
		in:         conn,
		out:        conn,
		child:      []*os.File{theirs, theirs, theirs},
		closeInput: conn.CloseWrite,
		eof:        isEOF,
	}, nil
}

func pipeWiring() (*wiring, error) {
	var files []*os.File
	fail := func(err error) (*wiring, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("agent: pipe: %w", err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	files = append(files, inR, inW)
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	files = append(files, outR, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	return &wiring{
		in:         inW,
		out:        outR,
		stderr:     errR,
		child:      []*os.File{inR, outW, errW},
		closeInput: inW.Close,
		eof:        isEOF,
	}, nil
}

func ptyWiring() (*wiring, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("agent: pty: %w", err)
	}
	// pty.Open leaves the master in blocking mode (it calls Fd), and a
	// blocking *os.File can neither take deadlines nor be closed under a
	// blocked Read. A non-blocking dup goes through the runtime poller.
	fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	master.Close()
	if err != nil {
		tty.Close()
		return nil, fmt.Errorf("agent: pty: %w", err)
	}
	m := os.NewFile(uintptr(fd), "agent-pty")
	if err := setTerm(tty); err != nil {
		m.Close()
		tty.Close()
		return nil, fmt.Errorf("agent: pty: %w", err)
	}
	return &wiring{
		in:    m,
		out:   m,
		child: []*os.File{tty, tty, tty},
		// A pty cannot half-close. With ICANON on, EOT at the start of a
		// line makes the agent's read return 0: a real EOF.
		eot: []byte{0x04},
		// When the last holder of the slave closes it, Linux reads on the
		// master return EIO after the buffered output: that is the EOF.
		eof: func(err error) bool { return isEOF(err) || errors.Is(err, syscall.EIO) },

		ctty: true,
	}, nil
}

// setTerm makes the terminal byte-exact in both directions except for what
// End needs.
//
// Output: OPOST off, so "\n" is not turned into "\r\n" (no ONLCR) and the
// agent's lines arrive as written.
//
// Input: ECHO off, or every job line would come back as a report line.
// ICANON stays on, unlike a raw terminal, because it is what makes EOT (0x04)
// an end-of-file for the agent, and a pty has no other way to say EOF
// (closing the master would hang up the agent instead). Everything else
// canonical mode would do to input is switched off: no signals (ISIG), no
// erase/kill/word-erase/reprint/literal-next characters, no CR/NL
// translation, no flow control. What remains: 0x04 in a line means EOF, and
// an input line is cut at 4095 bytes (job lines are a path and a host).
func setTerm(tty *os.File) error {
	fd := int(tty.Fd())
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR |
		unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF | unix.IUCLC | unix.IMAXBEL
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHOE | unix.ECHOK | unix.ECHONL | unix.ECHOCTL |
		unix.ECHOKE | unix.ISIG | unix.IEXTEN
	t.Lflag |= unix.ICANON
	t.Cflag = t.Cflag&^(unix.CSIZE|unix.PARENB) | unix.CS8
	for _, c := range []int{unix.VINTR, unix.VQUIT, unix.VERASE, unix.VKILL, unix.VEOL,
		unix.VEOL2, unix.VSTART, unix.VSTOP, unix.VSUSP, unix.VREPRINT, unix.VWERASE,
		unix.VLNEXT, unix.VDISCARD} {
		t.Cc[c] = 0 // _POSIX_VDISABLE on Linux
	}
	t.Cc[unix.VEOF] = 0x04
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

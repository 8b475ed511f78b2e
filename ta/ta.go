// Package ta owns the agent side of ZMailer's scheduler↔transport-agent
// protocol, so that a transport agent's author writes only "deliver these
// recipients". It runs the #hungry loop on stdin/stdout, opens each job's
// control file, locks the r lines that belong to the agent (~ and its PID),
// hands them to a delivery function, then for every recipient marks the
// status byte (+, -, or back to blank), appends the d line that ok2 and
// error2 promise, and writes the report line. Recipients the delivery
// function forgets are reported deferred and unlocked, never lost.
// Agent.Instant (a null agent; outside the protocol's §7.2) writes no
// lock, only the marks.
//
// The wire behaviour follows what ZMailer's own agents were observed to do
// (reference/zmailer-ta-observed.md §4.1–§4.4): one #hungry before every
// read, #resync for a job the agent cannot use, exit without #hungry on a
// control file with unknown format flags, and a partial last line at EOF
// dropped unread.
//
// An agent spends its life on short jobs, a few system calls each, and
// waits in between; Serve keeps both cheap. The per-job calls on the
// control file and the message are raw system calls (package
// zsched/internal/rawsys) that do not wake the Go runtime's monitor thread,
// and on the process's own stdin and stdout the agent reads and writes
// without blocking and waits for the next job line in the runtime poller,
// so an idle agent is one thread asleep in epoll_wait rather than a thread
// blocked in read(2) that the runtime must notice, hand off and take back.
// Nothing of this shows on the wire; a write to a scheduler that has gone
// away is an error (EPIPE) that Serve returns, not a SIGPIPE.
//
// Consecutive jobs of one message (one per host, or the same host again
// after a deferral) reuse its control file and message file, kept open
// since the job before: the job's path is checked to still name the file
// kept open (fstatat against fstat, device and inode — a number the kernel
// cannot give another file while the agent holds this one open), and the
// status of each recipient is read again from the file before its lock is
// taken, as a fresh open would have read it. The files are closed when a
// job names another message, on #idle, on a #resync, when a job leaves no
// recipient of the message pending (the scheduler is about to remove it)
// and when Serve returns; an agent thus holds at most one message's files
// between jobs.
//
// Job files are opened, and the reuse check made, relative to the hash
// directory's own descriptor ("A/B" of "A/B/12345", in transport/ and in
// queue/), kept open from the first job that names it: one name walked
// instead of the whole path (see hashDirs). An agent that never reads the
// message (Agent.NoBody, the sink) learns that the message file is there
// with a stat rather than an open. Control files and message files are
// opened with O_NOATIME where the kernel permits it.
package ta

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"zsched/ctlfile"
	"zsched/internal/rawsys"
	"zsched/report"

	"golang.org/x/sys/unix"
)

// ErrUnsupportedFormat is returned by Serve when a job's control file has
// '@' format flags this agent does not know. ZMailer's agents stop there
// rather than risk misreading the file; a newer scheduler must be matched
// by newer agents.
var ErrUnsupportedFormat = errors.New("ta: unsupported control file format")

// Agent is one transport agent's side of the protocol.
// The zero value of every field but Channel is usable.
type Agent struct {
	// Channel selects the r lines this agent delivers: their channel must
	// equal it exactly (ZMailer compares channels with strcmp). "" matches
	// every channel, as libta does when it is given none.
	Channel string
	// Host is the destination of a host-bound agent (the clause's
	// standalone $host argument); job lines then carry no host. A host on
	// the job line wins. When both are empty every host matches, as in
	// libta.
	Host string
	// Name is the agent's name in '#' comment lines and in the notary's
	// agent field, name[pid].
	Name string
	// Dir is the directory job paths are relative to. "" means the working
	// directory, which is postoffice/transport when the scheduler starts
	// the agent. Message bodies are found at Dir/../queue/<hash dir>/<id>.
	Dir string
	// In and Out carry the protocol; nil means the process's stdin and
	// stdout (fds 0 and 1), which Serve reads and writes with non-blocking
	// system calls and waits on in the runtime poller (see the package
	// documentation).
	In  io.Reader
	Out io.Writer
	// PID is written into the locks; 0 means os.Getpid(). A lock must name
	// a live process, else the scheduler clears it as stale.
	PID int
	// Now stamps d lines; nil means time.Now.
	Now func() time.Time
	// Instant declares that the delivery function takes no time and acts
	// on nothing outside this process before it returns: a null agent.
	// Serve then writes no lock into the control file, only each
	// recipient's outcome, where the lock and the mark are one write; a
	// recipient deferred leaves the file as it was. The lock is there so
	// that, while a delivery runs, a restarted scheduler or another agent
	// sees the recipient taken; a delivery that is over before it could
	// be seen leaves nothing to see, and ZMailer's order holds: the mark
	// is on disk before the report line. Each unwritten lock spares a
	// system call per job and, on a journalling filesystem, an update of
	// the file's change time. Rcpt(i).PID stays 0.
	//
	// It departs from docs/ta-protocol.md §7.2 (lock every recipient
	// before reading the body and hold the lock until the line is
	// marked), and package tacheck's lock case fails such an agent: the
	// project's agents leave it off; it measures what the lock costs.
	Instant bool
	// NoBody declares that the delivery function never reads the
	// message: Body returns nil and BodyFD -1. Serve then looks for the
	// message file with a stat rather than opening it, once per message
	// whose files are kept: a missing one is still libta's error2 (the
	// protocol asks an agent to check), and the open file, its close and
	// the descriptor are spared. A null agent's choice; an agent that
	// reads the message leaves it off.
	//
	// A message file that is not a regular file is opened all the same,
	// after the locks as for any agent, and closed unread: its open may be
	// what its writer waits for. Package tacheck's lock case makes it a
	// FIFO that it feeds once it has seen the locks, which is how it sees
	// them.
	NoBody bool
}

// Result is the outcome for one locked recipient.
type Result struct {
	Rcpt   int           // index into Delivery.File.Rcpts, one of Delivery.Rcpts
	Status report.Status // the status word
	// Notary is the DSN data. For ok2 and error2 it goes into the d line
	// (the report then carries an empty notary, as ZMailer's agents do),
	// and a zero Notary is filled in from the recipient; otherwise it goes
	// on the report line as given. An empty Agent field is set to name[pid]
	// whenever the notary is not empty.
	Notary report.Notary
	Text   string // free text after the status word; newlines become CR
	// Retry is retryat's argument: "+N" seconds from now, or an absolute
	// epoch second. Empty means "+60", what ZMailer's smtp agent sends.
	Retry string
}

// Delivery is one job: the recipients of one control file that this agent
// locked for one host. The delivery function may read the message from Body
// and may Report results as they happen; it returns the rest. Serve uses
// the same Delivery for the next job: keep nothing of it (Rcpts included)
// once the delivery function has returned.
type Delivery struct {
	File  *ctlfile.File
	Path  string // the job path as the scheduler sent it, e.g. "A/12345"
	Host  string // the destination: from the job line, else Agent.Host
	Rcpts []int  // indexes into File.Rcpts of the locked recipients, in file order

	s      *session
	h      *ctlfile.Handle
	state  []rcptState // by index into File.Rcpts
	bodyFD int         // the message file, open for reading; -1 once closed
	body   *os.File    // bodyFD as an *os.File, once Body made it
	// bodySeen: the message file was found, open in bodyFD or, for an
	// Agent.NoBody, there at a stat (in this job or an earlier one of
	// the message whose files are kept).
	bodySeen bool
	reused   bool // h and bodyFD were kept open from the message's last job
	// direct: Path is local and clean (cleanLocal), opened relative to
	// the directory descriptors.
	direct bool
	// ctlAt and ctlName are where the control file was opened (openCtl),
	// for the next job's reuse check; ctlAt is -1 for a whole path.
	ctlAt   int
	ctlName string
	id      kept // h's identity, as far as known (reused)
	// resynced: the job was answered #resync; its files are not kept.
	resynced bool
	// unlocked: the locks were taken in memory only (Agent.Instant).
	unlocked bool

	// Room for state and Rcpts of a job of few recipients, the common
	// case: one allocation a job rather than three.
	stateBuf [16]rcptState
	rcptsBuf [4]int
}

type rcptState uint8

const (
	notOurs rcptState = iota
	locked
	reported
)

// Rcpt returns the recipient with index i in File.Rcpts.
func (d *Delivery) Rcpt(i int) *ctlfile.Rcpt { return &d.File.Rcpts[i] }

// Body returns the message file, open for reading; the body starts at
// File.BodyOffset. Serve opens it after taking the locks and before calling
// the delivery function (a missing one is error2 for every recipient, as in
// libta), and closes it when the function returns; Body is nil after that.
// The *os.File is made on the first call, so an agent that never reads the
// message pays only the open and the close.
func (d *Delivery) Body() *os.File {
	if d.body == nil && d.bodyFD >= 0 && !d.s.a.NoBody {
		if d.reused {
			// Kept from the message's last job: at offset 0 again, as a
			// fresh open would be.
			unix.Seek(d.bodyFD, 0, io.SeekStart)
		}
		d.body = os.NewFile(uintptr(d.bodyFD), d.s.bodyPath(d.Path, d.File.ID))
	}
	return d.body
}

// BodyFD is the message file's descriptor, open for reading while the
// delivery function runs (Serve closes it, or keeps it for the message's
// next job), for an agent that reads it with raw system calls: it spares
// the *os.File that Body makes and its own close. Read it with pread: its
// offset is where the last job of the message left it. Do not close it.
// -1 when the file is not open.
func (d *Delivery) BodyFD() int {
	if d.s.a.NoBody {
		return -1
	}
	if d.body != nil {
		return int(d.body.Fd())
	}
	return d.bodyFD
}

// Report settles one recipient at once, while the delivery function runs
// (never after it returned), and flushes so the scheduler sees it now: an
// SMTP agent reports a refused RCPT before DATA, as ZMailer's smtp does.
// A recipient already settled, or not held by this delivery, is ignored
// with a '#' comment. The error is a failure to write to the scheduler.
func (d *Delivery) Report(r Result) error {
	d.settle(r)
	return d.s.flush()
}

// Serve runs the protocol until the scheduler sends an empty line or closes
// In, and then returns nil. It prints #hungry before every read, and
// flushes before any read that could block (and at least every
// millisecond): job lines already buffered are taken without a flush in
// between, so the reports of quick jobs go out together. Each job line, "path\thost" or "path", is opened relative to Dir;
// the pending r lines of Channel and the job's host (compared without case)
// are locked and passed to deliver, which returns one Result per recipient
// it did not Report. Serve then marks and reports each: delivered → '+',
// permanent → '-', temporary → ' ', with the PID columns blanked; ok2 and
// error2 also append a d line. A job it cannot use is answered "#resync
// path". It returns ErrUnsupportedFormat (without a #hungry) on a control
// file with unknown format flags, and an error when Out fails.
func (a *Agent) Serve(deliver func(d *Delivery) []Result) error {
	s := newSession(a)
	defer s.close()
	for {
		s.w.WriteString("#hungry\n")
		// Flush before a read that may block, and at least every
		// flushEvery. While the scheduler has fed more lines (overfeed)
		// and jobs are quick, the reports and #hungry lines of
		// consecutive jobs go out in one write: the same bytes in the
		// same order, one system call and one wake-up of the scheduler
		// instead of one per job. A slow job's report is never held
		// back longer than flushEvery.
		if !s.lineBuffered() || time.Since(s.flushed) >= flushEvery {
			if err := s.flush(); err != nil {
				return err
			}
		}
		line, err := s.readLine()
		if errors.Is(err, errLineTooLong) {
			s.comment("ignored an input line over %d bytes", s.r.Size())
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Includes a partial last line: the scheduler died
				// mid-write, so the line is not a job.
				return nil
			}
			return fmt.Errorf("ta: read: %w", err)
		}
		switch {
		case len(line) == 0:
			return s.flush()
		case string(line) == "#idle":
			// Nothing to do for a while: hold no message's files.
			s.drop()
			continue
		case line[0] == '#':
			s.comment("ignored %q", line)
			continue
		}
		pb, hb, ok := bytes.Cut(line, []byte{'\t'})
		// The line's strings, without a copy when they are those of the
		// job before: the same message, or the same host.
		p := s.kept.path
		if string(pb) != p {
			p = string(pb)
		}
		host := a.Host
		if ok {
			if string(hb) != s.host {
				s.host = string(hb)
			}
			host = s.host
		}
		if err := s.job(p, host, deliver); err != nil {
			if ferr := s.flush(); ferr != nil {
				return errors.Join(err, ferr)
			}
			return err
		}
	}
}

// session is the state of one Serve call.
type session struct {
	a     *Agent
	r     *bufio.Reader
	w     *bufio.Writer
	pid   int
	name  string
	ident string // name[pid]
	now   func() time.Time
	werr  error
	// flushed is when output was last flushed, by time.Now rather than
	// Agent.Now: only its monotonic reading is used (time.Since reads the
	// monotonic clock alone, one vDSO call where time.Now makes two, and
	// the check runs after every job).
	flushed time.Time
	// closeStdio releases the descriptors Serve opened for stdin and
	// stdout.
	closeStdio func()

	// dirFD and queueFD are Dir and Dir/../queue, opened (O_PATH) when
	// Serve starts, so that a job's two opens walk the job path alone,
	// never "..": dirFD is AT_FDCWD when Dir is "", and either is -1
	// while its open fails (a directory that does not exist yet): jobs
	// then open by the whole path, as before, and the next job tries
	// again. A directory renamed while Serve runs is still used.
	dirFD, queueFD int
	// ctlDirs and bodyDirs are the hash directories of Dir and of
	// Dir/../queue, open (O_PATH) since a job first named each (see
	// hashDirs).
	ctlDirs, bodyDirs hashDirs
	// closing holds the descriptors of finished jobs, to be closed
	// together before the next flush (closeFinished).
	closing []int
	// noCloseRange is set once close_range has failed (an old kernel, a
	// seccomp filter): descriptors are then closed one by one.
	noCloseRange bool
	// noNoatime is set once an open with O_NOATIME has been refused: the
	// agent does not own the queue's files.
	noNoatime bool
	// kept is the message of the last job, its files still open, for
	// the next job if it names the same control file.
	kept kept
	// d is the job's Delivery, one for the session (job).
	d Delivery
	// host is the last job line's host, its string kept for the next.
	host string
}

// kept is a message's files kept open between two of its jobs.
type kept struct {
	path   string          // the job path; "" when nothing is kept
	h      *ctlfile.Handle // the control file
	bodyFD int             // the message file, -1 if not kept
	// bodySeen: the message file was found (bodyFD, or a stat for an
	// Agent.NoBody); the next job need not look for it again.
	bodySeen bool
	// dirfd and name are where the path leads (Delivery.ctlAt and
	// ctlName): reuse's fstatat walks name from dirfd, -1 for none.
	dirfd int
	name  string
	// dev and ino identify h's file (fstat), taken when a job first
	// names it again.
	dev, ino uint64
	statted  bool
}

func newSession(a *Agent) *session {
	s := &session{a: a, pid: a.PID, now: a.Now, dirFD: -1, queueFD: -1}
	s.ctlDirs.max = dirLimit()
	s.bodyDirs.max = s.ctlDirs.max
	if a.Dir == "" {
		s.dirFD = unix.AT_FDCWD
	}
	in, out, closeStdio := stdio(a.In == nil, a.Out == nil)
	s.closeStdio = closeStdio
	// Opened now, before any job, so that they do not sit between a
	// job's two descriptors (see closeLater).
	s.openDirs()
	if a.In != nil {
		in = a.In
	}
	if a.Out != nil {
		out = a.Out
	}
	// Job lines are short; the reader's size caps them, like the line
	// limit the scheduler applies to us.
	s.r = bufio.NewReaderSize(in, 64<<10)
	s.w = bufio.NewWriterSize(out, 64<<10)
	if s.pid == 0 {
		s.pid = os.Getpid()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.name = a.Name
	if s.name == "" {
		s.name = "ta"
	}
	s.ident = s.name + "[" + strconv.Itoa(s.pid) + "]"
	return s
}

// close releases what the session holds open.
func (s *session) close() {
	s.drop()
	s.closeFinished()
	s.ctlDirs.close()
	s.bodyDirs.close()
	for _, fd := range [...]int{s.dirFD, s.queueFD} {
		if fd >= 0 {
			rawsys.Close(fd)
		}
	}
	s.closeStdio()
}

// flush writes out the buffered output, after closing the descriptors of
// the finished jobs whose reports it carries.
func (s *session) flush() error {
	s.closeFinished()
	if s.werr != nil {
		return s.werr
	}
	s.flushed = time.Now()
	if err := s.w.Flush(); err != nil {
		s.werr = fmt.Errorf("ta: write: %w", err)
	}
	return s.werr
}

// lineBuffered reports whether a whole input line is already buffered, so
// reading it cannot block.
func (s *session) lineBuffered() bool {
	b, _ := s.r.Peek(s.r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// flushEvery bounds how long reports may wait in the output buffer while
// more job lines are buffered: far below any jobtimeout, and long enough
// to gather the reports of many quick jobs into one write.
const flushEvery = time.Millisecond

var errLineTooLong = errors.New("ta: input line too long")

// readLine returns the next line without its newline, valid until the
// next read. A line that does not fit the buffer is consumed and reported
// as errLineTooLong: no job path is that long, and the line still gets
// its #hungry.
func (s *session) readLine() ([]byte, error) {
	b, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = s.r.ReadSlice('\n')
		}
		if err == nil {
			err = errLineTooLong
		}
	}
	if err != nil {
		return nil, err
	}
	b = b[:len(b)-1]
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b, nil
}

// comment writes a '#' line, which the scheduler logs and otherwise ignores.
func (s *session) comment(format string, args ...any) {
	s.w.WriteString("# ")
	s.w.WriteString(s.name)
	s.w.WriteString(": ")
	s.w.WriteString(strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "\r"))
	s.w.WriteByte('\n')
}

func (s *session) resync(p string) {
	s.w.WriteString("#resync ")
	s.w.WriteString(p)
	s.w.WriteByte('\n')
}

// missingBody is libta's text for a message file that is gone; the
// scheduler and operators know it.
const missingBody = "message file is missing(!) -- possibly due to delivery scheduler restart.  Consider resending your message"

// job handles one job line. Its error ends Serve.
func (s *session) job(p, host string, deliver func(*Delivery) []Result) error {
	// A job path as the scheduler writes it ("A/B/12345") is opened
	// relative to the directory descriptors; anything else ("..",
	// absolute, unclean) by the whole path, exactly as before they
	// existed.
	direct := cleanLocal(p)
	// One Delivery serves every job: the delivery function may not keep
	// it (nor call Report) once it has returned.
	d := &s.d
	if direct && s.kept.path == p {
		if k, ok := s.reuse(); ok {
			*d = Delivery{File: k.h.File, Path: p, Host: host, s: s, h: k.h, bodyFD: k.bodyFD, bodySeen: k.bodySeen,
				reused: true, id: k, direct: true, ctlAt: k.dirfd, ctlName: k.name}
			return s.run(d, deliver)
		}
	}
	s.drop()
	h, dirfd, name, err := s.openCtl(p, direct)
	if err != nil {
		if errors.Is(err, ctlfile.ErrUnknownFormat) {
			s.comment("unsupported format flags in %q: %v", p, err)
			s.resync(p)
			return fmt.Errorf("%w: %s: %w", ErrUnsupportedFormat, p, err)
		}
		s.comment("cannot open control file %q: %v", p, err)
		s.resync(p)
		return nil
	}
	*d = Delivery{File: h.File, Path: p, Host: host, s: s, h: h, bodyFD: -1, direct: direct, ctlAt: dirfd, ctlName: name}
	return s.run(d, deliver)
}

// run locks d's recipients, opens the message file unless d has it
// already, and has them delivered.
func (s *session) run(d *Delivery, deliver func(*Delivery) []Result) error {
	p := d.Path
	defer s.finish(d)
	if !s.lock(d) {
		s.resync(p)
		d.resynced = true
		return nil
	}
	if d.bodyFD >= 0 || d.bodySeen {
		return s.deliver(d, deliver)
	}

	// A raw descriptor, and an *os.File only if the agent asks (Body);
	// for an agent that never reads the message, a stat.
	var bodyFD int
	var err error
	if s.a.NoBody {
		var regular bool
		bodyFD = -1
		if regular, err = s.statBody(p, d.File.ID, d.direct); err == nil && !regular {
			bodyFD, err = s.openBody(p, d.File.ID, d.direct)
		}
	} else {
		bodyFD, err = s.openBody(p, d.File.ID, d.direct)
	}
	if err != nil {
		res := Result{Status: report.Error2, Notary: report.Notary{Action: "failed"}, Text: missingBody}
		if !errors.Is(err, fs.ErrNotExist) {
			// Unlike libta, a body we may not read today is not a
			// reason to bounce the message.
			res = Result{Status: report.Deferred, Text: "cannot open message file: " + err.Error()}
		}
		for _, i := range d.Rcpts {
			res.Rcpt = i
			d.settle(res)
		}
		s.comment("cannot open message file %q: %v", s.bodyPath(p, d.File.ID), err)
		s.resync(p)
		d.resynced = true
		return nil
	}
	d.bodyFD, d.bodySeen = bodyFD, true
	return s.deliver(d, deliver)
}

// deliver calls the delivery function and settles what it left.
func (s *session) deliver(d *Delivery, deliver func(*Delivery) []Result) error {
	for _, r := range deliver(d) {
		d.settle(r)
	}
	for _, i := range d.Rcpts {
		if d.state[i] == locked {
			d.settle(Result{Rcpt: i, Status: report.Deferred, Text: "address was left locked"})
		}
	}
	return nil
}

// openCtl opens and parses the control file of job path p; direct says p
// is a local, clean path that may be opened relative to dirFD.
// It returns too the directory descriptor and name the file was opened
// at, for reuse's check (-1 when it was opened by the whole path).
func (s *session) openCtl(p string, direct bool) (h *ctlfile.Handle, dirfd int, name string, err error) {
	if direct {
		s.openDirs()
		if s.dirFD != -1 {
			hash := cleanHashDir(p)
			if hd, ok := s.dirOf(&s.ctlDirs, hash); ok {
				name := p[len(hash)+1:]
				h, err := s.openCtlAt(hd.fd, hd.dir, name)
				if !errors.Is(err, fs.ErrNotExist) {
					return h, hd.fd, name, err
				}
				// The directory may have been replaced since it was
				// opened: the whole path decides.
				s.ctlDirs.forget(hash)
			}
			h, err := s.openCtlAt(s.dirFD, s.a.Dir, p)
			return h, s.dirFD, p, err
		}
	}
	ctl := p
	if s.a.Dir != "" {
		ctl = filepath.Join(s.a.Dir, p)
	}
	h, err = ctlfile.Open(ctl)
	return h, -1, "", err
}

// openCtlAt is ctlfile.OpenAt with O_NOATIME where the kernel permits it
// (see openRead): the control file is read at every job's open, and
// written (locks, marks) between two reads, so that relatime would write
// its access time at nearly every open.
func (s *session) openCtlAt(dirfd int, dir, name string) (*ctlfile.Handle, error) {
	if !s.noNoatime {
		h, err := ctlfile.OpenAtFlags(dirfd, dir, name, unix.O_NOATIME)
		if !errors.Is(err, unix.EPERM) {
			return h, err
		}
		s.noNoatime = true
	}
	return ctlfile.OpenAt(dirfd, dir, name)
}

// openBody opens the message file of job path p, whose control file names
// it id, for reading. Errors are *fs.PathError naming bodyPath.
func (s *session) openBody(p, id string, direct bool) (int, error) {
	if direct {
		s.openDirs()
		if s.queueFD != -1 {
			hash := cleanHashDir(p)
			if hd, ok := s.dirOf(&s.bodyDirs, hash); ok {
				fd, err := s.openRead(hd.fd, id)
				if !errors.Is(err, fs.ErrNotExist) {
					if pe, ok := err.(*fs.PathError); ok {
						pe.Path = s.bodyPath(p, id)
					}
					return fd, err
				}
				s.bodyDirs.forget(hash) // as in openCtl
			}
			fd, err := s.openRead(s.queueFD, bodyName(p, id))
			if pe, ok := err.(*fs.PathError); ok {
				pe.Path = s.bodyPath(p, id)
			}
			return fd, err
		}
	}
	return s.openRead(unix.AT_FDCWD, s.bodyPath(p, id))
}

// statBody is openBody for an agent that does not read the message
// (Agent.NoBody): whether the message file is there, and a regular file,
// by a stat, which spares the open file and its close. Errors are
// *fs.PathError naming bodyPath.
func (s *session) statBody(p, id string, direct bool) (regular bool, err error) {
	var st unix.Stat_t
	dirfd, name := unix.AT_FDCWD, ""
	if direct {
		s.openDirs()
		if s.queueFD != -1 {
			dirfd, name = s.queueFD, bodyName(p, id)
			hash := cleanHashDir(p)
			if hd, ok := s.dirOf(&s.bodyDirs, hash); ok {
				err := rawsys.Fstatat(hd.fd, id, &st)
				if err != unix.ENOENT {
					if err != nil {
						return false, &fs.PathError{Op: "stat", Path: s.bodyPath(p, id), Err: err}
					}
					return st.Mode&unix.S_IFMT == unix.S_IFREG, nil
				}
				s.bodyDirs.forget(hash) // as in openCtl
			}
		}
	}
	if dirfd == unix.AT_FDCWD {
		name = s.bodyPath(p, id)
	}
	if err := rawsys.Fstatat(dirfd, name, &st); err != nil {
		return false, &fs.PathError{Op: "stat", Path: s.bodyPath(p, id), Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG, nil
}

// bodyName is the message file of job path p, whose control file names it
// id, relative to queue/: the job's hash directories and, normally, its
// name.
func bodyName(p, id string) string {
	hash := cleanHashDir(p)
	if hash == "" {
		return id
	}
	if p[len(hash)+1:] == id {
		return p
	}
	return hash + "/" + id
}

// openRead opens a message file for reading with O_NOATIME where the
// kernel permits it (the agent owns the file, or has CAP_FOWNER): an
// agent's read of the message is no reason to write its inode, which on a
// journalling filesystem mounted relatime (the default) is a journal
// update the first time the message is read. Where O_NOATIME is refused
// (EPERM) the agent opens without it from then on.
func (s *session) openRead(dirfd int, name string) (int, error) {
	if !s.noNoatime {
		fd, err := rawsys.Open(dirfd, name, unix.O_RDONLY|unix.O_NOATIME)
		if !errors.Is(err, unix.EPERM) {
			return fd, err
		}
		s.noNoatime = true
	}
	return rawsys.Open(dirfd, name, unix.O_RDONLY)
}

// bodyPath is the message file of job path p whose control file names it
// id: Dir/../queue/<p's hash directories>/id.
func (s *session) bodyPath(p, id string) string {
	return filepath.Join(s.a.Dir, "..", "queue", hashDir(p), id)
}

// openDirs opens dirFD and queueFD where they are not open: at the start
// of Serve, and again before a job while an open fails (a directory that
// does not exist yet).
func (s *session) openDirs() {
	if s.dirFD == -1 {
		s.dirFD = openDir(s.a.Dir)
	}
	if s.queueFD == -1 {
		s.queueFD = openDir(filepath.Join(s.a.Dir, "..", "queue"))
	}
}

// openDir opens dir for use as a directory descriptor only (O_PATH), or
// returns -1.
func openDir(dir string) int {
	fd, err := rawsys.OpenCwd(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1
	}
	return fd
}

// finish keeps a job's files open for the message's next job, or closes
// them after a #resync (the scheduler reads the file again; so shall the
// next job). An *os.File that Body made is closed now, and the message
// file is then not kept.
//
// Nor are the files of a message this job has finished, as far as the
// file read at its open shows (no r line left pending or locked): the
// scheduler removes the message once it has the report, so no job of it
// can follow, and an agent that still held it open would make the last
// close, where the kernel frees the file's blocks: on ext4 mounted
// discard without a journal, a wait for the disk in the agent's path
// rather than in the scheduler's removers. Closed with the job's other
// descriptors before the flush that sends the report, the files are
// the scheduler's to free.
func (s *session) finish(d *Delivery) {
	if !d.resynced && !settled(d.File) {
		k := kept{path: d.Path, h: d.h, bodyFD: d.bodyFD, bodySeen: d.bodySeen, dirfd: d.ctlAt, name: d.ctlName,
			dev: d.id.dev, ino: d.id.ino, statted: d.id.statted}
		if d.body != nil {
			d.body.Close()
			d.body = nil
			k.bodyFD, k.bodySeen = -1, false
		}
		d.bodyFD = -1
		s.kept = k
		return
	}
	s.release(d.h, d.bodyFD, d.body)
	d.body, d.bodyFD = nil, -1
}

// settled reports whether every r line of f, as last read or written, is
// delivered or failed.
func settled(f *ctlfile.File) bool {
	for i := range f.Rcpts {
		if st := f.Rcpts[i].Status; st != ctlfile.Done && st != ctlfile.Failed {
			return false
		}
	}
	return true
}

// release closes a control file and a message file (bodyFD, or body when
// Body made it): the raw descriptors are queued for closeFinished, an
// *os.File is closed now.
func (s *session) release(h *ctlfile.Handle, bodyFD int, body *os.File) {
	fd, err := h.Release()
	if err != nil {
		s.comment("%v", err)
	}
	if fd >= 0 {
		s.closeLater(fd)
	}
	if body != nil {
		body.Close()
	} else if bodyFD >= 0 {
		s.closeLater(bodyFD)
	}
}

// drop closes the files kept from the last job, if any.
func (s *session) drop() {
	if s.kept.h == nil {
		return
	}
	s.release(s.kept.h, s.kept.bodyFD, nil)
	s.kept = kept{}
}

// reuse takes the files kept from the last job, whose path the job names
// again, if the path still leads to the control file kept open: not if
// the message was removed, or its files replaced (a rename over it). The
// inode number of a file kept open is not given to another, so device and
// inode decide. Otherwise the kept files stay for drop.
func (s *session) reuse() (kept, bool) {
	k := s.kept
	var st unix.Stat_t
	if !k.statted {
		if err := rawsys.Fstat(k.h.FD(), &st); err != nil {
			return kept{}, false
		}
		k.dev, k.ino, k.statted = st.Dev, st.Ino, true
		s.kept = k
	}
	// Where the control file was opened: through its hash directory's
	// descriptor, which stays open while the file is kept (a directory
	// replaced since fails the check, and the fresh open walks the whole
	// path).
	if k.dirfd == -1 || rawsys.Fstatat(k.dirfd, k.name, &st) != nil || st.Dev != k.dev || st.Ino != k.ino {
		return kept{}, false
	}
	s.kept = kept{}
	return k, true
}

// hashDirs keeps the spool's hash directories ("A/B" of a job path
// "A/B/12345") open as O_PATH descriptors, one per directory a job named,
// so that a job's open, stat and reuse check walk one name rather than
// the whole path: each component is a dentry lookup, and the lookups
// were the largest item in a sink's kernel time. A spool has a bounded
// set of them (26×26 with two levels); past dirLimit, and where the
// open fails, the whole path is walked as before.
//
// A descriptor follows its directory, not the name: a hash directory
// removed and made again leaves the cached one empty, so a file not found
// through it is looked for by the whole path before the answer counts
// (forget). One renamed away while its files stay in it is still used,
// for opens and for the reuse check, as Dir and the queue directory are:
// nothing renames hash directories (the scheduler and ZMailer's router
// rename files into them); a file renamed over another in its directory
// is seen.
type hashDirs struct {
	fds map[string]hashDir1
	max int // the most it holds: dirLimit
}

// hashDir1 is one open hash directory: its descriptor, and its path as
// ctlfile.OpenAt wants it (Dir joined with the hash directories).
type hashDir1 struct {
	fd  int
	dir string
}

// maxHashDirs bounds the descriptors a hashDirs holds.
const maxHashDirs = 1024

// dirLimit is how many hash directories each of the session's two
// hashDirs may hold open: maxHashDirs, or an eighth of the process's
// descriptor limit where that is less (a limit of 1024 leaves 768 for
// the jobs, the runtime and the delivery function: a job that cannot
// open its control file would be resynced again and again).
func dirLimit() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int(min(uint64(maxHashDirs), rl.Cur/8))
}

// open opens the hash directory hash under base (whose path is dir) and
// keeps it; false when it cannot be kept open.
func (c *hashDirs) open(base int, dir, hash string) (hashDir1, bool) {
	if len(c.fds) >= c.max {
		return hashDir1{}, false
	}
	fd, err := rawsys.Open(base, hash, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
			c.max = len(c.fds) // no more of them
		}
		return hashDir1{}, false
	}
	if c.fds == nil {
		c.fds = make(map[string]hashDir1)
	}
	hd := hashDir1{fd: fd, dir: filepath.Join(dir, hash)}
	c.fds[strings.Clone(hash)] = hd
	return hd, true
}

// dirOf returns the open hash directory hash of c (s.ctlDirs or
// s.bodyDirs), opening it on first use, with its counterpart in the other
// (openHashDirs); false when hash is "" or it cannot be kept open.
func (s *session) dirOf(c *hashDirs, hash string) (hashDir1, bool) {
	if hash == "" {
		return hashDir1{}, false
	}
	if hd, ok := c.fds[hash]; ok {
		return hd, true
	}
	s.openHashDirs(hash)
	hd, ok := c.fds[hash]
	return hd, ok
}

// openHashDirs opens the hash directory hash in Dir and in the queue
// directory, where not open yet: when a job first needs either, before it
// opens the control file. The finished jobs' descriptors are closed first
// (early, which nothing depends on: see closeLater), so that the new
// descriptors take the lowest free numbers, below every job's: a
// directory's descriptor between two jobs' would split the runs that
// close_range closes in one call, for the rest of the agent's life.
func (s *session) openHashDirs(hash string) {
	_, ctlOpen := s.ctlDirs.fds[hash]
	_, bodyOpen := s.bodyDirs.fds[hash]
	if ctlOpen && bodyOpen {
		return
	}
	s.openDirs()
	s.closeFinished()
	if !ctlOpen && s.dirFD != -1 {
		s.ctlDirs.open(s.dirFD, s.a.Dir, hash)
	}
	if !bodyOpen && s.queueFD != -1 {
		s.bodyDirs.open(s.queueFD, "", hash)
	}
}

// forget closes hash's descriptor: the next job opens it again.
func (c *hashDirs) forget(hash string) {
	if hd, ok := c.fds[hash]; ok {
		rawsys.Close(hd.fd)
		delete(c.fds, hash)
	}
}

func (c *hashDirs) close() {
	for _, hd := range c.fds {
		rawsys.Close(hd.fd)
	}
	c.fds = nil
}

// maxClosing bounds the descriptors of finished jobs held open: with the
// runtime's own, few enough for the process's first descriptor table (64).
const maxClosing = 32

// closeLater queues fd, ours, for closeFinished. Consecutive jobs open
// consecutive descriptors (the lowest free ones), so one close_range
// closes the files of all the jobs since the last flush: one system call
// instead of two a job, where every call costs a microsecond or more on a
// virtual machine. A job's files are still closed before the flush that
// sends its report (only a report too long for the output buffer goes out
// earlier; nothing depends on it: the marks are written with pwrite, not
// at close).
func (s *session) closeLater(fd int) {
	s.closing = append(s.closing, fd)
	if len(s.closing) >= maxClosing {
		s.closeFinished()
	}
}

// closeFinished closes the queued descriptors: every run of consecutive
// numbers (all ours, since each was open when queued) in one system call.
func (s *session) closeFinished() {
	fds := s.closing
	if len(fds) == 0 {
		return
	}
	slices.Sort(fds)
	for i := 0; i < len(fds); {
		j := i + 1
		for j < len(fds) && fds[j] == fds[j-1]+1 {
			j++
		}
		if j-i > 1 && !s.noCloseRange {
			// close_range fails before closing anything, or not at all.
			if err := rawsys.CloseRange(fds[i], fds[j-1]); err == nil {
				i = j
				continue
			}
			s.noCloseRange = true
		}
		for _, fd := range fds[i:j] {
			if err := rawsys.Close(fd); err != nil {
				s.comment("close: %v", err)
			}
		}
		i = j
	}
	s.closing = fds[:0]
}

// cleanLocal is filepath.IsLocal(p) && filepath.Clean(p) == p, without
// Clean's copy and on Unix only (where IsLocal looks for nothing but ".."
// components): p is relative, not empty, and has no empty, "." or ".."
// component, unless it is "." alone. Every job path passes it; a job path
// as the scheduler writes it ("A/B/12345") is clean, and checking costs
// less than cleaning.
func cleanLocal(p string) bool {
	if p == "." {
		return true
	}
	if p == "" || p[0] == '/' || p[len(p)-1] == '/' {
		return false
	}
	for start := 0; start < len(p); {
		end := strings.IndexByte(p[start:], '/')
		if end < 0 {
			end = len(p)
		} else {
			end += start
		}
		switch p[start:end] {
		case "", ".", "..":
			return false
		}
		start = end + 1
	}
	return true
}

// hashDir is the spool's hash prefix of a job path ("A/B/12" → "A/B"):
// the body lives under the same prefix in queue/.
func hashDir(p string) string {
	if dir := path.Dir(p); dir != "." {
		return dir
	}
	return ""
}

// cleanHashDir is hashDir of a clean path (cleanLocal), without the Clean
// that path.Dir makes: a few of them every job.
func cleanHashDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// lock takes every pending r line of the agent's channel and the job's
// host, and reports whether it took any. Lines another process holds are
// skipped: the scheduler resyncs and retries them.
func (s *session) lock(d *Delivery) bool {
	f := d.File
	for i := range f.Rcpts {
		r := &f.Rcpts[i]
		// A file kept from the message's last job is as old as that
		// job: a line another agent held then may be free now (Lock
		// reads each status byte again). Delivered and failed are final.
		if (r.Status != ctlfile.Pending && (!d.reused || r.Status != ctlfile.Locked)) ||
			(s.a.Channel != "" && r.Channel != s.a.Channel) ||
			(d.Host != "" && !strings.EqualFold(r.Host, d.Host)) {
			continue
		}
		var ok bool
		var err error
		switch {
		case s.a.Instant:
			ok, err = takeUnwritten(d, i)
		case d.reused:
			ok, err = d.h.Lock(i, s.pid)
		default:
			// ctlfile.Open has just read the status byte: no need to
			// read it again, unless the file was kept open since an
			// earlier job.
			ok, err = d.h.LockAsRead(i, s.pid)
		}
		if err != nil {
			s.comment("lock %s/%d: %v", d.Path, r.Offset, err)
			continue
		}
		if !ok {
			continue
		}
		if d.state == nil {
			if len(f.Rcpts) <= len(d.stateBuf) {
				d.state = d.stateBuf[:len(f.Rcpts)]
			} else {
				d.state = make([]rcptState, len(f.Rcpts))
			}
			d.Rcpts = d.rcptsBuf[:0]
		}
		d.state[i] = locked
		d.Rcpts = append(d.Rcpts, i)
	}
	d.unlocked = s.a.Instant
	return len(d.Rcpts) > 0
}

// takeUnwritten takes recipient i, pending, for an Instant agent: in
// memory only, its status byte read again from a file kept open since an
// earlier job (as Lock would), else as Open has just read it.
func takeUnwritten(d *Delivery, i int) (bool, error) {
	r := &d.File.Rcpts[i]
	st := r.Status
	if d.reused {
		var b [1]byte
		n, err := rawsys.Pread(d.h.FD(), b[:], r.Offset+1)
		if err != nil {
			return false, err
		}
		if n != 1 {
			return false, io.ErrUnexpectedEOF
		}
		st = ctlfile.Status(b[0])
	}
	switch st {
	case ctlfile.Pending:
		r.Status = ctlfile.Locked
		return true, nil
	case ctlfile.Locked, ctlfile.Done, ctlfile.Failed:
		r.Status = st
	}
	return false, nil
}

// settle writes one recipient's outcome: first the d line and the mark in
// the control file, then the report line. The marks reach the file before
// the scheduler can read the report (it is buffered until the next flush),
// so a crash between the two leaves '+' on disk and costs no duplicate.
func (d *Delivery) settle(r Result) {
	s := d.s
	if r.Rcpt < 0 || r.Rcpt >= len(d.state) || d.state[r.Rcpt] != locked {
		s.comment("ignored a %s result for recipient %d: not held by this delivery, or already settled", r.Status, r.Rcpt)
		return
	}
	class := r.Status.Class()
	if class == 0 {
		s.comment("ignored a result with status %s for recipient %d", r.Status, r.Rcpt)
		return
	}
	d.state[r.Rcpt] = reported
	rc := &d.File.Rcpts[r.Rcpt]
	notary := r.Notary
	if notary.IsZero() && (r.Status == report.OK2 || r.Status == report.Error2) {
		notary = defaultNotary(rc, class)
	}
	if !notary.IsZero() && notary.Agent == "" {
		notary.Agent = s.ident
	}
	text := strings.ReplaceAll(r.Text, "\n", "\r")

	status := r.Status
	if status == report.OK2 || status == report.Error2 {
		err := d.h.AppendDiag(ctlfile.Diag{
			Status:       ctlfile.Pending,
			RcptOffset:   rc.Offset,
			HeaderOffset: rc.HeaderOffset,
			NOffset:      rc.NOffset,
			Time:         s.now().Unix(),
			Notary:       notary.String(),
			Text:         text,
		})
		if err != nil {
			// Without our d line the scheduler must write one: ok and
			// error ask it to.
			s.comment("append d line for %s/%d: %v", d.Path, rc.Offset, err)
			status = report.OK
			if class == report.Permanent {
				status = report.Error
			}
		} else {
			notary = report.Notary{}
		}
	}
	mark := ctlfile.Pending
	switch class {
	case report.Delivered:
		mark = ctlfile.Done
	case report.Permanent:
		mark = ctlfile.Failed
	}
	if d.unlocked && mark == ctlfile.Pending {
		// Nothing was written: the line on disk is pending still.
		rc.Status = ctlfile.Pending
	} else if err := d.h.Mark(r.Rcpt, mark); err != nil {
		s.comment("mark %s/%d: %v", d.Path, rc.Offset, err)
	}
	retry := ""
	if status == report.RetryAt {
		retry = r.Retry
		if retry == "" {
			retry = "+60"
		}
	}
	s.writeReport(&report.Line{Inum: d.File.Inum, Offset: rc.Offset, Notary: notary, Status: status, Retry: retry, Text: text})
}

// writeReport writes l.String() and a newline, formatted straight into
// the output buffer: a string built and copied per recipient is a
// noticeable part of a quick job.
func (s *session) writeReport(l *report.Line) {
	b := s.w.AvailableBuffer()
	b = strconv.AppendInt(b, l.Inum, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, l.Offset, 10)
	b = append(b, '\t')
	if !l.Notary.IsZero() {
		b = append(b, l.Notary.String()...)
	}
	b = append(b, '\t')
	b = append(b, l.Status.String()...)
	if l.Status == report.RetryAt {
		b = append(b, ' ')
		b = append(b, l.Retry...)
	}
	b = append(b, ' ')
	if strings.IndexByte(l.Text, '\n') < 0 {
		b = append(b, l.Text...)
	} else {
		for i := 0; i < len(l.Text); i++ {
			c := l.Text[i]
			if c == '\n' {
				c = '\r'
			}
			b = append(b, c)
		}
	}
	b = append(b, '\n')
	s.w.Write(b)
}

// defaultNotary is the DSN data for an ok2 or error2 whose delivery
// function gave none: the d line needs at least the action and a status.
func defaultNotary(rc *ctlfile.Rcpt, class report.Class) report.Notary {
	n := report.Notary{Recipient: rc.User, Action: "delivered", Status: "2.0.0"}
	if class == report.Permanent {
		n.Action, n.Status = "failed", "5.0.0"
	}
	return n
}

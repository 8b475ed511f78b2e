package control

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// ErrRunning is returned by Listen when a live server already answers on
// the socket: another scheduler runs on this postoffice.
var ErrRunning = errors.New("control: another scheduler is listening")

// Greeting is the first line the server sends, as MAILQ v2.
const Greeting = "version zmailer 2.0"

// Refusal is the line a client without access gets before the server
// closes, as MAILQ v2.
const Refusal = "550 NO ACCESS FOR YOU"

// Options configure a Server. Zero values take the defaults given.
type Options struct {
	Path  string // Unix socket path; "" = none
	Group string // group (name or gid) whose members may use the socket besides root and the owner; mode 0660 then, else 0600
	// TCP is the optional MAILQ v2 listener: "" = none; "port" or ":port"
	// listens on loopback; "host:port" where given. It needs AuthFile.
	TCP      string
	AuthFile string // read at every TCP connection, so edits apply at once

	// Sessions at once. The Unix socket and the TCP listener have caps of
	// their own, so no number of TCP clients takes a local operator's place;
	// past a cap a client gets "-BUSY" and is closed.
	MaxClients     int           // Unix-socket sessions; default 64
	MaxTCPClients  int           // TCP sessions; default 16
	MaxPreAuth     int           // TCP sessions that have not yet logged in; default 4
	PreAuthTimeout time.Duration // a TCP client must log in within it; default 10s
	// A peer address with AuthFailures failed AUTHs within AuthWindow is
	// refused at the greeting until the window ends. A failed AUTH ends its
	// session; the log says so once per address and window.
	AuthFailures   int           // default 5
	AuthWindow     time.Duration // default 1m
	MaxLine        int           // bytes in a command line; default 4096; a longer line ends the session
	IdleTimeout    time.Duration // a silent client is dropped after it; default 2m
	SessionTimeout time.Duration // no session lasts longer; default 15m
	ReplyTimeout   time.Duration // how long a command waits for the loop; default 30s

	Log hclog.Logger
}

func (o *Options) defaults() {
	if o.MaxClients <= 0 {
		o.MaxClients = 64
	}
	if o.MaxTCPClients <= 0 {
		o.MaxTCPClients = 16
	}
	if o.MaxPreAuth <= 0 {
		o.MaxPreAuth = 4
	}
	o.MaxPreAuth = min(o.MaxPreAuth, o.MaxTCPClients)
	if o.PreAuthTimeout <= 0 {
		o.PreAuthTimeout = 10 * time.Second
	}
	if o.AuthFailures <= 0 {
		o.AuthFailures = 5
	}
	if o.AuthWindow <= 0 {
		o.AuthWindow = time.Minute
	}
	if o.MaxLine <= 0 {
		o.MaxLine = 4096
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 15 * time.Minute
	}
	if o.ReplyTimeout <= 0 {
		o.ReplyTimeout = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
}

// Server serves the control protocol. Its requests must be drained from
// Requests by the scheduler's loop.
type Server struct {
	opt  Options
	log  hclog.Logger
	reqs chan *Request
	done chan struct{}
	// interrupted is closed once Close has set every session's deadline:
	// a session that says why it ends sets its own write deadline after
	// that, not before (where Close's would cancel its farewell).
	interrupted chan struct{}
	// Session slots: Unix, TCP, and TCP before AUTH.
	slots, tcpSlots, preAuth chan struct{}
	euid                     int
	gid                      int // ControlGroup's gid, -1 when none

	fails *limiter // failed AUTHs per peer address
	// authSeen is the auth-file problems last logged: the file is read at
	// every TCP connection, its problems logged when they change.
	authSeen string

	unix net.Listener
	tcp  net.Listener

	wg    sync.WaitGroup
	mu    sync.Mutex // guards conns: the server's own bookkeeping
	conns map[net.Conn]struct{}
	seq   atomic.Uint64
	once  sync.Once
}

// Listen opens the listeners and starts serving. A stale socket file is
// replaced; a live one is an error wrapping ErrRunning.
func Listen(opt Options) (*Server, error) {
	opt.defaults()
	s := &Server{
		opt:  opt,
		log:  opt.Log,
		reqs: make(chan *Request),
		done: make(chan struct{}),

		interrupted: make(chan struct{}),
		slots:       make(chan struct{}, opt.MaxClients),
		tcpSlots:    make(chan struct{}, opt.MaxTCPClients),
		preAuth:     make(chan struct{}, opt.MaxPreAuth),
		euid:        os.Geteuid(),
		gid:         -1,
		conns:       make(map[net.Conn]struct{}),
		fails:       newLimiter(opt.AuthFailures, opt.AuthWindow),
	}
	if opt.Group != "" {
		gid, err := lookupGroup(opt.Group)
		if err != nil {
			return nil, err
		}
		s.gid = gid
	}
	if opt.Path != "" {
		if err := s.listenUnix(); err != nil {
			return nil, err
		}
	}
	if opt.TCP != "" {
		if opt.AuthFile == "" {
			s.Close()
			return nil, errors.New("control: a TCP listener needs an auth file")
		}
		a, err := ReadAuth(opt.AuthFile)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.logAuthProblems(a)
		l, err := net.Listen("tcp", TCPAddress(opt.TCP))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("control: %w", err)
		}
		s.tcp = l
		s.wg.Add(1)
		go s.accept(l)
	}
	return s, nil
}

// TCPAddress returns the address a TCP setting listens on: a bare port
// means loopback.
func TCPAddress(setting string) string {
	if _, err := strconv.Atoi(setting); err == nil {
		return "127.0.0.1:" + setting
	}
	if strings.HasPrefix(setting, ":") {
		return "127.0.0.1" + setting
	}
	return setting
}

func lookupGroup(g string) (int, error) {
	if gid, err := strconv.Atoi(g); err == nil {
		return gid, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return -1, fmt.Errorf("control: control_group: %w", err)
	}
	return strconv.Atoi(gr.Gid)
}

func (s *Server) listenUnix() error {
	path := s.opt.Path
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("%w on %s", ErrRunning, path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("control: stale socket: %w", err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	// The peer-credential check guards the moment before chmod too.
	mode := os.FileMode(0o600)
	if s.gid >= 0 {
		mode = 0o660
		if err := os.Chown(path, -1, s.gid); err != nil {
			l.Close()
			return fmt.Errorf("control: socket group: %w", err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return fmt.Errorf("control: socket mode: %w", err)
	}
	s.unix = l
	s.wg.Add(1)
	go s.accept(l)
	return nil
}

// Requests is the channel the scheduler's loop takes commands from.
func (s *Server) Requests() <-chan *Request { return s.reqs }

// TCPAddr returns the TCP listener's address, or nil.
func (s *Server) TCPAddr() net.Addr {
	if s.tcp == nil {
		return nil
	}
	return s.tcp.Addr()
}

// Close stops the listeners, ends every session (a command waiting for the
// loop is answered "-shutting down") and waits for their goroutines.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.done)
		if s.unix != nil {
			s.unix.Close()
		}
		if s.tcp != nil {
			s.tcp.Close()
		}
		// Interrupt blocked reads and writes without closing: a session
		// waiting for the loop still tells its client why it ends (send
		// sets a fresh write deadline).
		s.mu.Lock()
		for c := range s.conns {
			c.SetDeadline(time.Now())
		}
		s.mu.Unlock()
		close(s.interrupted)
	})
	s.wg.Wait()
	return nil
}

func (s *Server) accept(l net.Listener) {
	defer s.wg.Done()
	var delay time.Duration // back-off after a failed accept, as net/http's
	failures := 0
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			// Out of descriptors or memory, or a connection aborted before
			// it was taken: keep serving once it passes. Only a closed
			// listener ends the loop.
			if errors.Is(err, net.ErrClosed) {
				s.log.Error("control socket accept: listener closed", "listener", l.Addr().String(), "error", err)
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			if failures == 0 {
				s.log.Warn("control socket accept failed; retrying with back-off (logged once until it accepts again)",
					"listener", l.Addr().String(), "error", err)
			}
			failures++
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
			continue
		}
		if failures > 0 {
			s.log.Info("control socket accepting again", "listener", l.Addr().String(), "failed_accepts", failures)
			failures, delay = 0, 0
		}
		s.start(c)
	}
}

// start gives the connection a slot and a goroutine, or refuses it.
func (s *Server) start(c net.Conn) {
	slots := s.slots
	tcp := false
	if _, ok := c.(*net.UnixConn); !ok {
		slots, tcp = s.tcpSlots, true
	}
	busy := func() {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(c, Greeting+"\n-BUSY too many clients\n")
		c.Close()
	}
	select {
	case slots <- struct{}{}:
	default:
		busy()
		return
	}
	if tcp {
		select {
		case s.preAuth <- struct{}{}:
		default:
			<-slots
			busy()
			return
		}
	}
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { <-slots }()
		defer func() {
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
		ss := s.session(c)
		if tcp && !ss.authed {
			<-s.preAuth
		}
	}()
}

// session is one client, from greeting to close.
type session struct {
	s      *Server
	c      net.Conn
	w      *bufio.Writer
	r      *bufio.Reader
	peer   Peer
	perm   Perm
	authed bool
	auth   *Auth
	addr   netip.Addr
	chal   string
	end    time.Time
	authBy time.Time // TCP: the end of the time allowed to log in
}

// session runs one client, from greeting to close, and returns its state
// at the end.
func (s *Server) session(c net.Conn) *session {
	now := time.Now()
	ss := &session{s: s, c: c, w: bufio.NewWriter(c), r: bufio.NewReaderSize(c, 4096),
		end: now.Add(s.opt.SessionTimeout), authBy: now.Add(s.opt.PreAuthTimeout)}
	c.SetDeadline(ss.end)
	if !ss.admit() {
		return ss
	}
	for {
		line, err := ss.readLine()
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				ss.send("-LINE TOO LONG")
			}
			return ss
		}
		if !ss.command(line) {
			return ss
		}
	}
}

// admit greets the client and decides whether it may go on.
func (ss *session) admit() bool {
	s := ss.s
	switch c := ss.c.(type) {
	case *net.UnixConn:
		ss.peer = Peer{Network: "unix"}
		uc, err := peerCred(c)
		if err != nil {
			s.log.Warn("control socket: no peer credentials; refusing", "error", err)
			ss.send(Greeting, Refusal)
			return false
		}
		ss.peer.UID, ss.peer.GID, ss.peer.PID = int(uc.Uid), int(uc.Gid), int(uc.Pid)
		if !s.allowed(uc) {
			s.log.Warn("control socket: client refused", "uid", uc.Uid, "gid", uc.Gid, "pid", uc.Pid)
			ss.send(Greeting, Refusal)
			return false
		}
		ss.perm, ss.authed = PermAll, true
	default:
		ss.peer = Peer{Network: "tcp", UID: -1, GID: -1, Addr: c.RemoteAddr().String()}
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil {
			ss.send(Greeting, Refusal)
			return false
		}
		ss.addr = ap.Addr().Unmap()
		if !s.fails.allow(ss.addr, time.Now(), s.log) {
			ss.send(Greeting, Refusal)
			return false
		}
		a, err := ReadAuth(s.opt.AuthFile)
		if err != nil {
			s.log.Error("control: auth file", "error", err)
			ss.send(Greeting, Refusal)
			return false
		}
		s.logAuthProblems(a)
		if !a.Admits(ss.addr) {
			s.log.Warn("control: client address not in the auth file", "addr", ss.peer.Addr)
			ss.send(Greeting, Refusal)
			return false
		}
		ss.auth = a
	}
	now := time.Now()
	ss.chal = fmt.Sprintf("220 MAILQ-V2-CHALLENGE: %d.%06d.%d", now.Unix(), now.Nanosecond()/1000, s.seq.Add(1))
	return ss.send(Greeting, ss.chal)
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var uc *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		uc, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return uc, cerr
}

// allowed decides on a Unix-socket peer: root, the scheduler's own user,
// or a member of the control group.
func (s *Server) allowed(uc *unix.Ucred) bool {
	if uc.Uid == 0 || int(uc.Uid) == s.euid {
		return true
	}
	if s.gid < 0 {
		return false
	}
	if int(uc.Gid) == s.gid {
		return true
	}
	u, err := user.LookupId(strconv.Itoa(int(uc.Uid)))
	if err != nil {
		return false
	}
	gids, err := u.GroupIds()
	return err == nil && slices.Contains(gids, strconv.Itoa(s.gid))
}

var errLineTooLong = errors.New("control: line too long")

// readLine reads one command line within the idle and session bounds.
func (ss *session) readLine() (string, error) {
	dl := time.Now().Add(ss.s.opt.IdleTimeout)
	if dl.After(ss.end) {
		dl = ss.end
	}
	if !ss.authed && dl.After(ss.authBy) {
		dl = ss.authBy
	}
	ss.c.SetReadDeadline(dl)
	var buf []byte
	for {
		frag, err := ss.r.ReadSlice('\n')
		if len(buf)+len(frag) > ss.s.opt.MaxLine+1 {
			return "", errLineTooLong
		}
		buf = append(buf, frag...)
		switch {
		case err == nil:
			return strings.TrimRight(string(buf), "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return "", err
		}
	}
}

// send writes lines and flushes, within a write bound.
func (ss *session) send(lines ...string) bool {
	dl := time.Now().Add(ss.s.opt.ReplyTimeout)
	if dl.After(ss.end) {
		dl = ss.end
	}
	ss.c.SetWriteDeadline(dl)
	for _, l := range lines {
		ss.w.WriteString(l)
		ss.w.WriteByte('\n')
	}
	return ss.w.Flush() == nil
}

// command handles one line; false ends the session.
func (ss *session) command(line string) bool {
	words := strings.Fields(line)
	if len(words) == 0 {
		return true
	}
	switch strings.ToUpper(words[0]) {
	case VerbQuit, VerbExit:
		ss.send("+Bye bye")
		return false
	case VerbAuth:
		return ss.authenticate(words[1:])
	case VerbHelp:
		var out []string
		for _, v := range Verbs {
			out = append(out, v.HelpLine())
		}
		out = append(out, sessionHelp...)
		return ss.send(Listing(out).encode()...)
	}
	if !ss.authed {
		return ss.send("-BAD; USER MUST AUTHENTICATE")
	}
	v, args, ok := parse(line)
	if v.Name != "" && !ok && ss.perm&v.Need == v.Need {
		return ss.send("-usage: " + v.HelpLine())
	}
	if !ok || ss.perm&v.Need != v.Need {
		if v.Name == VerbETRN && ok {
			return ss.send("-No ETRN allowed for you.")
		}
		return ss.send(unknown(words))
	}
	req := &Request{Verb: v.Name, Args: args, Line: line, Peer: ss.peer, Received: time.Now(), reply: make(chan Reply, 1)}
	timer := time.NewTimer(ss.s.opt.ReplyTimeout)
	defer timer.Stop()
	select {
	case ss.s.reqs <- req:
	case <-ss.s.done:
		ss.farewell()
		return false
	case <-timer.C:
		return ss.send("-TIMEOUT the scheduler did not take the command")
	}
	select {
	case rep := <-req.reply:
		if rep.stream != nil {
			return ss.sendStream(rep.stream)
		}
		return ss.send(rep.encode()...)
	case <-ss.s.done:
		ss.farewell()
		return false
	case <-timer.C:
		return ss.send("-TIMEOUT the scheduler did not answer")
	}
}

// farewell tells the client the scheduler is stopping, once Close has
// interrupted the sessions (Server.interrupted).
func (ss *session) farewell() {
	<-ss.s.interrupted
	ss.send("-scheduler shutting down")
}

func unknown(words []string) string {
	rest := ""
	if len(words) > 1 {
		rest = strings.Join(words[1:], " ")
	}
	return fmt.Sprintf("-MAILQ2 Unknown command, or refused by access control; VERB='%s' REST='%s'", words[0], rest)
}

func (ss *session) authenticate(args []string) bool {
	if ss.auth == nil {
		// The Unix socket trusts peer credentials; AUTH from a v2 client
		// there is accepted as it stands.
		return ss.send("+OK")
	}
	user := ""
	perm, err := Perm(0), ErrUnknownUser
	if len(args) == 2 {
		user = args[0]
		perm, err = ss.auth.Check(args[0], args[1], ss.chal, ss.addr)
	}
	if err != nil {
		// The session ends: a client guessing passwords must reconnect, and
		// its address is refused once it has used up its attempts.
		ss.s.fails.fail(ss.addr, user, err, time.Now(), ss.s.log)
		if errors.Is(err, ErrBadPassword) {
			ss.send("-BAD USER OR PASSWORD")
		} else {
			ss.send("-BAD USER OR AUTHENTICATOR OR CONTACT ADDRESS")
		}
		return false
	}
	if !ss.authed {
		<-ss.s.preAuth // a logged-in session no longer counts as waiting to log in
	}
	ss.perm, ss.authed, ss.peer.User = perm, true, user
	return ss.send("+OK")
}

// logAuthProblems logs the auth file's bad lines, one line each, when they
// differ from those logged last.
func (s *Server) logAuthProblems(a *Auth) {
	var b strings.Builder
	for _, p := range a.Problems {
		b.WriteString(p.Error())
		b.WriteByte('\n')
	}
	s.mu.Lock()
	changed := b.String() != s.authSeen
	s.authSeen = b.String()
	s.mu.Unlock()
	if !changed {
		return
	}
	for _, p := range a.Problems {
		s.log.Warn("control: auth file line ignored or read in part", "file", s.opt.AuthFile, "problem", p.Error())
	}
}

package ctlfile

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Address is one recipient of a new message.
type Address struct {
	Channel, Host, User string
	Notify              string // NOTIFY= value, e.g. "SUCCESS,FAILURE"; "" = none
	ORCPT               string // ORCPT= value, e.g. "rfc822;user@example.org"; "" = none
}

// Message is a new message for Enqueue.
type Message struct {
	Sender        string // envelope sender address; "" = <> (a bounce)
	SenderChannel string // default "smtp", or "error" when Sender is ""
	Rcpts         []Address
	Header        []byte // RFC 5322 header block, LF line ends, without the blank line
	Body          []byte
	RET, ENVID    string
}

// formatKnown is what ZMailer's router writes in the '@' line.
const formatKnown = "0x00000007"

func (m *Message) validate() error {
	if len(m.Rcpts) == 0 {
		return errors.New("ctlfile: enqueue: no recipients")
	}
	word := func(what, v string, empty bool) error {
		if v == "" && !empty {
			return fmt.Errorf("ctlfile: enqueue: empty %s", what)
		}
		if strings.ContainsAny(v, " \t\r\n\x00") {
			return fmt.Errorf("ctlfile: enqueue: %s %q contains a blank or control character", what, v)
		}
		return nil
	}
	for _, c := range []struct{ what, v string }{
		{"sender", m.Sender}, {"sender channel", m.SenderChannel}, {"RET", m.RET}, {"ENVID", m.ENVID},
	} {
		if err := word(c.what, c.v, true); err != nil {
			return err
		}
	}
	for i, a := range m.Rcpts {
		if err := word("channel", a.Channel, false); err != nil {
			return err
		}
		if err := word("host", a.Host, false); err != nil {
			return err
		}
		if strings.HasPrefix(a.Host, "(") {
			return fmt.Errorf("ctlfile: enqueue: recipient %d: host %q starts with '('", i, a.Host)
		}
		if a.User == "" || strings.ContainsAny(a.User, "\r\n\x00") || strings.TrimSpace(a.User) != a.User {
			return fmt.Errorf("ctlfile: enqueue: recipient %d: bad user %q", i, a.User)
		}
		if err := word("ORCPT", a.ORCPT, true); err != nil {
			return err
		}
		if err := word("NOTIFY", a.Notify, true); err != nil {
			return err
		}
		if _, err := ParseNotify(a.Notify); err != nil {
			return fmt.Errorf("ctlfile: enqueue: recipient %d: %w", i, err)
		}
	}
	h := m.Header
	if len(h) > 0 && h[0] == '\n' || strings.Contains(string(h), "\n\n") {
		// A blank line would end the m block early.
		return errors.New("ctlfile: enqueue: header block contains a blank line")
	}
	return nil
}

// Enqueue writes a new message the way ZMailer's router does, crash-safely:
// the body goes to a temporary file in queue/, is fsynced, named by its
// inode number (Name == ID == inode) and renamed into queue/<hash dir>/;
// only then is the control file written as transport/.<name>.tmp, fsynced,
// renamed to transport/<hash dir>/<name>, and the directories fsynced. So a
// visible control file always has its body. Hash directories are created as
// needed. It returns the control file's path relative to transport/. If
// only the final directory fsync fails, the message is queued and rel is
// returned with the error.
//
// The body file is the header block, a blank line, then the body; 'o' is
// the body's offset. The control file has the layout of
// zmailer-mkmsg.py: '@ 0x00000007', i, o, 'l <name.zsched@host>', e (not for
// a bounce, as the router omits it), s, r lines with 10 blank PID/delay
// columns each followed by an N line when Notify or ORCPT is given, R and n
// when set, then the m block (the header block and a blank line).
func (s *Spool) Enqueue(m *Message) (rel string, err error) {
	if s.Hash < 0 || s.Hash > 2 {
		return "", fmt.Errorf("ctlfile: enqueue: hash levels %d, want 0, 1 or 2", s.Hash)
	}
	if err := m.validate(); err != nil {
		return "", err
	}
	header := m.Header
	if len(header) > 0 && header[len(header)-1] != '\n' {
		header = append(header[:len(header):len(header)], '\n')
	}
	name, rel, err := s.writeBody(header, m.Body)
	if err != nil {
		return "", err
	}
	bodyFile := s.bodyPath(rel, name)
	ctlTmp := filepath.Join(s.TransportDir(), "."+name+".tmp")
	committed := false
	defer func() {
		if err != nil && !committed {
			os.Remove(ctlTmp)
			os.Remove(bodyFile)
		}
	}()

	ctl := buildCtl(name, int64(len(header)+1), header, m)
	// The temporary name is unique to this inode, which the body holds; a
	// leftover of that name is debris of an earlier crash.
	f, err := os.OpenFile(ctlTmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", fmt.Errorf("ctlfile: enqueue: %w", err)
	}
	if _, err = f.Write(ctl); err == nil && !s.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("ctlfile: enqueue: write control file: %w", err)
	}
	s.step("ctl-written")
	tdir, err := s.mkHashDirs(s.TransportDir(), rel)
	if err != nil {
		return "", err
	}
	if err = os.Rename(ctlTmp, filepath.Join(tdir, name)); err != nil {
		return "", fmt.Errorf("ctlfile: enqueue: %w", err)
	}
	committed = true
	s.step("ctl-renamed")
	if err = s.syncDirs(s.TransportDir(), tdir); err != nil {
		// The message is in the queue; only its durability is in doubt.
		return rel, err
	}
	s.step("done")
	return rel, nil
}

func (s *Spool) step(name string) {
	if s.hook != nil {
		s.hook(name)
	}
}

// writeBody writes the body file and moves it to queue/<hash dir>/<inode>.
// If that name, or the control file's, is already taken (a stray file from
// elsewhere), the temporary file is kept open — so its inode cannot come
// back — and another is tried.
func (s *Spool) writeBody(header, body []byte) (name, rel string, err error) {
	var discard []string
	defer func() {
		for _, d := range discard {
			os.Remove(d)
		}
	}()
	for attempt := 0; attempt < 8; attempt++ {
		tmp, err := os.CreateTemp(s.QueueDir(), ".new-*")
		if err != nil {
			return "", "", fmt.Errorf("ctlfile: enqueue: %w", err)
		}
		tmpName := tmp.Name()
		ino, err := fillBody(tmp, header, body, !s.NoSync)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmpName)
			return "", "", fmt.Errorf("ctlfile: enqueue: write body: %w", err)
		}
		s.step("body-written")
		name = strconv.FormatUint(ino, 10)
		rel = HashPath(name, int64(ino), s.Hash)
		if exists(s.bodyPath(rel, name)) || exists(s.ctlPath(rel)) {
			discard = append(discard, tmpName)
			continue
		}
		qdir, err := s.mkHashDirs(s.QueueDir(), rel)
		if err == nil {
			err = os.Rename(tmpName, filepath.Join(qdir, name))
		}
		if err != nil {
			os.Remove(tmpName)
			return "", "", fmt.Errorf("ctlfile: enqueue: %w", err)
		}
		s.step("body-renamed")
		// The control file must not become durable before the body's name.
		if err := s.syncDirs(qdir, s.QueueDir()); err != nil {
			os.Remove(filepath.Join(qdir, name))
			return "", "", err
		}
		return name, rel, nil
	}
	return "", "", errors.New("ctlfile: enqueue: every new inode's name is taken in the spool")
}

func fillBody(f *os.File, header, body []byte, sync bool) (uint64, error) {
	if err := f.Chmod(0o644); err != nil {
		return 0, err
	}
	buf := make([]byte, 0, len(header)+1+len(body))
	buf = append(append(append(buf, header...), '\n'), body...)
	if _, err := f.Write(buf); err != nil {
		return 0, err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return 0, err
		}
	}
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no inode number on this system")
	}
	if sys.Ino > 1<<63-1 {
		return 0, fmt.Errorf("inode number %d too large", sys.Ino)
	}
	return sys.Ino, nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

// mkHashDirs creates the hash directories of rel under root and returns the
// directory the file goes in. A new directory's entry is fsynced into its
// parent.
func (s *Spool) mkHashDirs(root, rel string) (string, error) {
	dir := root
	for _, d := range strings.Split(path.Dir(rel), "/") {
		if d == "." {
			break
		}
		parent := dir
		dir = filepath.Join(dir, d)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			if err := syncDirs(parent); err != nil {
				return "", err
			}
		} else if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("ctlfile: enqueue: %w", err)
		}
	}
	return dir, nil
}

// buildCtl lays the control file out as ZMailer's router does.
func buildCtl(name string, bodyOff int64, header []byte, m *Message) []byte {
	b := make([]byte, 0, 256+64*len(m.Rcpts)+len(header))
	line := func(tag byte, parts ...string) {
		b = append(b, tag, ' ')
		for i, p := range parts {
			if i > 0 {
				b = append(b, ' ')
			}
			b = append(b, p...)
		}
		b = append(b, '\n')
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	line('@', formatKnown)
	line('i', name)
	line('o', strconv.FormatInt(bodyOff, 10))
	line('l', "<"+name+".zsched@"+host+">")
	sch, shost, suser := m.SenderChannel, "localhost", m.Sender
	if at := strings.LastIndexByte(m.Sender, '@'); at >= 0 && at < len(m.Sender)-1 {
		shost = m.Sender[at+1:]
	}
	if m.Sender == "" {
		// The router writes no e line for a bounce, and '-' for an empty field.
		suser = "-"
		if sch == "" {
			sch = "error"
		}
	} else {
		line('e', m.Sender)
	}
	if sch == "" {
		sch = "smtp"
	}
	line('s', sch, shost, suser, "0")
	for _, a := range m.Rcpts {
		b = append(b, "r           "...)
		b = append(b, a.Channel...)
		b = append(b, ' ')
		b = append(b, a.Host...)
		b = append(b, ' ')
		b = append(b, a.User...)
		b = append(b, " 0\n"...)
		if a.Notify != "" || a.ORCPT != "" {
			b = append(b, 'N')
			if a.Notify != "" {
				b = append(b, " NOTIFY="...)
				b = append(b, a.Notify...)
			}
			if a.ORCPT != "" {
				b = append(b, " ORCPT="...)
				b = append(b, a.ORCPT...)
			}
			b = append(b, '\n')
		}
	}
	if m.RET != "" {
		line('R', m.RET)
	}
	if m.ENVID != "" {
		line('n', m.ENVID)
	}
	b = append(b, "m\n"...)
	b = append(b, header...)
	return append(b, '\n')
}

// NotifyScheduler sends the datagram "NEW <rel>" to the scheduler's notify
// socket (AF_UNIX, SOCK_DGRAM), as ZMailer's router does. No listener is
// an error the caller may ignore: the scheduler's scan finds the file.
func NotifyScheduler(socket, rel string) error {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("ctlfile: notify %s: %w", socket, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("NEW " + rel)); err != nil {
		return fmt.Errorf("ctlfile: notify %s: %w", socket, err)
	}
	return nil
}

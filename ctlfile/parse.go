package ctlfile

import (
	"bytes"
	"fmt"
	"strconv"
)

// Parse parses a control file; name is its base name (the Inum is taken
// from its leading digits). Parse never panics on any input. A malformed
// line gives a *SyntaxError naming it; unknown '@' bits give an error
// wrapping ErrUnknownFormat; a file with recipients (or with nothing at all)
// but no i line gives ErrNoID; a message without an l line gives
// ErrNoLogIdent. A T-only file (an ETRN request) parses with ETRNs set and no
// ID.
//
// Unknown tag letters are skipped, as ZMailer's readers do, so a newer
// router's additions do not make files unreadable; X (XOR recipient) lines
// and their N lines are skipped because ZMailer's scheduler does not
// schedule them.
func Parse(name string, data []byte) (*File, error) {
	inum, err := leadingInum(name)
	if err != nil {
		return nil, err
	}
	p := parser{
		data:   data,
		f:      &File{Name: name, Inum: inum},
		sender: -1,
	}
	if n := bytes.Count(data, []byte("\nr")); n > 0 {
		p.f.Rcpts = make([]Rcpt, 0, n)
	}
	if err := p.run(); err != nil {
		return nil, err
	}
	f := p.f
	if f.ID == "" && (len(f.Rcpts) > 0 || len(f.ETRNs) == 0) {
		return nil, fmt.Errorf("%w (file %s)", ErrNoID, name)
	}
	if f.ID != "" && !p.sawL {
		return nil, fmt.Errorf("%w (file %s)", ErrNoLogIdent, name)
	}
	return f, nil
}

// leadingInum parses the leading decimal digits of a control file name.
func leadingInum(name string) (int64, error) {
	n := 0
	for n < len(name) && isDigit(name[n]) {
		n++
	}
	if n == 0 {
		return 0, nil
	}
	v, err := strconv.ParseInt(name[:n], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: name %q: number out of range", ErrBadPath, name)
	}
	return v, nil
}

type parser struct {
	data []byte
	f    *File

	line int   // 1-based number of the current line
	off  int64 // offset of the current line

	lastTag    byte
	sawFormat  bool
	sawL       bool
	sawE       bool
	errorAddr  string // e line in force
	sender     int    // s line in force, -1 if none
	headerFrom int    // first rcpt not yet covered by an m block

	// Recipients of one file nearly always share channel and host: reuse
	// the previous strings instead of allocating them again.
	lastCh, lastHost string
}

func (p *parser) errf(format string, args ...any) error {
	return &SyntaxError{Line: p.line, Offset: p.off, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) run() error {
	data := p.data
	off := 0
	for off < len(data) {
		p.line++
		p.off = int64(off)
		nl := bytes.IndexByte(data[off:], '\n')
		var line []byte
		next := len(data)
		if nl < 0 {
			line = data[off:]
			// A d line without its newline at the very end is an append
			// in progress (or torn by a full disk): ignore it rather than
			// condemn the whole message.
			if line[0] == 'd' {
				p.f.Size = int64(off)
				return nil
			}
		} else {
			line = data[off : off+nl]
			next = off + nl + 1
		}
		if len(line) == 0 {
			return p.errf("empty line outside a header block")
		}
		tag := line[0]
		var err error
		switch tag {
		case 'm', 'M':
			next, err = p.block(line, off)
		case '@':
			err = p.format(line)
		case 'i':
			err = p.id(line)
		case 'o':
			err = p.bodyOffset(line)
		case 'l':
			var v []byte
			if v, err = p.value(line); err == nil {
				if p.sawL {
					return p.errf("second l line")
				}
				p.sawL = true
				p.f.LogIdent = string(v)
			}
		case 'e':
			err = p.errorLine(line)
		case 's':
			err = p.senderLine(line)
		case 'r':
			err = p.rcpt(line)
		case 'N':
			err = p.notary(line)
		case 'd':
			err = p.diag(line)
		case 'T':
			err = p.etrn(line)
		case 'x', 'R', 'n', 'v':
			var v []byte
			if v, err = p.value(line); err == nil {
				s := string(v)
				switch tag {
				case 'x':
					p.f.Obsoletes = append(p.f.Obsoletes, s)
				case 'R':
					p.f.RET = s
				case 'n':
					p.f.ENVID = s
				case 'v':
					p.f.Verbose = s
				}
			}
		case 'X':
			// Not scheduled; remembered in lastTag so its N line is skipped too.
		default:
			if !isLetter(tag) {
				return p.errf("bad tag %q", tag)
			}
		}
		if err != nil {
			return err
		}
		p.lastTag = tag
		off = next
	}
	p.f.Size = int64(len(data))
	return nil
}

// value returns the text of a "t value" line: the status column must be a blank.
func (p *parser) value(line []byte) ([]byte, error) {
	if len(line) == 1 {
		return nil, nil
	}
	if line[1] != ' ' {
		return nil, p.errf("%c line: column 1 is %q, not a blank", line[0], line[1])
	}
	return line[2:], nil
}

// block handles an m or M block: the tag alone on its line, then lines up to
// and including a blank line. It returns the offset after the block.
func (p *parser) block(line []byte, off int) (int, error) {
	if len(line) != 1 {
		return 0, p.errf("%c line: tag must stand alone", line[0])
	}
	data := p.data
	if off+1 >= len(data) {
		return 0, p.errf("%c block: no blank line ends it", line[0])
	}
	end := bytes.Index(data[off+1:], []byte("\n\n"))
	if end < 0 {
		return 0, p.errf("%c block: no blank line ends it", line[0])
	}
	next := off + 1 + end + 2
	if line[0] == 'm' {
		for i := p.headerFrom; i < len(p.f.Rcpts); i++ {
			p.f.Rcpts[i].HeaderOffset = int64(off + 2)
		}
		p.headerFrom = len(p.f.Rcpts)
	}
	p.line += bytes.Count(data[off+2:next], []byte{'\n'})
	return next, nil
}

func (p *parser) format(line []byte) error {
	v, err := p.value(line)
	if err != nil {
		return err
	}
	if p.sawFormat {
		return p.errf("second @ line")
	}
	if len(p.f.Rcpts) > 0 || len(p.f.Diags) > 0 {
		return p.errf("@ line after r or d lines")
	}
	u, perr := strconv.ParseUint(string(bytes.TrimSpace(v)), 0, 32)
	if perr != nil {
		return p.errf("@ line: bad format flags %q", v)
	}
	p.sawFormat = true
	p.f.Format = uint32(u)
	if p.f.Format&^KnownFlags != 0 {
		return fmt.Errorf("%w 0x%08x at line %d", ErrUnknownFormat, p.f.Format, p.line)
	}
	return nil
}

func (p *parser) id(line []byte) error {
	v, err := p.value(line)
	if err != nil {
		return err
	}
	if p.f.ID != "" {
		return p.errf("second i line")
	}
	if !validName(v) {
		return p.errf("i line: %q is not a file name", v)
	}
	p.f.ID = string(v)
	return nil
}

// validName accepts a plain file name: no slash, not "." or "..", no NUL.
func validName(v []byte) bool {
	if len(v) == 0 || string(v) == "." || string(v) == ".." {
		return false
	}
	return bytes.IndexByte(v, '/') < 0 && bytes.IndexByte(v, 0) < 0
}

func (p *parser) bodyOffset(line []byte) error {
	v, err := p.value(line)
	if err != nil {
		return err
	}
	n, ok := atoi(v)
	if !ok || n < 0 {
		return p.errf("o line: bad offset %q", v)
	}
	p.f.BodyOffset = n
	return nil
}

func (p *parser) errorLine(line []byte) error {
	v, err := p.value(line)
	if err != nil {
		return err
	}
	s := string(v)
	if s == "<>" {
		s = ""
	}
	p.errorAddr = s
	if !p.sawE {
		p.sawE = true
		p.f.ErrorAddr = s
	}
	return nil
}

func (p *parser) senderLine(line []byte) error {
	v, err := p.value(line)
	if err != nil {
		return err
	}
	q, msg := splitQuad(v, false)
	if msg != "" {
		return p.errf("s line: %s", msg)
	}
	p.f.Senders = append(p.f.Senders, Sender{
		Channel:   string(q.ch),
		Host:      string(q.host),
		User:      string(q.user),
		Priv:      q.priv,
		ErrorAddr: p.errorAddr,
	})
	p.sender = len(p.f.Senders) - 1
	return nil
}

func (p *parser) rcpt(line []byte) error {
	st := Pending
	if len(line) >= 2 {
		st = Status(line[1])
	}
	if len(line) < 2 || !st.valid() {
		return p.errf("r line: bad status byte")
	}
	pos := 2
	pid := 0
	if p.f.Format&FlagPID != 0 {
		cols := pidCols
		if p.f.Format&FlagDelay != 0 {
			cols += delayCols
		}
		if len(line) < pos+cols {
			return p.errf("r line: too short for its PID field")
		}
		var ok bool
		if pid, ok = parsePID(line[pos : pos+cols]); !ok {
			return p.errf("r line: bad PID field %q", line[pos:pos+pidCols])
		}
		pos += cols
	} else if p.f.Format&FlagDelay != 0 {
		if len(line) < pos+delayCols {
			return p.errf("r line: too short for its delay field")
		}
		pos += delayCols
	}
	q, msg := splitQuad(line[pos:], true)
	if msg != "" {
		return p.errf("r line: %s", msg)
	}
	if string(q.ch) != p.lastCh {
		p.lastCh = string(q.ch)
	}
	host := lowerASCII(q.host)
	if string(host) != p.lastHost {
		p.lastHost = string(host)
	}
	p.f.Rcpts = append(p.f.Rcpts, Rcpt{
		Offset:       p.off,
		Status:       st,
		PID:          pid,
		Channel:      p.lastCh,
		Host:         p.lastHost,
		User:         string(q.user),
		Priv:         q.priv,
		HeaderOffset: -1,
		NOffset:      -1,
		Notify:       NotifyFailure,
		Sender:       p.sender,
	})
	return nil
}

// parsePID reads the PID field (the 6 PID columns, followed by the 4 delay
// columns when the file has them): blanks, or a decimal number that may run
// into the delay columns when a PID is wider than 6 digits (Linux pid_max
// can be 4194304).
func parsePID(b []byte) (int, bool) {
	i := 0
	for i < pidCols && b[i] == ' ' {
		i++
	}
	if i == pidCols {
		return 0, true
	}
	j := i
	for j < len(b) && isDigit(b[j]) {
		j++
	}
	if j == i || j-i > 9 {
		return 0, false
	}
	for k := j; k < pidCols; k++ {
		if b[k] != ' ' {
			return 0, false
		}
	}
	n, _ := atoi(b[i:j])
	return int(n), true
}

type quad struct {
	ch, host, user []byte
	priv           int
}

// splitQuad splits "channel host user priv". The host may be a
// parenthesised list, ((a)(b c)), of which the first name is returned. The
// user is everything between host and privilege and may contain blanks.
// With needPriv false (s lines) a missing privilege is taken as 0.
func splitQuad(b []byte, needPriv bool) (quad, string) {
	var q quad
	b = trimBlanks(b)
	sp := bytes.IndexByte(b, ' ')
	if sp <= 0 {
		return q, "no host"
	}
	q.ch, b = b[:sp], trimBlanks(b[sp+1:])
	if len(b) == 0 {
		return q, "no host"
	}
	var hostTok []byte
	if b[0] == '(' {
		depth, end := 0, -1
		for i, c := range b {
			if c == '(' {
				depth++
			} else if c == ')' {
				depth--
				if depth == 0 {
					end = i
					break
				}
			}
		}
		if end < 0 {
			return q, "unbalanced parentheses in host"
		}
		hostTok, b = b[:end+1], b[end+1:]
		h := bytes.TrimLeft(hostTok, "(")
		if k := bytes.IndexAny(h, ") "); k >= 0 {
			h = h[:k]
		}
		q.host = h
	} else {
		sp = bytes.IndexByte(b, ' ')
		if sp < 0 {
			return q, "no user"
		}
		q.host, b = b[:sp], b[sp:]
	}
	if len(q.host) == 0 {
		return q, "empty host"
	}
	if len(b) == 0 || b[0] != ' ' {
		return q, "no user"
	}
	b = b[1:]
	sp = bytes.LastIndexByte(b, ' ')
	if sp >= 0 {
		if v, ok := atoi(b[sp+1:]); ok && v >= -1<<31 && v < 1<<31 {
			q.user, q.priv = b[:sp], int(v)
		} else if needPriv {
			return q, fmt.Sprintf("bad privilege %q", b[sp+1:])
		}
	} else if needPriv {
		return q, "no privilege"
	}
	if q.user == nil {
		q.user = b
	}
	if len(q.user) == 0 {
		return q, "no user"
	}
	return q, ""
}

func (p *parser) notary(line []byte) error {
	v, err := p.value(line)
	if err != nil {
		return err
	}
	switch p.lastTag {
	case 'X':
		return nil
	case 'r':
	default:
		return p.errf("N line does not follow an r line")
	}
	r := &p.f.Rcpts[len(p.f.Rcpts)-1]
	r.NOffset = p.off
	for len(v) > 0 {
		var tok []byte
		if sp := bytes.IndexByte(v, ' '); sp >= 0 {
			tok, v = v[:sp], v[sp+1:]
		} else {
			tok, v = v, nil
		}
		switch {
		case hasPrefixFold(tok, "NOTIFY="):
			var n Notify
			for _, w := range bytes.Split(tok[len("NOTIFY="):], []byte{','}) {
				for _, nn := range notifyNames {
					if bytes.EqualFold(w, []byte(nn.name)) {
						n |= nn.n
					}
				}
			}
			if n != 0 {
				r.Notify = n
			}
		case hasPrefixFold(tok, "ORCPT="):
			r.ORCPT = string(tok[len("ORCPT="):])
		}
	}
	return nil
}

func (p *parser) diag(line []byte) error {
	if len(line) < 2 || (line[1] != ' ' && line[1] != '+') {
		return p.errf("d line: bad status byte")
	}
	rest := line[2:]
	tab := bytes.IndexByte(rest, '\t')
	if tab < 0 {
		return p.errf("d line: no tab after the offsets")
	}
	var fields [5][]byte
	nf := 0
	for f := rest[:tab]; ; nf++ {
		if nf == len(fields) {
			return p.errf("d line: more than 5 offset fields")
		}
		c := bytes.IndexByte(f, ':')
		if c < 0 {
			fields[nf] = f
			nf++
			break
		}
		fields[nf], f = f[:c], f[c+1:]
	}
	if nf != len(fields) {
		return p.errf("d line: %d offset fields, want 5", nf)
	}
	var nums [4]int64
	for i, fi := range [4]int{0, 1, 2, 4} {
		n, ok := atoi(fields[fi])
		if !ok {
			return p.errf("d line: bad number %q", fields[fi])
		}
		nums[i] = n
	}
	d := Diag{
		Offset:       p.off,
		Status:       Status(line[1]),
		RcptOffset:   nums[0],
		HeaderOffset: nums[1],
		NOffset:      nums[2],
		Time:         nums[3],
	}
	after := rest[tab+1:]
	if t2 := bytes.IndexByte(after, '\t'); t2 >= 0 {
		d.Notary, d.Text = string(after[:t2]), string(after[t2+1:])
	} else {
		d.Notary = string(after)
	}
	p.f.Diags = append(p.f.Diags, d)
	return nil
}

func (p *parser) etrn(line []byte) error {
	v, err := p.value(line)
	if err != nil {
		return err
	}
	v = trimBlanks(v)
	if len(v) == 0 {
		return p.errf("T line: no domain")
	}
	t := ETRN{}
	if sp := bytes.IndexByte(v, ' '); sp >= 0 {
		t.Domain, t.IP = string(v[:sp]), string(trimBlanks(v[sp+1:]))
	} else {
		t.Domain = string(v)
	}
	p.f.ETRNs = append(p.f.ETRNs, t)
	return nil
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// atoi parses an optionally negative decimal without allocating.
func atoi(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func trimBlanks(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

// lowerASCII lowercases host names; it copies only when it must.
func lowerASCII(b []byte) []byte {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			out := make([]byte, len(b))
			copy(out, b)
			for j := i; j < len(out); j++ {
				if c := out[j]; 'A' <= c && c <= 'Z' {
					out[j] = c + 'a' - 'A'
				}
			}
			return out
		}
	}
	return b
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}

package control

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// ErrAuthFile is wrapped by every problem found in an auth file.
var ErrAuthFile = errors.New("control: bad auth file")

// AUTH refusals. MAILQ v2 answers them differently: an unknown user, or a
// user whose lines do not allow the client's address, gets
// "-BAD USER OR AUTHENTICATOR OR CONTACT ADDRESS"; a wrong authenticator
// for a user found gets "-BAD USER OR PASSWORD".
var (
	ErrUnknownUser = errors.New("control: no auth line for this user and address")
	ErrBadPassword = errors.New("control: wrong authenticator")
)

// AuthEntry is one line of an auth file:
// "user:password:ATTR ATTR…:addresses", ZMailer's scheduler.auth format.
type AuthEntry struct {
	User     string
	Password string
	Perm     Perm
	Addrs    []authAddr
	Line     int
}

type authAddr struct {
	prefix netip.Prefix
	not    bool
}

// Auth is a parsed auth file.
type Auth struct {
	Entries []AuthEntry
	// Problems are the lines skipped, or read in part, each an error
	// wrapping ErrAuthFile that names the file and line. The other lines
	// apply: one bad line does not lock every client out.
	Problems []error
}

// ReadAuth reads and parses an auth file. The error is about reading it;
// what is wrong inside is in Problems.
func ReadAuth(path string) (*Auth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("control: auth file: %w", err)
	}
	return ParseAuth(path, b), nil
}

// ParseAuth parses auth-file text as ZMailer's mq2auth.c reads it; name is
// used in problems. Blank lines and lines starting with '#' or '*' are
// comments.
//
// Fields are separated by ':', the fourth (the addresses) taking the rest
// of the line, so IPv6 addresses need no quoting. Attributes are tokens
// separated by blanks or commas; ZMailer ignores one it does not know, and
// so does zsched, with a problem reported. Addresses are separated by
// blanks or commas, each optionally negated with '!': ZMailer's forms
// "[a.b.c.d]", "[IPv6:addr]" and "[IPv6.addr]" (the prefix in any case),
// each with an optional "/len", and zsched's bare "addr" and "addr/len".
// An address that does not parse drops its whole line (a partial list
// could let in more than intended, when a negation is what failed).
func ParseAuth(name string, data []byte) *Auth {
	a := &Auth{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	bad := func(format string, args ...any) {
		a.Problems = append(a.Problems, fmt.Errorf("%w: %s:%d: %s", ErrAuthFile, name, n, fmt.Sprintf(format, args...)))
	}
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '*' {
			continue
		}
		f := strings.SplitN(line, ":", 4)
		if len(f) < 3 || f[0] == "" {
			bad("want user:password:ATTRS:addresses; line skipped")
			continue
		}
		e := AuthEntry{User: f[0], Password: f[1], Line: n}
		var unknown []string
		e.Perm, unknown = ParsePerm(f[2])
		if len(unknown) > 0 {
			bad("unknown attribute %q ignored (want SNMP QQ TT ETRN KILL FLUSH HOLD RELOAD ALL NONE)", unknown[0])
		}
		ok := true
		if len(f) == 4 {
			for _, w := range strings.FieldsFunc(f[3], func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
				ad, err := parseAuthAddr(w)
				if err != nil {
					bad("%q: %v; line skipped", w, err)
					ok = false
					break
				}
				e.Addrs = append(e.Addrs, ad)
			}
		}
		if ok {
			a.Entries = append(a.Entries, e)
		}
	}
	if err := sc.Err(); err != nil {
		a.Problems = append(a.Problems, fmt.Errorf("%w: %s: %v", ErrAuthFile, name, err))
	}
	return a
}

func parseAuthAddr(w string) (authAddr, error) {
	var ad authAddr
	if rest, ok := strings.CutPrefix(w, "!"); ok {
		ad.not, w = true, rest
	}
	host, bits := w, ""
	if strings.HasPrefix(w, "[") {
		end := strings.IndexByte(w, ']')
		if end < 0 {
			return ad, errors.New("no closing ']'")
		}
		host, bits = w[1:end], w[end+1:]
		if len(host) > 5 && strings.EqualFold(host[:4], "ipv6") && (host[4] == ':' || host[4] == '.') {
			host = host[5:]
		}
	} else if i := strings.LastIndexByte(w, '/'); i >= 0 {
		host, bits = w[:i], w[i:]
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return ad, fmt.Errorf("not an IP address: %v", err)
	}
	if addr.Zone() != "" {
		return ad, errors.New("an address with a zone never matches a client")
	}
	width := addr.BitLen()
	if bits != "" {
		digits, ok := strings.CutPrefix(bits, "/")
		n, err := strconv.Atoi(digits)
		if !ok || err != nil || !isDigits(digits) {
			return ad, fmt.Errorf("%q: want /bits after the address", bits)
		}
		width = n
	}
	if addr.Is4In6() {
		// A client's IPv4-mapped address is compared as IPv4, as ZMailer does.
		addr = addr.Unmap()
		width -= 96
		if width < 0 {
			return ad, errors.New("an IPv4-mapped prefix shorter than /96 is not an IPv4 network")
		}
	}
	if width > addr.BitLen() {
		return ad, fmt.Errorf("/%d is longer than the address", width)
	}
	p, err := addr.Prefix(width)
	if err != nil {
		return ad, err
	}
	ad.prefix = p
	return ad, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// allows reports whether e's address list lets addr in: the first address
// that contains it decides; an empty list allows any address.
func (e *AuthEntry) allows(addr netip.Addr) bool {
	if len(e.Addrs) == 0 {
		return true
	}
	addr = addr.Unmap()
	for _, a := range e.Addrs {
		if a.prefix.Contains(addr) {
			return !a.not
		}
	}
	return false
}

// Admits reports whether some entry lets a client at addr try to log in
// (MAILQ v2 closes on the others at once).
func (a *Auth) Admits(addr netip.Addr) bool {
	for i := range a.Entries {
		if a.Entries[i].allows(addr) {
			return true
		}
	}
	return false
}

// Check verifies an AUTH line's user and authenticator for a client at
// addr: the first entry for user whose addresses allow addr decides, and
// the authenticator is the lowercase hex MD5 of the challenge line followed
// by the password (APOP style). It returns the entry's rights, or
// ErrUnknownUser (no such entry) or ErrBadPassword.
func (a *Auth) Check(user, authenticator, challenge string, addr netip.Addr) (Perm, error) {
	for i := range a.Entries {
		e := &a.Entries[i]
		if e.User != user || !e.allows(addr) {
			continue
		}
		want := Authenticator(challenge, e.Password)
		if subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(authenticator))) == 1 {
			return e.Perm, nil
		}
		return 0, ErrBadPassword
	}
	return 0, ErrUnknownUser
}

// Authenticator is what a client sends in AUTH: hex MD5 of the challenge
// line (as the server sent it, "220 " included) and the password.
func Authenticator(challenge, password string) string {
	sum := md5.Sum([]byte(challenge + password))
	return hex.EncodeToString(sum[:])
}

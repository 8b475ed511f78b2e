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
	"strings"
)

// ErrAuthFile is wrapped by every error in an auth file.
var ErrAuthFile = errors.New("control: bad auth file")

// AuthEntry is one line of an auth file:
// "user:password:ATTR ATTR…:addr/len addr/len…", ZMailer's scheduler.auth
// format. Addresses may be written in brackets and negated with a leading
// '!'; the first that contains the client decides; an empty list allows any
// address.
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
}

// ReadAuth reads and parses an auth file.
func ReadAuth(path string) (*Auth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("control: auth file: %w", err)
	}
	return ParseAuth(path, b)
}

// ParseAuth parses auth-file text; name is used in errors. Blank lines and
// lines starting with '#' are skipped.
func ParseAuth(name string, data []byte) (*Auth, error) {
	a := &Auth{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, ":", 4)
		if len(f) < 3 || f[0] == "" {
			return nil, fmt.Errorf("%w: %s:%d: want user:password:ATTRS:addresses", ErrAuthFile, name, n)
		}
		e := AuthEntry{User: f[0], Password: f[1], Line: n}
		var bad []string
		e.Perm, bad = ParsePerm(f[2])
		if len(bad) > 0 {
			return nil, fmt.Errorf("%w: %s:%d: unknown attribute %q (want SNMP QQ TT ETRN KILL FLUSH HOLD RELOAD ALL)", ErrAuthFile, name, n, bad[0])
		}
		if len(f) == 4 {
			for _, w := range strings.Fields(f[3]) {
				ad, err := parseAuthAddr(w)
				if err != nil {
					return nil, fmt.Errorf("%w: %s:%d: %q: %v", ErrAuthFile, name, n, w, err)
				}
				e.Addrs = append(e.Addrs, ad)
			}
		}
		a.Entries = append(a.Entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrAuthFile, name, err)
	}
	return a, nil
}

func parseAuthAddr(w string) (authAddr, error) {
	var ad authAddr
	if rest, ok := strings.CutPrefix(w, "!"); ok {
		ad.not, w = true, rest
	}
	bits := ""
	if i := strings.LastIndexByte(w, '/'); i >= 0 && !strings.HasSuffix(w, "]") {
		w, bits = w[:i], w[i:]
	}
	w = strings.TrimSuffix(strings.TrimPrefix(w, "["), "]")
	addr, err := netip.ParseAddr(w)
	if err != nil {
		return ad, err
	}
	addr = addr.Unmap()
	if bits == "" {
		ad.prefix = netip.PrefixFrom(addr, addr.BitLen())
		return ad, nil
	}
	p, err := netip.ParsePrefix(addr.String() + bits)
	if err != nil {
		return ad, err
	}
	ad.prefix = p.Masked()
	return ad, nil
}

// allows reports whether e's address list lets addr in.
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
// addr: the first entry for user whose addresses allow addr decides, and the
// authenticator is the lowercase hex MD5 of the challenge line followed by
// the password (APOP style). It returns the entry's rights.
func (a *Auth) Check(user, authenticator, challenge string, addr netip.Addr) (Perm, bool) {
	for i := range a.Entries {
		e := &a.Entries[i]
		if e.User != user || !e.allows(addr) {
			continue
		}
		want := Authenticator(challenge, e.Password)
		if subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(authenticator))) == 1 {
			return e.Perm, true
		}
		return 0, false
	}
	return 0, false
}

// Authenticator is what a client sends in AUTH: hex MD5 of the challenge
// line (as the server sent it, "220 " included) and the password.
func Authenticator(challenge, password string) string {
	sum := md5.Sum([]byte(challenge + password))
	return hex.EncodeToString(sum[:])
}

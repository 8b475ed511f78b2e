package smtpclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Target is one server to try: the name it was found under (an MX host, the
// domain itself, or "[ip]" for an address literal) and its address.
type Target struct {
	Name string // "mx1.example.com", or "[192.0.2.1]"
	Addr string // "ip:port"
	Pref int    // MX preference; 0 for literals and A/AAAA fallback
}

func (t Target) String() string {
	if t.Name == "" || strings.HasPrefix(t.Name, "[") {
		return t.Addr
	}
	return t.Name + "[" + t.Addr + "]"
}

// tlsName is the name a certificate is checked against: the MX host name,
// or the address of a literal.
func (t Target) tlsName() string {
	if strings.HasPrefix(t.Name, "[") {
		return strings.Trim(t.Name, "[]")
	}
	return strings.TrimSuffix(t.Name, ".")
}

// Nexthop is where mail for a domain goes: a host whose MX records are
// looked up (MX true), or a host or address used as it is ("[host]" in
// Postfix's and ZMailer's notation), on Port.
type Nexthop struct {
	Host string
	Port int
	MX   bool
}

func (n Nexthop) String() string {
	h := n.Host
	if !n.MX {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(n.Port)
}

// ErrNexthop is wrapped by ParseNexthop's errors.
var ErrNexthop = errors.New("smtpclient: bad next hop")

// ParseNexthop parses "host", "host:port", "[host]", "[host]:port" or
// "[ip]"; a bare IP address is taken as a literal too. port is the port
// when none is given.
func ParseNexthop(s string, port int) (Nexthop, error) {
	n := Nexthop{Port: port, MX: true}
	if s == "" {
		return n, fmt.Errorf("%w: empty", ErrNexthop)
	}
	host := s
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return n, fmt.Errorf("%w: %q: unclosed '['", ErrNexthop, s)
		}
		host, n.MX = s[1:end], false
		rest := s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return n, fmt.Errorf("%w: %q: junk after ']'", ErrNexthop, s)
			}
			p, err := parsePort(rest[1:])
			if err != nil {
				return n, fmt.Errorf("%w: %q: %w", ErrNexthop, s, err)
			}
			n.Port = p
		}
	} else if _, err := netip.ParseAddr(s); err == nil {
		n.MX = false // a bare IPv6 address: its colons are not a port
	} else if h, p, ok := strings.Cut(s, ":"); ok {
		pn, err := parsePort(p)
		if err != nil {
			return n, fmt.Errorf("%w: %q: %w", ErrNexthop, s, err)
		}
		host, n.Port = h, pn
	}
	if host == "" || strings.ContainsAny(host, " \t\r\n[]/") {
		return n, fmt.Errorf("%w: %q: bad host", ErrNexthop, s)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		n.MX = false
	}
	n.Host = strings.ToLower(host)
	return n, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return p, nil
}

// Resolver is the part of *net.Resolver the lookup needs; tests inject a
// table instead of the internet.
type Resolver interface {
	LookupMX(ctx context.Context, name string) ([]*net.MX, error)
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Errors of Lookup that callers branch on.
var (
	// ErrNullMX: the domain publishes "MX 0 ." (RFC 7505): it accepts no
	// mail, a permanent failure.
	ErrNullMX = errors.New("smtpclient: domain accepts no mail (null MX)")
	// ErrNoHost: the name does not exist, or has no address.
	ErrNoHost = errors.New("smtpclient: host not found")
)

// MaxTargets caps the addresses Lookup returns, like Postfix's
// smtp_mx_address_limit, so a domain with many MX hosts costs a bounded
// number of connection attempts per delivery.
const MaxTargets = 10

// Lookup finds the servers for n, best first: a literal is itself; a host
// with MX true gets its MX hosts in preference order (equal preferences in
// the resolver's order), each with its A and AAAA addresses, and falls back
// to the host's own addresses when it has no MX records (RFC 5321 §5.1).
// Errors wrap ErrNullMX, ErrNoHost (also when the MX hosts have no
// address), or the resolver's error for a temporary DNS failure.
func Lookup(ctx context.Context, r Resolver, n Nexthop) ([]Target, error) {
	port := strconv.Itoa(n.Port)
	if ip, err := netip.ParseAddr(n.Host); err == nil {
		return []Target{{Name: "[" + n.Host + "]", Addr: net.JoinHostPort(ip.String(), port)}}, nil
	}
	if !n.MX {
		return addrs(ctx, r, n.Host, 0, port, nil)
	}
	mxs, err := r.LookupMX(ctx, n.Host)
	if err != nil && !notFound(err) {
		return nil, fmt.Errorf("smtpclient: MX lookup for %s: %w", n.Host, err)
	}
	if len(mxs) == 0 {
		// No MX records (or "no such host", which the A lookup confirms).
		return addrs(ctx, r, n.Host, 0, port, nil)
	}
	if len(mxs) == 1 && (mxs[0].Host == "." || mxs[0].Host == "") {
		return nil, fmt.Errorf("%w: %s", ErrNullMX, n.Host)
	}
	// net.Resolver sorts (shuffling equal preferences); other resolvers
	// need not.
	mxs = slices.Clone(mxs)
	slices.SortStableFunc(mxs, func(a, b *net.MX) int { return int(a.Pref) - int(b.Pref) })
	var out []Target
	var lastErr error
	for _, mx := range mxs {
		if len(out) >= MaxTargets {
			break
		}
		host := strings.TrimSuffix(mx.Host, ".")
		if host == "" {
			continue
		}
		t, err := addrs(ctx, r, host, int(mx.Pref), port, out)
		if err != nil {
			lastErr = err
			continue
		}
		out = t
	}
	if len(out) == 0 {
		if lastErr == nil {
			lastErr = fmt.Errorf("%w: %s: no usable MX host", ErrNoHost, n.Host)
		}
		return nil, lastErr
	}
	return out, nil
}

// addrs appends host's addresses to out.
func addrs(ctx context.Context, r Resolver, host string, pref int, port string, out []Target) ([]Target, error) {
	ips, err := r.LookupIPAddr(ctx, host)
	if err != nil {
		if notFound(err) {
			return out, fmt.Errorf("%w: %s: %w", ErrNoHost, host, err)
		}
		return out, fmt.Errorf("smtpclient: address lookup for %s: %w", host, err)
	}
	if len(ips) == 0 {
		return out, fmt.Errorf("%w: %s: no address", ErrNoHost, host)
	}
	for _, ip := range ips {
		if len(out) >= MaxTargets {
			break
		}
		out = append(out, Target{Name: host, Addr: net.JoinHostPort(ip.IP.String(), port), Pref: pref})
	}
	return out, nil
}

func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// StaticResolver answers from tables, for tests and for hosts without DNS.
// A name absent from both tables does not exist.
type StaticResolver struct {
	MX   map[string][]*net.MX
	Addr map[string][]net.IPAddr
	// Fail, when it has the name, is returned as a temporary DNS error.
	Fail map[string]bool
}

func (s *StaticResolver) err(name string) error {
	if s.Fail[name] {
		return &net.DNSError{Err: "server misbehaving", Name: name, IsTemporary: true}
	}
	return &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

// LookupMX implements Resolver.
func (s *StaticResolver) LookupMX(_ context.Context, name string) ([]*net.MX, error) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if s.Fail[name] {
		return nil, s.err(name)
	}
	if mx, ok := s.MX[name]; ok {
		return mx, nil
	}
	return nil, s.err(name)
}

// LookupIPAddr implements Resolver.
func (s *StaticResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if s.Fail[host] {
		return nil, s.err(host)
	}
	if a, ok := s.Addr[host]; ok {
		return a, nil
	}
	return nil, s.err(host)
}

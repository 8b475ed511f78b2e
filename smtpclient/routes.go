package smtpclient

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Route is one entry of a static route map: where mail for a domain goes
// instead of its MX hosts (a smarthost, or a test server), and the TLS
// policy for it.
type Route struct {
	Pattern string  // as written: "example.com", ".example.com" or "*"
	Nexthop Nexthop // zero Host: the domain itself, by MX
	TLS     TLSPolicy
	HasTLS  bool // TLS was given; otherwise the agent's default applies
}

// Routes is a static route map, looked up by recipient domain: the exact
// domain first, then ".parent" entries from the nearest parent up, then
// "*". The file format is one route per line, '#' starts a comment:
//
//	# domain        next hop              options
//	d0.test         [127.0.0.1]:2525
//	.example.com    smarthost.example.net:587   tls=verify
//	secure.example  -                     tls=encrypt
//	*               [192.0.2.25]
//
// A next hop of "-" keeps the domain's own MX lookup and only sets options.
type Routes struct {
	exact map[string]Route
	def   *Route
}

// ErrRoutes is wrapped by every route-map syntax error.
var ErrRoutes = errors.New("smtpclient: bad route map")

// LoadRoutes reads a route map file; see Routes.
func LoadRoutes(path string, port int) (*Routes, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("smtpclient: %w", err)
	}
	return ParseRoutes(path, data, port)
}

// ParseRoutes parses a route map; name is used in errors, port is the
// port of next hops that give none.
func ParseRoutes(name string, data []byte, port int) (*Routes, error) {
	rs := &Routes{exact: map[string]Route{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s:%d: %s", ErrRoutes, name, n, fmt.Sprintf(format, args...))
		}
		if len(f) < 2 {
			return nil, bad("want a domain and a next hop")
		}
		r := Route{Pattern: strings.ToLower(f[0])}
		if f[1] != "-" {
			nh, err := ParseNexthop(f[1], port)
			if err != nil {
				return nil, bad("%v", err)
			}
			r.Nexthop = nh
		}
		for _, o := range f[2:] {
			k, v, _ := strings.Cut(o, "=")
			switch k {
			case "tls":
				p, err := ParseTLSPolicy(v)
				if err != nil {
					return nil, bad("%v", err)
				}
				r.TLS, r.HasTLS = p, true
			default:
				return nil, bad("unknown option %q", o)
			}
		}
		if r.Pattern == "*" {
			if rs.def != nil {
				return nil, bad("second '*' route")
			}
			rs.def = &r
			continue
		}
		if _, dup := rs.exact[r.Pattern]; dup {
			return nil, bad("second route for %q", r.Pattern)
		}
		rs.exact[r.Pattern] = r
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRoutes, name, err)
	}
	return rs, nil
}

// Lookup returns the route for domain, if any. A nil *Routes has none.
func (rs *Routes) Lookup(domain string) (Route, bool) {
	if rs == nil {
		return Route{}, false
	}
	d := strings.TrimSuffix(strings.ToLower(domain), ".")
	if r, ok := rs.exact[d]; ok {
		return r, true
	}
	for {
		dot := strings.IndexByte(d, '.')
		if dot < 0 {
			break
		}
		if r, ok := rs.exact[d[dot:]]; ok {
			return r, true
		}
		d = d[dot+1:]
	}
	if rs.def != nil {
		return *rs.def, true
	}
	return Route{}, false
}

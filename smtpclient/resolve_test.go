package smtpclient

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
)

func TestParseNexthop(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Nexthop
		err  bool
	}{
		{in: "example.com", want: Nexthop{Host: "example.com", Port: 25, MX: true}},
		{in: "Mail.Example.com:587", want: Nexthop{Host: "mail.example.com", Port: 587, MX: true}},
		{in: "[mail.example.com]", want: Nexthop{Host: "mail.example.com", Port: 25}},
		{in: "[127.0.0.1]:2525", want: Nexthop{Host: "127.0.0.1", Port: 2525}},
		{in: "127.0.0.1", want: Nexthop{Host: "127.0.0.1", Port: 25}},
		{in: "::1", want: Nexthop{Host: "::1", Port: 25}},
		{in: "[::1]:26", want: Nexthop{Host: "::1", Port: 26}},
		{in: "", err: true},
		{in: "[x", err: true},
		{in: "[x]y", err: true},
		{in: "x:0", err: true},
		{in: "x:99999", err: true},
		{in: "[a b]", err: true},
	} {
		got, err := ParseNexthop(tc.in, 25)
		if tc.err {
			if !errors.Is(err, ErrNexthop) {
				t.Errorf("%q: got %+v, %v; want ErrNexthop", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func ips(s ...string) []net.IPAddr {
	var out []net.IPAddr
	for _, a := range s {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out
}

func TestLookup(t *testing.T) {
	r := &StaticResolver{
		MX: map[string][]*net.MX{
			// Listed out of order: Lookup sorts by preference.
			"multi.test":  {{Host: "mx2.multi.test.", Pref: 20}, {Host: "mx1.multi.test.", Pref: 10}, {Host: "gone.multi.test.", Pref: 15}},
			"null.test":   {{Host: ".", Pref: 0}},
			"broken.test": {{Host: "nowhere.test.", Pref: 10}},
		},
		Addr: map[string][]net.IPAddr{
			"mx1.multi.test": ips("192.0.2.1", "2001:db8::1"),
			"mx2.multi.test": ips("192.0.2.2"),
			"plain.test":     ips("192.0.2.9"),
		},
		Fail: map[string]bool{"flaky.test": true},
	}
	ctx := context.Background()
	addrsOf := func(ts []Target) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Addr)
		}
		return out
	}

	got, err := Lookup(ctx, r, Nexthop{Host: "multi.test", Port: 25, MX: true})
	if err != nil {
		t.Fatal(err)
	}
	// Preference order; an MX host without an address is skipped.
	if want := []string{"192.0.2.1:25", "[2001:db8::1]:25", "192.0.2.2:25"}; !slices.Equal(addrsOf(got), want) {
		t.Errorf("multi.test: %q, want %q", addrsOf(got), want)
	}
	if got[0].Name != "mx1.multi.test" || got[2].Pref != 20 {
		t.Errorf("targets %+v", got)
	}

	// No MX: the host's own address (implicit MX).
	got, err = Lookup(ctx, r, Nexthop{Host: "plain.test", Port: 2525, MX: true})
	if err != nil || !slices.Equal(addrsOf(got), []string{"192.0.2.9:2525"}) {
		t.Errorf("plain.test: %v, %v", got, err)
	}
	// [host]: no MX lookup even where MX records exist.
	if _, err := Lookup(ctx, r, Nexthop{Host: "multi.test", Port: 25}); !errors.Is(err, ErrNoHost) {
		t.Errorf("[multi.test]: err %v, want ErrNoHost (A records only)", err)
	}
	got, err = Lookup(ctx, r, Nexthop{Host: "127.0.0.1", Port: 2525})
	if err != nil || len(got) != 1 || got[0].Addr != "127.0.0.1:2525" || got[0].Name != "[127.0.0.1]" {
		t.Errorf("literal: %+v, %v", got, err)
	}

	if _, err := Lookup(ctx, r, Nexthop{Host: "null.test", Port: 25, MX: true}); !errors.Is(err, ErrNullMX) {
		t.Errorf("null MX: err %v", err)
	}
	if _, err := Lookup(ctx, r, Nexthop{Host: "nxdomain.test", Port: 25, MX: true}); !errors.Is(err, ErrNoHost) {
		t.Errorf("nxdomain: err %v, want ErrNoHost", err)
	}
	if _, err := Lookup(ctx, r, Nexthop{Host: "broken.test", Port: 25, MX: true}); !errors.Is(err, ErrNoHost) {
		t.Errorf("MX without address: err %v, want ErrNoHost", err)
	}
	_, err = Lookup(ctx, r, Nexthop{Host: "flaky.test", Port: 25, MX: true})
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsTemporary || errors.Is(err, ErrNoHost) {
		t.Errorf("temporary failure: err %v, want the temporary DNS error", err)
	}
}

func TestLookupCapsTargets(t *testing.T) {
	r := &StaticResolver{MX: map[string][]*net.MX{}, Addr: map[string][]net.IPAddr{}}
	for i := 0; i < 8; i++ {
		h := string(rune('a'+i)) + ".mx.test"
		r.MX["many.test"] = append(r.MX["many.test"], &net.MX{Host: h, Pref: uint16(i)})
		r.Addr[h] = ips("192.0.2.1", "192.0.2.2")
	}
	got, err := Lookup(context.Background(), r, Nexthop{Host: "many.test", Port: 25, MX: true})
	if err != nil || len(got) != MaxTargets {
		t.Fatalf("%d targets, %v; want %d", len(got), err, MaxTargets)
	}
}

func TestRoutes(t *testing.T) {
	rs, err := ParseRoutes("routes", []byte(`
# comment
d0.test        [127.0.0.1]:2525
.example.com   smarthost.test:587  tls=verify
secure.test    -                   tls=encrypt   # only the policy
*              [192.0.2.25]
`), 25)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		domain string
		hop    Nexthop
		tls    TLSPolicy
		hasTLS bool
	}{
		{"d0.test", Nexthop{Host: "127.0.0.1", Port: 2525}, 0, false},
		{"D0.TEST.", Nexthop{Host: "127.0.0.1", Port: 2525}, 0, false},
		{"a.b.example.com", Nexthop{Host: "smarthost.test", Port: 587, MX: true}, TLSVerify, true},
		{"secure.test", Nexthop{}, TLSEncrypt, true},
		{"example.com", Nexthop{Host: "192.0.2.25", Port: 25}, 0, false}, // ".example.com" is subdomains only
		{"other.test", Nexthop{Host: "192.0.2.25", Port: 25}, 0, false},
	} {
		r, ok := rs.Lookup(tc.domain)
		if !ok || r.Nexthop != tc.hop || r.TLS != tc.tls || r.HasTLS != tc.hasTLS {
			t.Errorf("%s: %+v %v", tc.domain, r, ok)
		}
	}
	var none *Routes
	if _, ok := none.Lookup("x"); ok {
		t.Error("nil Routes found a route")
	}
	for _, bad := range []string{"onlydomain", "d [x", "d h tls=sometimes", "d h color=red", "* a\n* b", "d a\nd b"} {
		if _, err := ParseRoutes("r", []byte(bad), 25); !errors.Is(err, ErrRoutes) {
			t.Errorf("%q: err %v, want ErrRoutes", bad, err)
		}
	}
}

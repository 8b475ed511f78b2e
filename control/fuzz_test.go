package control

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParseCommand feeds arbitrary command lines to the socket's parser: it
// must never panic, and what it accepts must be a known verb spelled (in
// any case) by the line's first words, with the rest as its arguments in
// the verb's bounds; what it rejects without a verb must match no verb.
func FuzzParseCommand(f *testing.F) {
	for _, v := range Verbs {
		f.Add(v.Name)
		f.Add(strings.ToLower(v.Name) + " a b c")
	}
	f.Add("AUTH user 0123456789abcdef0123456789abcdef")
	f.Add("WHY ../../etc/passwd")
	f.Add("show\tqueue\x00threads")
	f.Add("SHOW THREAD smtp")
	f.Add("")
	f.Fuzz(func(t *testing.T, line string) {
		v, args, ok := parse(line)
		words := strings.Fields(line)
		if v.Name == "" {
			if ok {
				t.Fatalf("%q: accepted without a verb", line)
			}
			for _, cand := range Verbs {
				if prefixFold(words, strings.Fields(cand.Name)) {
					t.Fatalf("%q: no verb found, but it starts with %q", line, cand.Name)
				}
			}
			return
		}
		name := strings.Fields(v.Name)
		if !prefixFold(words, name) {
			t.Fatalf("%q: parsed as %q, which it does not start with", line, v.Name)
		}
		if len(args) != len(words)-len(name) {
			t.Fatalf("%q: %d arguments, want %d", line, len(args), len(words)-len(name))
		}
		for i, a := range args {
			if a != words[len(name)+i] {
				t.Fatalf("%q: argument %d is %q, want %q", line, i, a, words[len(name)+i])
			}
		}
		inBounds := len(args) >= v.MinArgs && (v.MaxArgs < 0 || len(args) <= v.MaxArgs)
		if ok != inBounds {
			t.Fatalf("%q: ok=%v with %d arguments for %q (%d..%d)", line, ok, len(args), v.Name, v.MinArgs, v.MaxArgs)
		}
	})
}

func prefixFold(words, name []string) bool {
	if len(words) < len(name) {
		return false
	}
	for i := range name {
		if !strings.EqualFold(words[i], name[i]) {
			return false
		}
	}
	return true
}

// FuzzParseAuth feeds arbitrary auth files to the parser and the result to
// Check: neither may panic, and no entry may let in a wrong authenticator.
func FuzzParseAuth(f *testing.F) {
	f.Add("admin:secret:ALL:127.0.0.1/32 [::1]/128\n")
	f.Add("# comment\n\nops:pw:QQ TT,ETRN:!10.0.0.0/8 0.0.0.0/0\n")
	f.Add("x:y::\n")
	f.Add("bad line\n")
	f.Add("u:p:NOPE:300.1.1.1/99\n")
	f.Fuzz(func(t *testing.T, data string) {
		a := ParseAuth("fuzz", []byte(data))
		const challenge = "220 zsched ready <1.2@x>"
		for _, e := range a.Entries {
			for _, addr := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("10.1.2.3")} {
				if _, err := a.Check(e.User, "0", challenge, addr); err == nil {
					t.Fatalf("entry %+v admits a wrong authenticator", e)
				}
				a.Check(e.User, Authenticator(challenge, e.Password), challenge, addr)
			}
		}
	})
}

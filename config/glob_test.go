package config

import (
	"errors"
	"math/rand/v2"
	"path"
	"strings"
	"testing"
)

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything.example.com", true},
		{"smtp", "smtp", true},
		{"smtp", "smtp2", false},
		{"smtp*", "smtp-etrn", true},
		{"*.example.com", "mx.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "mx.example.org", false},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"?", "a", true},
		{"?", "", false},
		{"?", "ab", false},
		{"h?st", "host", true},
		{"h?st", "hst", false},
		{"?", "é", true}, // one character, two bytes
		{"[abc]x", "bx", true},
		{"[abc]x", "dx", false},
		{"[a-c]x", "cx", true},
		{"[a-c]x", "dx", false},
		{"[^a-c]x", "dx", true},
		{"[^a-c]x", "ax", false},
		{"[!a-c]x", "ax", false},
		{"[]]", "]", true},
		{"[^]]", "]", false},
		{"[a-]", "-", true},
		{`[\]]`, "]", true},
		{`[\^]`, "^", true},
		{"[*]", "*", true},
		{"[*]", "a", false},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`\?x`, "?x", true},
		{`a\[b`, "a[b", true},
		{`\{a,b\}`, "{a,b}", true},
		{`\{a,b\}`, "a", false},
		{"*.{se,dk,is,no}", "mx.dk", true}, // ZMailer's one form: braces at the end
		{"*.{se,dk,is,no}", "mx.de", false},
		{"{mx,smtp}.example.com", "smtp.example.com", true}, // braces first, which ZMailer cannot
		{"{mx,smtp}.example.com", "www.example.com", false},
		{"a{b,c}d{e,f}", "acdf", true},
		{"a{b,c}d{e,f}", "acdg", false},
		{"a{,x}b", "ab", true},
		{"a{,x}b", "axb", true},
		{"a{b,{c,d}e}f", "adef", true},
		{"a{b,{c,d}e}f", "adf", false},
		{"{*.se,[0-9]*}", "123", true},
		{"{a,[,]}", ",", true},  // a comma inside a set is not a separator
		{"SMTP", "smtp", false}, // Glob is exact; Match lowercases
		{"[a", "a", false},      // malformed patterns match nothing
		{"{a,b", "a", false},
		{`a\`, "a", false},
	}
	for _, tt := range tests {
		if got := Glob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestCheckGlob(t *testing.T) {
	for _, p := range []string{"*", "a{b,c}", "[]]", `\{`, "{a,{b,c}}", "[{]", "x[}]"} {
		if err := CheckGlob(p); err != nil {
			t.Errorf("CheckGlob(%q): %v", p, err)
		}
	}
	for _, p := range []string{"[a", "[]", "[^]", "{a,b", "a}", `a\`, "{[}]", "{{a}"} {
		if err := CheckGlob(p); !errors.Is(err, ErrGlob) {
			t.Errorf("CheckGlob(%q) = %v, want ErrGlob", p, err)
		}
	}
}

// Without braces, and on names without '/', a ZMailer glob means what a
// path.Match pattern means: compare with that independent implementation.
func TestGlobAgainstPathMatch(t *testing.T) {
	atoms := []string{"a", "b", ".", "*", "?", "[ab]", "[^a]", "[a-b]", `\*`, `\a`}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		var p, s strings.Builder
		for range r.IntN(5) {
			p.WriteString(atoms[r.IntN(len(atoms))])
		}
		for range r.IntN(6) {
			s.WriteByte("ab.*"[r.IntN(4)])
		}
		want, err := path.Match(p.String(), s.String())
		if err != nil {
			t.Fatalf("reference rejects %q: %v", p.String(), err)
		}
		if got := Glob(p.String(), s.String()); got != want {
			t.Fatalf("Glob(%q, %q) = %v, path.Match says %v", p.String(), s.String(), got, want)
		}
	}
}

// A brace pattern matches exactly what one of its expansions matches.
func TestGlobBraceExpansion(t *testing.T) {
	patterns := []string{"{a,b}*", "*{a,b}", "x{a,b*,}y{c,?}", "{a,{b,c}d}e", "{,a}{,b}"}
	r := rand.New(rand.NewPCG(5, 6))
	for _, p := range patterns {
		exp := expand(p)
		for range 3000 {
			var s strings.Builder
			for range r.IntN(6) {
				s.WriteByte("abcdexy"[r.IntN(7)])
			}
			want := false
			for _, e := range exp {
				want = want || Glob(e, s.String())
			}
			if got := Glob(p, s.String()); got != want {
				t.Fatalf("Glob(%q, %q) = %v, its expansions %q say %v", p, s.String(), got, exp, want)
			}
		}
	}
}

// expand is a naive brace expander for patterns without escapes or sets.
func expand(p string) []string {
	open := strings.IndexByte(p, '{')
	if open < 0 {
		return []string{p}
	}
	depth, start := 0, open+1
	var alts []string
	for i := open; i < len(p); i++ {
		switch p[i] {
		case '{':
			depth++
		case ',':
			if depth == 1 {
				alts = append(alts, p[start:i])
				start = i + 1
			}
		case '}':
			depth--
			if depth == 0 {
				alts = append(alts, p[start:i])
				var out []string
				for _, a := range alts {
					out = append(out, expand(p[:open]+a+p[i+1:])...)
				}
				return out
			}
		}
	}
	panic("unbalanced test pattern " + p)
}

func BenchmarkMatch(b *testing.B) {
	c := Default()
	for _, sel := range []string{"local/*", "error/*", "smtp/*.{se,dk,is,no}", "smtp/*.example.com", "smtp/*"} {
		c.Clauses = append(c.Clauses, Clause{Select: sel})
		c.sel = append(c.sel, newSelector(sel))
	}
	for b.Loop() {
		if i, ok := c.Match("smtp", "mx.Other.Example.NET"); !ok || i != 4 {
			b.Fatal(i, ok)
		}
	}
}

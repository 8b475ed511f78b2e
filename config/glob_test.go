package config

import (
	"errors"
	"fmt"
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

// The compiled matcher answers as the backtracking one did, and fails on the
// same patterns with the same error, on random patterns built from every
// construct (sets, ranges, escapes, nested braces, non-ASCII and invalid
// UTF-8, malformed pieces) and random strings over a matching alphabet.
func TestGlobAgainstBacktracking(t *testing.T) {
	atoms := []string{"a", "b", "é", "\xff", "\xc3", ".", ",", "*", "**", "?", "[ab]", "[^a]", "[!b]",
		"[a-b]", "[b-a]", "[]a]", "[a-]", "[é]", "[^é]", "[\\]]", "[\\é-\xff]", "\\*", "\\a", "\\\xc3",
		"{", "}", "{a,b}", "{,a*}", "{[,]}", "{a{b,*},?}", "\\", "["}
	alphabet := []string{"a", "b", "é", "\xff", "\xc3", ".", ",", "*", "]", "\\"}
	r := rand.New(rand.NewPCG(7, 8))
	for range 100000 {
		var p, s strings.Builder
		for range r.IntN(7) {
			p.WriteString(atoms[r.IntN(len(atoms))])
		}
		for range r.IntN(8) {
			s.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		checkAgainstBacktracking(t, p.String(), s.String())
	}
}

// checkAgainstBacktracking compares Glob and CheckGlob with the old matcher
// (when it finishes within its step cap).
func checkAgainstBacktracking(t *testing.T, p, s string) {
	t.Helper()
	errNew, errOld := CheckGlob(p), btCheck(p)
	if fmt.Sprint(errNew) != fmt.Sprint(errOld) {
		t.Fatalf("CheckGlob(%q) = %v, the backtracking matcher said %v", p, errNew, errOld)
	}
	want, _, known := btGlob(p, s)
	if got := Glob(p, s); known && got != want {
		t.Fatalf("Glob(%q, %q) = %v, the backtracking matcher says %v", p, s, got, want)
	}
	if g, err := CompileGlob(p); err == nil && g.kind == patNFA {
		if got, _ := globSteps(t, p, s); known && got != want {
			t.Fatalf("Glob(%q, %q) = %v on sparse sets, the backtracking matcher says %v", p, s, got, want)
		}
	}
}

// globSteps runs the compiled matcher's simulations (the one on bit sets
// when the program is short enough, the sparse one always), fails if they
// disagree, and returns the answer and the most state visits either made.
func globSteps(t *testing.T, p, s string) (bool, int) {
	t.Helper()
	g, err := CompileGlob(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.kind != patNFA {
		t.Fatalf("%q is not run by the NFA", p)
	}
	ok, steps := g.runSparse(s)
	if g.closure != nil {
		ok2, steps2 := g.runBits(s)
		if ok2 != ok {
			t.Fatalf("Glob(%q, %q): bit sets say %v, sparse sets %v", p, s, ok2, ok)
		}
		steps = max(steps, steps2)
	}
	return ok, steps
}

// Issue 16: "flush 'smtp/*a*a*a*a*a*a*a*a*c'" against a 60-character host
// froze the scheduler for 85 s (the backtracking matcher's steps grow as
// n^k). Every pattern here must be decided in a number of steps within a
// constant times (len(s)+1) times the pattern's size, for hosts of 60 to 480
// characters: counted, not timed (BenchmarkGlobPathological times it).
func TestGlobLinearSteps(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		host    func(n int) string
		want    bool
	}{
		{"*a*a*a*a*a*a*a*a*c", func(n int) string { return strings.Repeat("a", n) }, false},
		{"*a*a*a*a*a*a*a*a*c", func(n int) string { return strings.Repeat("a", n-1) + "c" }, true},
		{"*a*?*[ab]*a*{a,b}*a*a*a*c", func(n int) string { return strings.Repeat("ab", n/2) }, false},
		{strings.Repeat("{a,a}", 24) + "c", func(n int) string { return strings.Repeat("a", n) }, false},
		{strings.Repeat("{*,a}", 12) + "c", func(n int) string { return strings.Repeat("a", n) }, false},
		{"*é*é*é*é*é*é*x", func(n int) string { return strings.Repeat("é", n/2) }, false},
	} {
		for _, n := range []int{60, 120, 240, 480} {
			s := tt.host(n)
			got, steps := globSteps(t, tt.pattern, s)
			// Per position: each state is visited once and each add pushes
			// at most 1+2 per state, from up to 4 earlier positions.
			bound := 8 * (len(s) + 1) * (2*len(tt.pattern) + 1)
			if got != tt.want || steps > bound {
				t.Errorf("Glob(%q, %d bytes) = %v in %d steps, want %v within %d", tt.pattern, len(s), got, steps, tt.want, bound)
			}
		}
	}
}

// FuzzGlob checks the compiled matcher against the backtracking one.
func FuzzGlob(f *testing.F) {
	f.Add("*.{se,dk,is,no}", "mx.dk")
	f.Add("[^a-c]x{a,[,]}", "dx,")
	f.Add("*a*?é[\\]]", "aé]")
	f.Fuzz(func(t *testing.T, p, s string) {
		if len(p) > 24 || len(s) > 24 {
			return
		}
		checkAgainstBacktracking(t, p, s)
	})
}

func BenchmarkGlobPathological(b *testing.B) {
	host := strings.Repeat("a", 60)
	for _, p := range []string{"*a*a*a*a*a*a*a*a*c", "*a*a*a*c"} {
		g, err := CompileGlob(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("nfa/"+p, func(b *testing.B) {
			for b.Loop() {
				if g.Match(host) {
					b.Fatal("match")
				}
			}
		})
	}
	// The old matcher, on the smaller pattern only (the larger takes minutes).
	b.Run("backtrack/*a*a*a*c", func(b *testing.B) {
		for b.Loop() {
			if m, _, _ := btGlob("*a*a*a*c", host); m {
				b.Fatal("match")
			}
		}
	})
}

func BenchmarkGlobTypical(b *testing.B) {
	host := "mx1.mail.example.com"
	for _, p := range []string{"*", "*.example.com", "mx?.*.example.{com,net}", "[a-m]*.com"} {
		g, err := CompileGlob(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("nfa/"+p, func(b *testing.B) {
			for b.Loop() {
				g.Match(host)
			}
		})
		b.Run("backtrack/"+p, func(b *testing.B) {
			for b.Loop() {
				btGlob(p, host)
			}
		})
	}
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

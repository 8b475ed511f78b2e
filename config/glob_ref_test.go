package config

// The backtracking matcher Glob used before it was compiled to an NFA, kept
// verbatim (renamed, and counting its steps) as the reference the new one is
// checked against: same answers, same errors.

import (
	"fmt"
	"unicode/utf8"
)

// btMaxSteps stops a runaway backtrack; btGlob's answer is then unknown.
const btMaxSteps = 1 << 22

// btGlob is the old Glob: the answer, the steps taken, and whether the
// answer is known (the step cap was not hit).
func btGlob(pattern, s string) (match bool, steps int, known bool) {
	if btCheck(pattern) != nil {
		return false, 0, true
	}
	match = btMatch(pattern, s, &steps)
	return match, steps, steps <= btMaxSteps
}

// btCheck returns an error wrapping ErrGlob if pattern is malformed: an
// unterminated set or brace, a '}' without '{', or a trailing backslash.
func btCheck(pattern string) error {
	depth := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			if i+1 == len(pattern) {
				return fmt.Errorf("%w: %q ends in a backslash", ErrGlob, pattern)
			}
			i++
		case '[':
			n := btSetEnd(pattern[i:])
			if n < 0 {
				return fmt.Errorf("%w: %q: unterminated [", ErrGlob, pattern)
			}
			i += n - 1
		case '{':
			depth++
		case '}':
			if depth == 0 {
				return fmt.Errorf("%w: %q: } without {", ErrGlob, pattern)
			}
			depth--
		}
	}
	if depth > 0 {
		return fmt.Errorf("%w: %q: unterminated {", ErrGlob, pattern)
	}
	return nil
}

// btMatch matches a pattern already known to be well formed.
func btMatch(p, s string, steps *int) bool {
	for len(p) > 0 {
		*steps++
		if *steps > btMaxSteps {
			return false
		}
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if btMatch(p, s[i:], steps) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			_, n := utf8.DecodeRuneInString(s)
			p, s = p[1:], s[n:]
		case '[':
			if s == "" {
				return false
			}
			n := btSetEnd(p)
			r, size := utf8.DecodeRuneInString(s)
			if !btSetMatch(p[1:n-1], r) {
				return false
			}
			p, s = p[n:], s[size:]
		case '{':
			alts, rest, ok := btBraceSplit(p)
			if !ok {
				return false
			}
			for _, a := range alts {
				if btMatch(a+rest, s, steps) {
					return true
				}
			}
			return false
		case '\\':
			if len(p) == 1 {
				return false
			}
			p = p[1:]
			fallthrough
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
	}
	return s == ""
}

// btSetEnd returns the length of the set starting at p[0] == '[' including its
// closing ']', or -1 if it is not closed. A ']' right after "[", "[^" or "[!" is
// a member, as in shell globs.
func btSetEnd(p string) int {
	i := 1
	if i < len(p) && (p[i] == '^' || p[i] == '!') {
		i++
	}
	if i < len(p) && p[i] == ']' {
		i++
	}
	for ; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case ']':
			return i + 1
		}
	}
	return -1
}

// btSetMatch reports whether r is in the set body (without the brackets).
func btSetMatch(body string, r rune) bool {
	negate := false
	if body != "" && (body[0] == '^' || body[0] == '!') {
		negate, body = true, body[1:]
	}
	in := false
	for body != "" {
		lo, n := btSetRune(body)
		body = body[n:]
		hi := lo
		if len(body) >= 2 && body[0] == '-' {
			hi, n = btSetRune(body[1:])
			body = body[1+n:]
		}
		if lo <= r && r <= hi {
			in = true
		}
	}
	return in != negate
}

// btSetRune decodes one set member, honouring a backslash escape.
func btSetRune(s string) (rune, int) {
	if s[0] == '\\' && len(s) > 1 {
		r, n := utf8.DecodeRuneInString(s[1:])
		return r, n + 1
	}
	return utf8.DecodeRuneInString(s)
}

// btBraceSplit splits p, which starts with '{', into its top-level alternatives
// and the rest of the pattern after the matching '}'; ok is false if the brace
// is not closed.
func btBraceSplit(p string) (alts []string, rest string, ok bool) {
	depth := 0
	start := 1
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			if n := btSetEnd(p[i:]); n > 0 {
				i += n - 1
			}
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
				return append(alts, p[start:i]), p[i+1:], true
			}
		}
	}
	return nil, "", false
}

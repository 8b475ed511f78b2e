package config

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// ErrGlob is wrapped by every glob syntax error.
var ErrGlob = errors.New("config: invalid glob")

// Glob reports whether s matches the ZMailer glob pattern: '*' any string, '?'
// one character, "[set]" and "[^set]" (also "[!set]") with ranges such as a-z,
// '\x' a literal x, and "{a,b,c}" alternatives, which may stand anywhere and
// nest (ZMailer honoured them only at the end of a pattern). Matching is exact;
// Config.Match lowercases both sides. A malformed pattern matches nothing.
// Glob compiles pattern at every call: callers that match one pattern against
// many strings compile it once with CompileGlob.
func Glob(pattern, s string) bool {
	g, err := CompileGlob(pattern)
	return err == nil && g.Match(s)
}

// CheckGlob returns an error wrapping ErrGlob if pattern is malformed: an
// unterminated set or brace, a '}' without '{', or a trailing backslash.
func CheckGlob(pattern string) error {
	_, err := CompileGlob(pattern)
	return err
}

// Pattern is a compiled glob. Matching takes time linear in the string's
// length times the pattern's size, whatever the pattern: it runs the pattern
// as a Thompson NFA over byte positions, keeping the set of live states per
// position instead of backtracking (the backtracking matcher it replaces took
// 85 s for "*a*a*a*a*a*a*a*a*c" against a 60-character host). A Pattern is
// immutable and safe for concurrent use.
type Pattern struct {
	src  string
	kind patternKind
	lit  string // the literal for kinds other than patNFA
	prog []inst // patNFA: the program; its last instruction is opMatch
	// closure[pc] is the set of states pc's empty moves reach (itself
	// included unless it is a split or jump), for programs of at most 64
	// instructions, which run on one-word bit sets; longer ones use sparse
	// sets.
	closure []uint64
}

// patternKind names the shapes matched without the NFA: most clause and
// flush patterns are one of them.
type patternKind uint8

const (
	patNFA    patternKind = iota
	patAny                // only stars
	patExact              // a literal
	patPrefix             // a literal, then stars
	patSuffix             // stars, then a literal
)

type opcode uint8

const (
	opByte  opcode = iota // one byte equal to b
	opAny                 // '?': one UTF-8 character, or one byte that is not one
	opSet                 // one character in (or, negated, not in) the ranges
	opStar                // any byte, staying here; an empty move to the next instruction
	opSplit               // empty moves to x and y
	opJmp                 // an empty move to x
	opMatch               // the end of the pattern
)

type inst struct {
	op     opcode
	b      byte
	negate bool
	rest   bool // a star whose empty moves reach the end: it takes the rest of the string
	x, y   int32
	ranges []runeRange
}

type runeRange struct{ lo, hi rune }

// CompileGlob compiles pattern, or returns an error wrapping ErrGlob if it is
// malformed (see CheckGlob).
func CompileGlob(pattern string) (*Pattern, error) {
	seq, _, err := parseSeq(pattern, 0, false)
	if err != nil {
		return nil, err
	}
	g := &Pattern{src: pattern}
	if g.kind, g.lit = classify(seq); g.kind == patNFA {
		c := compiler{}
		c.seq(seq)
		c.emit(inst{op: opMatch})
		g.prog = c.prog
		g.link()
	}
	return g, nil
}

// link works out, from the last instruction back (every empty move goes
// forward), which stars take the rest and, for a short program, each
// state's closure.
func (g *Pattern) link() {
	m := len(g.prog)
	reaches := make([]bool, m+1) // reaches[pc]: the end is an empty move away
	if m <= 64 {
		g.closure = make([]uint64, m)
	}
	for pc := m - 1; pc >= 0; pc-- {
		in := &g.prog[pc]
		var cl uint64
		switch in.op {
		case opMatch:
			reaches[pc] = true
			cl = 1 << pc
		case opJmp:
			reaches[pc] = reaches[in.x]
			if g.closure != nil {
				cl = g.closure[in.x]
			}
		case opSplit:
			reaches[pc] = reaches[in.x] || reaches[in.y]
			if g.closure != nil {
				cl = g.closure[in.x] | g.closure[in.y]
			}
		case opStar:
			reaches[pc] = reaches[pc+1]
			in.rest = reaches[pc]
			if g.closure != nil {
				cl = 1<<pc | g.closure[pc+1]
			}
		default:
			cl = 1 << pc
		}
		if g.closure != nil {
			g.closure[pc] = cl
		}
	}
}

// String returns the pattern's source.
func (g *Pattern) String() string { return g.src }

// Match reports whether s matches the whole pattern.
func (g *Pattern) Match(s string) bool {
	switch g.kind {
	case patAny:
		return true
	case patExact:
		return s == g.lit
	case patPrefix:
		return strings.HasPrefix(s, g.lit)
	case patSuffix:
		return strings.HasSuffix(s, g.lit)
	}
	if g.closure != nil {
		ok, _ := g.runBits(s)
		return ok
	}
	ok, _ := g.runSparse(s)
	return ok
}

// --- parsing ---

type nodeKind uint8

const (
	nLit  nodeKind = iota // one byte
	nAny                  // '?'
	nSet                  // [set]
	nStar                 // '*' (a run of them)
	nAlt                  // {a,b,...}
)

type node struct {
	kind   nodeKind
	b      byte
	negate bool
	ranges []runeRange
	alts   [][]node
}

// parseSeq parses p from i up to its end or, inside braces, up to the ',' or
// '}' that ends the alternative; it returns where it stopped.
func parseSeq(p string, i int, inBrace bool) ([]node, int, error) {
	var seq []node
	for i < len(p) {
		switch c := p[i]; c {
		case '\\':
			if i+1 == len(p) {
				return nil, i, fmt.Errorf("%w: %q ends in a backslash", ErrGlob, p)
			}
			seq = append(seq, node{kind: nLit, b: p[i+1]})
			i += 2
		case '[':
			n := setEnd(p[i:])
			if n < 0 {
				return nil, i, fmt.Errorf("%w: %q: unterminated [", ErrGlob, p)
			}
			negate, ranges := parseSet(p[i+1 : i+n-1])
			seq = append(seq, node{kind: nSet, negate: negate, ranges: ranges})
			i += n
		case '{':
			alt := node{kind: nAlt}
			i++
			for {
				a, j, err := parseSeq(p, i, true)
				if err != nil {
					return nil, j, err
				}
				alt.alts = append(alt.alts, a)
				if j == len(p) {
					return nil, j, fmt.Errorf("%w: %q: unterminated {", ErrGlob, p)
				}
				i = j + 1
				if p[j] == '}' {
					break
				}
			}
			seq = append(seq, alt)
		case '}':
			if inBrace {
				return seq, i, nil
			}
			return nil, i, fmt.Errorf("%w: %q: } without {", ErrGlob, p)
		case ',':
			if inBrace {
				return seq, i, nil
			}
			seq = append(seq, node{kind: nLit, b: c})
			i++
		case '*':
			if len(seq) == 0 || seq[len(seq)-1].kind != nStar {
				seq = append(seq, node{kind: nStar})
			}
			i++
		case '?':
			seq = append(seq, node{kind: nAny})
			i++
		default:
			seq = append(seq, node{kind: nLit, b: c})
			i++
		}
	}
	return seq, i, nil
}

// setEnd returns the length of the set starting at p[0] == '[' including its
// closing ']', or -1 if it is not closed. A ']' right after "[", "[^" or "[!" is
// a member, as in shell globs.
func setEnd(p string) int {
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

// parseSet parses a set's body (without the brackets) into its ranges; a
// single member is a range of one, "a-" ends in a literal '-', and a range
// whose ends are reversed holds nothing.
func parseSet(body string) (negate bool, ranges []runeRange) {
	if body != "" && (body[0] == '^' || body[0] == '!') {
		negate, body = true, body[1:]
	}
	for body != "" {
		lo, n := setRune(body)
		body = body[n:]
		hi := lo
		if len(body) >= 2 && body[0] == '-' {
			hi, n = setRune(body[1:])
			body = body[1+n:]
		}
		ranges = append(ranges, runeRange{lo, hi})
	}
	return negate, ranges
}

// setRune decodes one set member, honouring a backslash escape.
func setRune(s string) (rune, int) {
	if s[0] == '\\' && len(s) > 1 {
		r, n := utf8.DecodeRuneInString(s[1:])
		return r, n + 1
	}
	return utf8.DecodeRuneInString(s)
}

func setMatch(negate bool, ranges []runeRange, r rune) bool {
	for _, rg := range ranges {
		if rg.lo <= r && r <= rg.hi {
			return !negate
		}
	}
	return negate
}

// classify recognises the shapes Match handles with a string comparison.
func classify(seq []node) (patternKind, string) {
	var lit []byte
	lead := len(seq) > 0 && seq[0].kind == nStar
	trail := len(seq) > 1 && seq[len(seq)-1].kind == nStar
	body := seq
	if lead {
		body = body[1:]
	}
	if trail {
		body = body[:len(body)-1]
	}
	for _, n := range body {
		if n.kind != nLit {
			return patNFA, ""
		}
		lit = append(lit, n.b)
	}
	switch {
	case lead && len(body) == 0:
		return patAny, ""
	case lead && trail:
		return patNFA, "" // *lit*: a substring search, left to the NFA
	case lead:
		return patSuffix, string(lit)
	case trail:
		return patPrefix, string(lit)
	}
	return patExact, string(lit)
}

// --- compiling ---

type compiler struct{ prog []inst }

func (c *compiler) emit(in inst) int32 {
	c.prog = append(c.prog, in)
	return int32(len(c.prog) - 1)
}

// seq compiles a sequence; every jump goes forward except a star's loop on
// itself, so the empty moves never form a cycle.
func (c *compiler) seq(seq []node) {
	for _, n := range seq {
		switch n.kind {
		case nLit:
			c.emit(inst{op: opByte, b: n.b})
		case nAny:
			c.emit(inst{op: opAny})
		case nSet:
			c.emit(inst{op: opSet, negate: n.negate, ranges: n.ranges})
		case nStar:
			c.emit(inst{op: opStar})
		case nAlt:
			// split L1, next; L1: alt1; jmp end; next: split L2, ...; last alt; end:
			var jumps []int32
			for k, a := range n.alts {
				split := int32(-1)
				if k < len(n.alts)-1 {
					split = c.emit(inst{op: opSplit})
					c.prog[split].x = split + 1
				}
				c.seq(a)
				if k < len(n.alts)-1 {
					jumps = append(jumps, c.emit(inst{op: opJmp}))
					c.prog[split].y = int32(len(c.prog))
				}
			}
			for _, j := range jumps {
				c.prog[j].x = int32(len(c.prog))
			}
		}
	}
}

// --- matching ---

// window is how many positions ahead a move can land: a UTF-8 character is
// at most 4 bytes, so states live at positions i..i+4.
const window = utf8.UTFMax + 1

// sparseSet is a set of instruction indexes with O(1) insert, test and
// clear (Briggs and Torczon's sparse set, as in RE2's NFA).
type sparseSet struct {
	dense  []int32
	sparse []int32
}

func (s *sparseSet) has(pc int32) bool {
	i := s.sparse[pc]
	return int(i) < len(s.dense) && s.dense[i] == pc
}

func (s *sparseSet) insert(pc int32) {
	s.sparse[pc] = int32(len(s.dense))
	s.dense = append(s.dense, pc)
}

// decode returns the character at s[i:] and its width, 1 for a byte that
// does not start a valid UTF-8 sequence (as the old matcher read it: a '*'
// may stop inside a character, and what follows then sees a stray byte).
func decode(s string, i int) (rune, int) {
	if r := rune(s[i]); r < utf8.RuneSelf {
		return r, 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runBits simulates a program of at most 64 states on s, one bit per state,
// and returns whether it matched and the number of state visits it made:
// at most (len(s)+1)*len(prog).
func (g *Pattern) runBits(s string) (matched bool, steps int) {
	var sets [window]uint64 // positions i..i+4
	sets[0] = g.closure[0]
	end := uint64(1) << (len(g.prog) - 1)
	for i := 0; ; i++ {
		cur := sets[i%window]
		sets[i%window] = 0
		if i == len(s) {
			return cur&end != 0, steps
		}
		r, w := decode(s, i)
		for b := cur; b != 0; b &= b - 1 {
			pc := bits.TrailingZeros64(b)
			steps++
			switch in := &g.prog[pc]; in.op {
			case opStar:
				if in.rest {
					return true, steps
				}
				sets[(i+1)%window] |= g.closure[pc]
			case opByte:
				if s[i] == in.b {
					sets[(i+1)%window] |= g.closure[pc+1]
				}
			case opAny:
				sets[(i+w)%window] |= g.closure[pc+1]
			case opSet:
				if setMatch(in.negate, in.ranges, r) {
					sets[(i+w)%window] |= g.closure[pc+1]
				}
			}
		}
		if sets[0]|sets[1]|sets[2]|sets[3]|sets[4] == 0 {
			return false, steps
		}
	}
}

// runSparse is runBits for programs of any size, on sparse sets. The number
// of state visits it makes is at most a small constant times
// (len(s)+1)*len(prog): the bound the tests hold it to.
func (g *Pattern) runSparse(s string) (matched bool, steps int) {
	m := int32(len(g.prog))
	buf := make([]int32, 2*window*int(m))
	var sets [window]sparseSet
	for k := range sets {
		sets[k] = sparseSet{dense: buf[:0:m], sparse: buf[m : 2*m : 2*m]}
		buf = buf[2*m:]
	}
	var stack []int32
	// add puts pc and everything its empty moves reach into the set of
	// position j.
	add := func(pc int32, j int) {
		set := &sets[j%window]
		stack = append(stack[:0], pc)
		for len(stack) > 0 {
			pc := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			steps++
			if set.has(pc) {
				continue
			}
			set.insert(pc)
			switch in := &g.prog[pc]; in.op {
			case opJmp:
				stack = append(stack, in.x)
			case opSplit:
				stack = append(stack, in.y, in.x)
			case opStar:
				stack = append(stack, pc+1)
			}
		}
	}
	add(0, 0)
	for i := 0; i <= len(s); i++ {
		cur := &sets[i%window]
		var r rune
		w := 0
		if i < len(s) {
			r, w = decode(s, i)
		}
		for _, pc := range cur.dense {
			steps++
			switch in := &g.prog[pc]; in.op {
			case opMatch:
				if i == len(s) {
					return true, steps
				}
			case opStar:
				if in.rest {
					return true, steps
				}
				if i < len(s) {
					add(pc, i+1)
				}
			case opByte:
				if i < len(s) && s[i] == in.b {
					add(pc+1, i+1)
				}
			case opAny:
				if i < len(s) {
					add(pc+1, i+w)
				}
			case opSet:
				if i < len(s) && setMatch(in.negate, in.ranges, r) {
					add(pc+1, i+w)
				}
			}
		}
		cur.dense = cur.dense[:0]
		live := false
		for k := 1; k < window; k++ {
			live = live || len(sets[(i+k)%window].dense) > 0
		}
		if !live {
			return false, steps
		}
	}
	return false, steps
}

package config

import (
	"strconv"
	"strings"
)

// BurntSushi/toml v1.6.0 records key positions only internally, and keyed by
// dotted name, so the keys of different [[clause]] elements overwrite each
// other. This scanner recovers the line of every table header and key from the
// text, after toml has accepted it. It knows just enough TOML (strings of all
// four kinds, multi-line arrays, comments) not to be fooled by values.

// tableLines is one table or array-of-tables element: its header line and the
// line of each key written in it (first occurrence).
type tableLines struct {
	header int
	keys   map[string]int
}

// line returns the line of key in t, or t's header line if key is unknown.
func (t *tableLines) line(key string) int {
	if n, ok := t.keys[key]; ok {
		return n
	}
	return t.header
}

func (t *tableLines) add(key string, line int) {
	if _, ok := t.keys[key]; !ok {
		t.keys[key] = line
	}
}

type fileLines struct {
	tables map[string]*tableLines   // by header name; "" is the root table
	arrays map[string][]*tableLines // [[name]] elements in file order
}

func newTableLines(header int) *tableLines {
	return &tableLines{header: header, keys: map[string]int{}}
}

// table returns the lines of [name]; for a table never written as a header
// (absent, or inline in the root) the header is the root key's line.
func (f *fileLines) table(name string) *tableLines {
	if t, ok := f.tables[name]; ok {
		return t
	}
	return newTableLines(f.tables[""].line(name))
}

// top returns the line where the top-level name is first written: as a key
// of the root table, a [name] header or a [[name]] header.
func (f *fileLines) top(name string) int {
	if n, ok := f.tables[""].keys[name]; ok {
		return n
	}
	if t, ok := f.tables[name]; ok {
		return t.header
	}
	if a := f.arrays[name]; len(a) > 0 {
		return a[0].header
	}
	return 0
}

// element returns the lines of the i-th [[name]]; for an inline array of tables
// the header is the root key's line.
func (f *fileLines) element(name string, i int) *tableLines {
	if a := f.arrays[name]; i < len(a) {
		return a[i]
	}
	return newTableLines(f.top(name))
}

func scanLines(src string) *fileLines {
	f := &fileLines{
		tables: map[string]*tableLines{"": newTableLines(0)},
		arrays: map[string][]*tableLines{},
	}
	cur := f.tables[""]
	line := 1
	for i := 0; i < len(src); {
		switch c := src[i]; c {
		case '\n':
			line++
			i++
		case ' ', '\t', '\r':
			i++
		case '#':
			i = skipComment(src, i)
		case '[':
			array := i+1 < len(src) && src[i+1] == '['
			start := i + 1
			if array {
				start++
			}
			end := scanKeyEnd(src, start, ']')
			name := normKey(src[start:end])
			cur = f.header(name, array, line)
			i = skipComment(src, end) // the rest of a header line is "]" or "]]" and a comment
		default:
			end := scanKeyEnd(src, i, '=')
			key := normKey(src[i:end])
			cur.add(key, line)
			if first, _, dotted := strings.Cut(key, "."); dotted {
				cur.add(first, line)
			}
			if end < len(src) && src[end] == '=' {
				i, line = skipValue(src, end+1, line)
			} else {
				i = end // not TOML; toml.Decode has rejected it already
			}
		}
	}
	return f
}

// header registers a [name] or [[name]] header and returns the table its keys go to.
func (f *fileLines) header(name string, array bool, line int) *tableLines {
	t := newTableLines(line)
	if parent, sub, dotted := cutLastDot(name); dotted {
		// [clause.x] after [[clause]] is key x of the last clause.
		if a := f.arrays[parent]; len(a) > 0 {
			a[len(a)-1].add(sub, line)
		} else {
			// [defaults.x] defines [defaults] implicitly, here.
			p, ok := f.tables[parent]
			if !ok {
				p = newTableLines(line)
				f.tables[parent] = p
			}
			p.add(sub, line)
		}
	}
	if array {
		f.arrays[name] = append(f.arrays[name], t)
		return t
	}
	if old, ok := f.tables[name]; ok {
		// Defined implicitly by an earlier [name.sub]; its keys are here.
		old.header = line
		return old
	}
	f.tables[name] = t
	return t
}

func cutLastDot(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// scanKeyEnd returns the index of stop (or of the end of the line) from i,
// skipping quoted key parts.
func scanKeyEnd(src string, i int, stop byte) int {
	for i < len(src) && src[i] != stop && src[i] != '\n' {
		switch src[i] {
		case '"', '\'':
			i = skipShortString(src, i)
		default:
			i++
		}
	}
	return min(i, len(src))
}

// skipComment returns the index of the newline ending the line at i.
func skipComment(src string, i int) int {
	for i < len(src) && src[i] != '\n' {
		i++
	}
	return i
}

// skipShortString skips a one-line string starting at the quote src[i].
func skipShortString(src string, i int) int {
	q := src[i]
	for i++; i < len(src) && src[i] != '\n'; i++ {
		if q == '"' && src[i] == '\\' {
			i++
			continue
		}
		if src[i] == q {
			return i + 1
		}
	}
	return i
}

// skipValue skips a value from i to the newline that ends it, counting the
// newlines inside multi-line strings and arrays.
func skipValue(src string, i, line int) (int, int) {
	depth := 0
	for i < len(src) {
		switch c := src[i]; c {
		case '\n':
			if depth == 0 {
				return i, line
			}
			line++
			i++
		case '#':
			i = skipComment(src, i)
		case '[', '{':
			depth++
			i++
		case ']', '}':
			depth = max(depth-1, 0)
			i++
		case '"', '\'':
			if strings.HasPrefix(src[i:], strings.Repeat(string(c), 3)) {
				i, line = skipLongString(src, i, line)
			} else {
				i = skipShortString(src, i)
			}
		default:
			i++
		}
	}
	return i, line
}

// skipLongString skips a multi-line string (three double or single quotes) starting at i.
func skipLongString(src string, i, line int) (int, int) {
	q := src[i]
	delim := strings.Repeat(string(q), 3)
	for i += 3; i < len(src); i++ {
		switch {
		case src[i] == '\n':
			line++
		case q == '"' && src[i] == '\\':
			if i+1 < len(src) && src[i+1] == '\n' {
				line++
			}
			i++
		case strings.HasPrefix(src[i:], delim):
			i += 3
			// Up to two more quotes belong to the content: """a""""" ends the string.
			for k := 0; k < 2 && i < len(src) && src[i] == q; k++ {
				i++
			}
			return i, line
		}
	}
	return i, line
}

// normKey turns a written key (bare, quoted or dotted, with blanks) into the
// dotted form toml's maps use.
func normKey(s string) string {
	var parts []string
	for s = strings.TrimSpace(s); s != ""; {
		var part string
		switch s[0] {
		case '"':
			end := skipShortString(s, 0)
			part = s[:end]
			if u, err := strconv.Unquote(part); err == nil {
				part = u
			}
			s = s[end:]
		case '\'':
			end := skipShortString(s, 0)
			part = strings.Trim(s[:end], "'")
			s = s[end:]
		default:
			end := strings.IndexByte(s, '.')
			if end < 0 {
				end = len(s)
			}
			part = strings.TrimSpace(s[:end])
			s = s[end:]
		}
		parts = append(parts, part)
		s = strings.TrimSpace(s)
		s = strings.TrimPrefix(s, ".")
		s = strings.TrimSpace(s)
	}
	return strings.Join(parts, ".")
}

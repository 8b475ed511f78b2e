package agent

import "bytes"

// tooLongPrefix is how much of an over-long line a TooLong event carries, so
// the caller can log what the agent was saying without holding 64 KiB.
const tooLongPrefix = 256

// keepCap bounds the line buffer kept between lines: one long line must not
// pin its memory for the agent's whole life.
const keepCap = 4 << 10

// splitter cuts a byte stream into lines of at most max bytes (without the
// "\n"). It keeps only the unterminated tail, so an agent costs memory in
// proportion to its longest pending line, not a fixed 64 KiB buffer.
type splitter struct {
	max  int
	line []byte // the current line so far, while it is within max
	long int    // > 0: length so far of a current line that exceeded max
}

// split consumes p. It calls emit for each complete line, and once for each
// line that exceeds max, as soon as it does, with tooLong set and the line's
// first bytes; the rest of that line is discarded up to its "\n".
func (s *splitter) split(p []byte, emit func(line string, tooLong bool)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		switch {
		case s.long > 0:
			s.long += len(seg)
		case len(s.line)+len(seg) > s.max:
			s.long = len(s.line) + len(seg)
			emit(s.prefix(seg), true)
			s.line = s.line[:0]
		case i >= 0 && len(s.line) == 0:
			// Whole line in p: no copy into the buffer.
			emit(lineString(seg), false)
			p = p[i+1:]
			continue
		default:
			s.line = append(s.line, seg...)
		}
		if i < 0 {
			return
		}
		if s.long > 0 {
			s.long = 0
		} else {
			emit(lineString(s.line), false)
			s.line = s.line[:0]
		}
		if cap(s.line) > keepCap {
			s.line = nil
		}
		p = p[i+1:]
	}
}

// hungry is the line an agent writes before every job it takes: one per
// recipient's job under load, worth not allocating.
const hungry = "#hungry"

// lineString returns b as a string, without allocating for "#hungry".
func lineString(b []byte) string {
	if string(b) == hungry {
		return hungry
	}
	return string(b)
}

// prefix returns the first tooLongPrefix bytes of the buffered line followed
// by seg.
func (s *splitter) prefix(seg []byte) string {
	n := min(len(s.line), tooLongPrefix)
	b := make([]byte, 0, tooLongPrefix)
	b = append(b, s.line[:n]...)
	b = append(b, seg[:min(len(seg), tooLongPrefix-n)]...)
	return string(b)
}

// pending returns the length of the unterminated current line: at end of
// input these are the bytes lost.
func (s *splitter) pending() int {
	if s.long > 0 {
		return s.long
	}
	return len(s.line)
}

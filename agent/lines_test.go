package agent

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type splitOut struct {
	Line    string
	TooLong bool
}

// runSplitter feeds chunks to a splitter and returns what it emitted and the
// bytes pending at the end.
func runSplitter(max int, chunks ...[]byte) ([]splitOut, int) {
	s := splitter{max: max}
	var got []splitOut
	for _, c := range chunks {
		s.split(c, func(line string, tooLong bool) {
			got = append(got, splitOut{line, tooLong})
		})
	}
	return got, s.pending()
}

// show prints split results with long lines cut short.
func show(outs []splitOut) string {
	var b strings.Builder
	for _, o := range outs {
		l := o.Line
		if len(l) > 40 {
			l = l[:40] + "..."
		}
		fmt.Fprintf(&b, "[%q len=%d long=%v]", l, len(o.Line), o.TooLong)
	}
	return b.String()
}

// naiveSplit is the reference: cut the whole input at every "\n".
func naiveSplit(max int, in []byte) ([]splitOut, int) {
	segs := bytes.Split(in, []byte("\n"))
	last := segs[len(segs)-1]
	var want []splitOut
	for i, seg := range segs {
		switch {
		case len(seg) > max:
			want = append(want, splitOut{string(seg[:min(len(seg), tooLongPrefix)]), true})
		case i < len(segs)-1:
			want = append(want, splitOut{string(seg), false})
		}
	}
	return want, len(last)
}

func TestSplitter(t *testing.T) {
	x := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name    string
		chunks  []string
		want    []splitOut
		pending int
	}{
		{"empty input", nil, nil, 0},
		{"one line", []string{"a\n"}, []splitOut{{"a", false}}, 0},
		{"empty lines", []string{"\n\n"}, []splitOut{{"", false}, {"", false}}, 0},
		{"cr kept", []string{"a\r\n"}, []splitOut{{"a\r", false}}, 0},
		{"line across chunks", []string{"ab", "c", "d\ne"}, []splitOut{{"abcd", false}}, 1},
		{"newline alone in a chunk", []string{"ab", "\n"}, []splitOut{{"ab", false}}, 0},
		{"unterminated", []string{"a\nlost"}, []splitOut{{"a", false}}, 4},
		{"exactly max", []string{x(MaxLine) + "\n"}, []splitOut{{x(MaxLine), false}}, 0},
		{"max plus one", []string{x(MaxLine+1) + "\nnext\n"},
			[]splitOut{{x(tooLongPrefix), true}, {"next", false}}, 0},
		{"too long across chunks, reported once", []string{x(MaxLine), "x", x(5000), "\nnext\n"},
			[]splitOut{{x(tooLongPrefix), true}, {"next", false}}, 0},
		{"too long and unterminated", []string{x(MaxLine + 10)},
			[]splitOut{{x(tooLongPrefix), true}}, MaxLine + 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var chunks [][]byte
			for _, c := range tt.chunks {
				chunks = append(chunks, []byte(c))
			}
			got, pending := runSplitter(MaxLine, chunks...)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("lines = %s, want %s", show(got), show(tt.want))
			}
			if pending != tt.pending {
				t.Errorf("pending = %d, want %d", pending, tt.pending)
			}
		})
	}
}

// FuzzSplitter checks that however the stream is cut into reads, the
// splitter says what cutting the whole stream at once says.
func FuzzSplitter(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), []byte{1, 2, 3}, uint8(0))
	f.Add(bytes.Repeat([]byte("y"), 700), []byte{200, 7}, uint8(10))
	f.Add(append(bytes.Repeat([]byte("z"), 300), "\nok\n"...), []byte{0}, uint8(40))
	f.Fuzz(func(t *testing.T, in, cuts []byte, m uint8) {
		// max >= tooLongPrefix so the prefix of a long line is always
		// complete when it is reported.
		max := tooLongPrefix + int(m)
		var chunks [][]byte
		rest := in
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(n, 1+int(cuts[i%len(cuts)]))
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		got, pending := runSplitter(max, chunks...)
		want, wantPending := naiveSplit(max, in)
		if !reflect.DeepEqual(got, want) || pending != wantPending {
			t.Errorf("got %s pending %d, want %s pending %d", show(got), pending, show(want), wantPending)
		}
	})
}

// TestSplitterHungryAllocs: the line an agent writes before every job
// costs no allocation, whole in a read or cut across two.
func TestSplitterHungryAllocs(t *testing.T) {
	s := splitter{max: MaxLine}
	var got []string
	emit := func(line string, _ bool) { got = append(got, line) }
	whole, head, tail := []byte("#hungry\n#hungry\n"), []byte("#hun"), []byte("gry\n")
	got = make([]string, 0, 4)
	allocs := testing.AllocsPerRun(100, func() {
		got = got[:0]
		s.split(whole, emit)
		s.split(head, emit)
		s.split(tail, emit)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per 3 #hungry lines, want 0", allocs)
	}
	if want := []string{"#hungry", "#hungry", "#hungry"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

package smtpclient

import (
	"bufio"
	"bytes"
	"net/textproto"
	"testing"
)

// dotBoth writes msg, cut into pieces at cuts, through dotWriter and
// through net/textproto's DotWriter, and returns both outputs.
func dotBoth(t testing.TB, msg []byte, cuts []int) (ours, theirs string) {
	var a, b bytes.Buffer
	aw, bw := bufio.NewWriter(&a), bufio.NewWriter(&b)
	d := dotWriter{w: aw}
	td := textproto.NewWriter(bw).DotWriter()
	prev := 0
	for _, c := range append(cuts, len(msg)) {
		c = min(max(c, prev), len(msg))
		if n, err := d.Write(msg[prev:c]); n != c-prev || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
		td.Write(msg[prev:c])
		prev = c
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	td.Close()
	return a.String(), b.String()
}

func TestDotWriterMatchesTextproto(t *testing.T) {
	for _, msg := range []string{
		"", "a", "a\n", "a\r\n", ".", ".\n", "..\n", "a\n.b\n", "a\r\n.\r\n", "x\r", "x\r.\n", "\r\r\n",
		"\n\n.\n", "a\nb", ".a\r\n..b\n\r.c", "Subject: t\n\nbody\n.\n",
	} {
		for cut := 0; cut <= len(msg); cut++ {
			ours, theirs := dotBoth(t, []byte(msg), []int{cut})
			if ours != theirs {
				t.Errorf("%q cut at %d: %q, textproto %q", msg, cut, ours, theirs)
			}
		}
	}
}

func FuzzDotWriter(f *testing.F) {
	f.Add([]byte("a\n.b\r\n..c\r"), 3, 7)
	f.Add([]byte(".\r\r\n\n"), 1, 2)
	f.Fuzz(func(t *testing.T, msg []byte, c1, c2 int) {
		ours, theirs := dotBoth(t, msg, []int{c1 % (len(msg) + 1), c2 % (len(msg) + 1)})
		if ours != theirs {
			t.Fatalf("%q: %q, textproto %q", msg, ours, theirs)
		}
	})
}

func BenchmarkDotWriter(b *testing.B) {
	msg := bytes.Repeat([]byte("A line of a message body, of the usual length for text mail.\n"), 64)
	w := bufio.NewWriterSize(discard{}, 64<<10)
	b.SetBytes(int64(len(msg)))
	b.Run("ours", func(b *testing.B) {
		for b.Loop() {
			d := dotWriter{w: w}
			d.Write(msg)
			d.Close()
		}
	})
	b.Run("textproto", func(b *testing.B) {
		for b.Loop() {
			d := textproto.NewWriter(w).DotWriter()
			d.Write(msg)
			d.Close()
		}
	})
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

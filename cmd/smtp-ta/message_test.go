package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		in   string
		prev byte
		lfs  int64
		high bool
	}{
		{"", 0, 0, false},
		{"a\nb\r\nc\n", 0, 2, false},
		{"\n", '\r', 0, false},
		{"\n", 'x', 1, false},
		{"caf\xc3\xa9\r\n", 0, 0, true},
		{"\r\r\n\n", 0, 1, false},
	} {
		lfs, high := scan([]byte(tc.in), tc.prev)
		if lfs != tc.lfs || high != tc.high {
			t.Errorf("scan(%q, %q) = %d, %v; want %d, %v", tc.in, tc.prev, lfs, high, tc.lfs, tc.high)
		}
		// In pieces, through scanReader's carried byte, as one.
		if tc.prev == 0 {
			lfs, high, err := scanReader(strings.NewReader(tc.in), make([]byte, 1))
			if err != nil || lfs != tc.lfs || high != tc.high {
				t.Errorf("scanReader(%q) by bytes = %d, %v, %v", tc.in, lfs, high, err)
			}
		}
	}
}

// preadUpTo reads a file from an offset to its end, one pread for a small
// one, and says when the rest is more than the limit.
func TestPreadUpTo(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 10, 4095, 4096, 4097, 20000} {
		data := bytes.Repeat([]byte("0123456789"), size/10+1)[:size]
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, off := range []int64{0, 3} {
			want := data[min(int(off), len(data)):]
			got, whole, err := preadUpTo(fd, nil, off, -1)
			if err != nil || !whole || !bytes.Equal(got, want) {
				t.Errorf("size %d off %d: %d bytes, whole %v, %v", size, off, len(got), whole, err)
			}
			buf := make([]byte, 0, 16) // reused and grown
			got, whole, err = preadUpTo(fd, buf, off, 5000)
			if fits := len(want) <= 5000; err != nil || whole != fits || (fits && !bytes.Equal(got, want)) {
				t.Errorf("size %d off %d limit 5000: %d bytes, whole %v, %v", size, off, len(got), whole, err)
			}
		}
		unix.Close(fd)
	}
}

func TestParts(t *testing.T) {
	p := parts{b: [3][]byte{[]byte("head\n"), newline, []byte("body\n")}}
	var b bytes.Buffer
	if n, err := io.Copy(&b, &p); n != 11 || err != nil || b.String() != "head\n\nbody\n" {
		t.Fatalf("WriteTo: %d %v %q", n, err, b.String())
	}
	p = parts{b: [3][]byte{[]byte("head\n"), nil, []byte("body\n")}}
	got, err := io.ReadAll(io.LimitReader(&p, 100)) // Read, not WriteTo
	if err != nil || string(got) != "head\nbody\n" {
		t.Fatalf("Read: %q %v", got, err)
	}
}

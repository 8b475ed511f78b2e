package ctlfile

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts is
// consistent with the bytes: every offset points at the line it claims.
// The seed corpus (testdata/fuzz/FuzzParse) holds the files observed in
// zmailer-ta-observed.md and zmailer-mkmsg.py output.
func FuzzParse(f *testing.F) {
	for _, o := range observedFiles {
		f.Add(o.name, o.beforeBytes())
		f.Add(o.name, o.afterBytes())
	}
	f.Add("12-etrn", []byte("T example.com 192.0.2.1\n"))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		file, err := Parse(name, data)
		if err != nil {
			if file != nil {
				t.Fatal("File and error")
			}
			if !strings.HasPrefix(err.Error(), "ctlfile: ") {
				t.Fatalf("error without prefix: %q", err)
			}
			var se *SyntaxError
			if errors.As(err, &se) && (se.Line < 1 || se.Offset < 0 || se.Offset > int64(len(data))) {
				t.Fatalf("syntax error at line %d offset %d of %d bytes", se.Line, se.Offset, len(data))
			}
			return
		}
		checkParsed(t, file, data)
	})
}

func checkParsed(t *testing.T, f *File, data []byte) {
	t.Helper()
	if f.Size > int64(len(data)) {
		t.Fatalf("Size %d > %d", f.Size, len(data))
	}
	lineAt := func(off int64, tag byte) bool {
		return off >= 0 && off < f.Size && data[off] == tag && (off == 0 || data[off-1] == '\n')
	}
	if f.ID == "" && (len(f.Rcpts) > 0 || len(f.ETRNs) == 0) {
		t.Fatal("accepted a file with recipients and no ID")
	}
	prev := int64(-1)
	for i, r := range f.Rcpts {
		if !lineAt(r.Offset, 'r') || r.Offset <= prev {
			t.Fatalf("rcpt %d offset %d", i, r.Offset)
		}
		prev = r.Offset
		if !r.Status.valid() {
			t.Fatalf("rcpt %d status %q", i, r.Status)
		}
		if r.HeaderOffset != -1 && (r.HeaderOffset < r.Offset+2 || !lineAt(r.HeaderOffset-2, 'm') || data[r.HeaderOffset-1] != '\n') {
			t.Fatalf("rcpt %d header offset %d", i, r.HeaderOffset)
		}
		if r.NOffset != -1 && (r.NOffset <= r.Offset || !lineAt(r.NOffset, 'N')) {
			t.Fatalf("rcpt %d N offset %d", i, r.NOffset)
		}
		if r.Sender < -1 || r.Sender >= len(f.Senders) {
			t.Fatalf("rcpt %d sender %d of %d", i, r.Sender, len(f.Senders))
		}
		if r.Host == "" || r.User == "" || r.Channel == "" || strings.ContainsAny(r.Channel+r.Host, " \n") {
			t.Fatalf("rcpt %d: %q %q %q", i, r.Channel, r.Host, r.User)
		}
		if j, ok := f.RcptAt(r.Offset); !ok || j != i {
			t.Fatalf("RcptAt(%d) = %d, %v; want %d", r.Offset, j, ok, i)
		}
	}
	for i, d := range f.Diags {
		if !lineAt(d.Offset, 'd') || (d.Status != Pending && d.Status != Done) {
			t.Fatalf("diag %d at %d status %q", i, d.Offset, d.Status)
		}
	}
	seen := map[int]bool{}
	for _, g := range f.Groups() {
		for _, i := range g.Rcpts {
			r := f.Rcpts[i]
			if seen[i] || r.Status != Pending || r.Channel != g.Channel || r.Host != g.Host {
				t.Fatalf("group %s/%s holds rcpt %d %+v", g.Channel, g.Host, i, r)
			}
			seen[i] = true
		}
	}
	for i, r := range f.Rcpts {
		if (r.Status == Pending) != seen[i] {
			t.Fatalf("rcpt %d (%v) grouped: %v", i, r.Status, seen[i])
		}
	}
	if bytes.Count(data[:f.Size], []byte("\nr")) < len(f.Rcpts)-1 {
		t.Fatal("more recipients than r lines")
	}
}

// TestParseConsistency runs the fuzz invariants over the observed files.
func TestParseConsistency(t *testing.T) {
	for _, o := range observedFiles {
		for _, data := range [][]byte{o.beforeBytes(), o.afterBytes(), fiveRcpts()} {
			f, err := Parse(o.name, data)
			if err != nil {
				t.Fatal(err)
			}
			checkParsed(t, f, data)
		}
	}
}

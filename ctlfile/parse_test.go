package ctlfile

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// a1 is the control file of zmailer-ta-observed.md §3 exactly as listed.
const a1 = "@ 0x00000007\n" +
	"i 10002561\n" +
	"o 122\n" +
	"l <10002561.test@example.org>\n" +
	"e sender@example.org\n" +
	"s smtp example.org sender@example.org 0\n" +
	"r           smtp dest.test ok1@dest.test 0\n" +
	"m\n" +
	"From: sender@example.org\n" +
	"To: ok1@dest.test\n" +
	"Subject: ZMailer TA test\n" +
	"Message-Id: <10002561.test@example.org>\n" +
	"\n"

func TestParseA1(t *testing.T) {
	if len(a1) != 275 {
		t.Fatalf("A1 is %d bytes, the document says 275", len(a1))
	}
	if got := string(observedFiles[0].beforeBytes()); got != a1 {
		t.Fatalf("mkmsgLayout differs from the A1 listing:\n%q\n%q", got, a1)
	}
	f, err := Parse("10002561", []byte(a1))
	if err != nil {
		t.Fatal(err)
	}
	want := &File{
		Name: "10002561", Inum: 10002561, Format: 7, ID: "10002561", BodyOffset: 122,
		LogIdent: "<10002561.test@example.org>", ErrorAddr: "sender@example.org",
		Senders: []Sender{{Channel: "smtp", Host: "example.org", User: "sender@example.org", ErrorAddr: "sender@example.org"}},
		Rcpts: []Rcpt{{
			Offset: 121, Status: Pending, Channel: "smtp", Host: "dest.test", User: "ok1@dest.test",
			HeaderOffset: 166, NOffset: -1, Notify: NotifyFailure, Sender: 0,
		}},
		Size: 275,
	}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Parse(A1) =\n%+v\nwant\n%+v", f, want)
	}
	if i, ok := f.RcptAt(121); !ok || i != 0 {
		t.Errorf("RcptAt(121) = %d, %v", i, ok)
	}
	if _, ok := f.RcptAt(122); ok {
		t.Error("RcptAt(122) found a recipient; the r line starts at 121")
	}
	if f.IsBounce() {
		t.Error("A1 is not a bounce")
	}
}

// TestParseObserved parses the files after ZMailer's agents ran on them and
// checks offsets against the document, and the agents' own d lines (which
// carry the r, header and N offsets the agent computed) against our parse.
func TestParseObserved(t *testing.T) {
	for _, o := range observedFiles {
		t.Run(o.name, func(t *testing.T) {
			before := o.beforeBytes()
			if len(before) != o.before {
				t.Fatalf("reconstructed file is %d bytes, the document says %d", len(before), o.before)
			}
			after := o.afterBytes()
			if len(after) != o.after {
				t.Fatalf("file after the run is %d bytes, the document says %d", len(after), o.after)
			}
			f, err := Parse(o.name, after)
			if err != nil {
				t.Fatal(err)
			}
			if f.Size != int64(o.after) {
				t.Errorf("Size = %d, want %d", f.Size, o.after)
			}
			wantNotify := NotifyFailure
			switch o.notify {
			case "SUCCESS,FAILURE":
				wantNotify = NotifySuccess | NotifyFailure
			case "NEVER":
				wantNotify = NotifyNever
			}
			if len(f.Rcpts) != len(o.rOffs) {
				t.Fatalf("%d rcpts, want %d", len(f.Rcpts), len(o.rOffs))
			}
			var pending []int
			for i, r := range f.Rcpts {
				if r.Offset != o.rOffs[i] || r.NOffset != o.nOffs[i] || r.HeaderOffset != o.mOff+2 {
					t.Errorf("rcpt %d: offset %d N %d header %d, want %d %d %d",
						i, r.Offset, r.NOffset, r.HeaderOffset, o.rOffs[i], o.nOffs[i], o.mOff+2)
				}
				if byte(r.Status) != o.marks[i] {
					t.Errorf("rcpt %d: status %q, want %q", i, r.Status, o.marks[i])
				}
				if r.User != o.rcpts[i] || r.Channel != "smtp" || r.Host != "dest.test" {
					t.Errorf("rcpt %d: %s %s %s", i, r.Channel, r.Host, r.User)
				}
				if r.Notify != wantNotify {
					t.Errorf("rcpt %d: notify %v, want %v", i, r.Notify, wantNotify)
				}
				if o.notify != "" && r.ORCPT != "rfc822;"+o.rcpts[i] {
					t.Errorf("rcpt %d: ORCPT %q", i, r.ORCPT)
				}
				if r.Status == Pending {
					pending = append(pending, i)
				}
			}
			gs := f.Groups()
			if len(pending) == 0 {
				if len(gs) != 0 {
					t.Errorf("Groups() = %v with nothing pending", gs)
				}
			} else if want := []Group{{Channel: "smtp", Host: "dest.test", Rcpts: pending}}; !reflect.DeepEqual(gs, want) {
				t.Errorf("Groups() = %v, want %v", gs, want)
			}
			if len(f.Diags) != len(o.dOffs) {
				t.Fatalf("%d diags, want %d", len(f.Diags), len(o.dOffs))
			}
			for i, d := range f.Diags {
				if d.Offset != o.dOffs[i] || d.Status != Pending {
					t.Errorf("diag %d at %d status %q, want %d ' '", i, d.Offset, d.Status, o.dOffs[i])
				}
				ri, ok := f.RcptAt(d.RcptOffset)
				if !ok {
					t.Errorf("diag %d: no rcpt at %d", i, d.RcptOffset)
					continue
				}
				r := f.Rcpts[ri]
				if d.HeaderOffset != r.HeaderOffset || d.NOffset != r.NOffset {
					t.Errorf("diag %d says header %d N %d; our parse of its rcpt says %d %d",
						i, d.HeaderOffset, d.NOffset, r.HeaderOffset, r.NOffset)
				}
				// Round trip: our formatter writes the agent's exact bytes.
				if got := string(FormatDiag(d)); got != o.dLines[i] {
					t.Errorf("FormatDiag(diag %d) =\n%q\nwant\n%q", i, got, o.dLines[i])
				}
			}
		})
	}
}

func TestParseDiagFields(t *testing.T) {
	o := observedFiles[1]
	f, err := Parse(o.name, o.afterBytes())
	if err != nil {
		t.Fatal(err)
	}
	d := f.Diags[0]
	if d.RcptOffset != 164 || d.HeaderOffset != 254 || d.NOffset != -1 || d.Time != 1795337543 {
		t.Errorf("diag fields %+v", d)
	}
	if !strings.HasPrefix(d.Notary, "bad1@dest.test\x01failed\x015.1.1\x01smtp; 550") || strings.Contains(d.Notary, "\t") {
		t.Errorf("notary %q", d.Notary)
	}
	if !strings.HasPrefix(d.Text, "\r<<- MAIL From:") || !strings.HasSuffix(d.Text, "User unknown") {
		t.Errorf("text %q", d.Text)
	}
}

func TestParseForms(t *testing.T) {
	head := "@ 0x00000007\ni 77\no 1\nl <x>\n"
	tests := []struct {
		name  string
		file  string
		check func(t *testing.T, f *File, text string)
	}{
		{"host list takes the first name, lowercased", head +
			"r           smtp ((MX1.Dest.Test)(mx2 mx3)) u@dest.test 0\nm\nA: b\n\n",
			func(t *testing.T, f *File, text string) {
				if r := f.Rcpts[0]; r.Host != "mx1.dest.test" || r.User != "u@dest.test" {
					t.Errorf("host %q user %q", r.Host, r.User)
				}
			}},
		{"user with blanks, negative privilege", head +
			"r           local localhost \"john q doe\" -2\nm\n\n",
			func(t *testing.T, f *File, text string) {
				if r := f.Rcpts[0]; r.User != `"john q doe"` || r.Priv != -2 {
					t.Errorf("user %q priv %d", r.User, r.Priv)
				}
			}},
		{"lock with PID, done, failed", head +
			"r~  8072    smtp a.test x 0\nr+          smtp a.test y 0\nr-          smtp a.test z 0\nm\n\n",
			func(t *testing.T, f *File, text string) {
				got := fmt.Sprint(f.Rcpts[0].Status, f.Rcpts[0].PID, f.Rcpts[1].Status, f.Rcpts[2].Status)
				if got != "locked 8072 done failed" {
					t.Errorf("got %s", got)
				}
				if len(f.Groups()) != 0 {
					t.Errorf("groups %v; nothing is pending", f.Groups())
				}
			}},
		{"PID wider than 6 digits spills into the delay field", head +
			"r~1234567   smtp a.test x 0\nm\n\n",
			func(t *testing.T, f *File, text string) {
				if f.Rcpts[0].PID != 1234567 || f.Rcpts[0].Channel != "smtp" {
					t.Errorf("pid %d channel %q", f.Rcpts[0].PID, f.Rcpts[0].Channel)
				}
			}},
		{"format without PID and delay fields", "@ 0x00000000\ni 77\nl <x>\n" +
			"r smtp a.test x 0\nr~smtp a.test y 0\n",
			func(t *testing.T, f *File, text string) {
				if f.Rcpts[0].Channel != "smtp" || f.Rcpts[1].Status != Locked || f.Rcpts[1].PID != 0 {
					t.Errorf("%+v", f.Rcpts)
				}
			}},
		{"several s and m blocks", "@ 0x00000007\ni 77\no 1\nl <x>\ne a@x\ns smtp x a@x 0\n" +
			"r           smtp one.test u1 0\nm\nH: 1\n\ne b@y\ns error y b@y 0\nr           smtp two.test u2 0\nr           smtp one.test u3 0\nN NOTIFY=never,Delay\nm\nH: 2\n\n" +
			"r           smtp three.test u4 0\n",
			func(t *testing.T, f *File, text string) {
				if f.ErrorAddr != "a@x" || f.Senders[1].ErrorAddr != "b@y" || f.IsBounce() {
					t.Errorf("error addr %q, senders %+v", f.ErrorAddr, f.Senders)
				}
				var got []string
				for _, r := range f.Rcpts {
					got = append(got, fmt.Sprintf("%s s%d h%d n%d %v", r.User, r.Sender, r.HeaderOffset, r.NOffset, r.Notify))
				}
				h2 := int64(strings.Index(text, "m\nH: 2") + 2)
				n := int64(strings.Index(text, "N NOTIFY"))
				want := []string{
					"u1 s0 h" + fmt.Sprint(int64(strings.Index(text, "m\nH: 1")+2)) + " n-1 FAILURE",
					fmt.Sprintf("u2 s1 h%d n-1 FAILURE", h2),
					fmt.Sprintf("u3 s1 h%d n%d NEVER,DELAY", h2, n),
					"u4 s1 h-1 n-1 FAILURE",
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("got  %q\nwant %q", got, want)
				}
				gs := f.Groups()
				if len(gs) != 3 || gs[0].Host != "one.test" || !reflect.DeepEqual(gs[0].Rcpts, []int{0, 2}) ||
					gs[1].Host != "two.test" || gs[2].Host != "three.test" {
					t.Errorf("groups %+v", gs)
				}
			}},
		{"bounce: no e line, error channel", "@ 0x00000007\ni 77\no 1\nl <x>\ns error localhost - 0\nr           smtp a.test u 0\nm\n\n",
			func(t *testing.T, f *File, text string) {
				if !f.IsBounce() || f.ErrorAddr != "" {
					t.Errorf("bounce %v error addr %q", f.IsBounce(), f.ErrorAddr)
				}
			}},
		{"e <> is the null address", head + "e <>\nr           smtp a.test u 0\nm\n\n",
			func(t *testing.T, f *File, text string) {
				if f.ErrorAddr != "" {
					t.Errorf("error addr %q", f.ErrorAddr)
				}
			}},
		{"X lines and their N lines are skipped", head +
			"r           smtp a.test u 0\nX           1 smtp a.test v 0\nN NOTIFY=SUCCESS\nm\n\n",
			func(t *testing.T, f *File, text string) {
				if len(f.Rcpts) != 1 || f.Rcpts[0].NOffset != -1 || f.Rcpts[0].Notify != NotifyFailure {
					t.Errorf("%+v", f.Rcpts)
				}
			}},
		{"T-only ETRN file", "T example.com 192.0.2.1\n",
			func(t *testing.T, f *File, text string) {
				if f.ID != "" || len(f.Rcpts) != 0 || !reflect.DeepEqual(f.ETRNs, []ETRN{{"example.com", "192.0.2.1"}}) {
					t.Errorf("%+v", f)
				}
			}},
		{"other tags", head + "x 123\nx 456\nR FULL\nn env-1\nv ../public/v1\nb ignored\nr           smtp a.test u 0\nm\n\n",
			func(t *testing.T, f *File, text string) {
				if !reflect.DeepEqual(f.Obsoletes, []string{"123", "456"}) || f.RET != "FULL" || f.ENVID != "env-1" || f.Verbose != "../public/v1" {
					t.Errorf("%+v", f)
				}
			}},
		{"torn d line at the end is ignored", head + "r           smtp a.test u 0\nm\n\nd 121:1",
			func(t *testing.T, f *File, text string) {
				if len(f.Diags) != 0 || f.Size != int64(len(head)+len("r           smtp a.test u 0\nm\n\n")) {
					t.Errorf("diags %v size %d", f.Diags, f.Size)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("77", []byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, f, tc.file)
		})
	}
}

func TestParseErrors(t *testing.T) {
	head := "@ 0x00000007\ni 77\no 1\nl <x>\n"
	rc := "r           smtp a.test u 0\n"
	tests := []struct {
		name string
		file string
		line int   // for a *SyntaxError
		is   error // for a sentinel
	}{
		{"unknown format bit", "@ 0x00000017\ni 77\nl <x>\n" + rc, 0, ErrUnknownFormat},
		{"no i with recipients", "@ 0x00000007\nl <x>\n" + rc, 0, ErrNoID},
		{"empty file", "", 0, ErrNoID},
		{"no l", "@ 0x00000007\ni 77\n" + rc, 0, ErrNoLogIdent},
		{"truncated m block", head + rc + "m\nFrom: a\nTo: b\n", 6, nil},
		{"m block at end of file", head + rc + "m", 6, nil},
		{"m with text", head + rc + "m x\n\n", 6, nil},
		{"bad status byte", head + "rX          smtp a.test u 0\n", 5, nil},
		{"short r line", head + "r      \n", 5, nil},
		{"bad PID", head + "r~  80x2    smtp a.test u 0\n", 5, nil},
		{"left-over garbage after PID", head + "r~ 80  2    smtp a.test u 0\n", 5, nil},
		{"no privilege", head + "r           smtp a.test u\n", 5, nil},
		{"bad privilege", head + "r           smtp a.test u x\n", 5, nil},
		{"no user", head + "r           smtp a.test 0\n", 5, nil},
		{"unbalanced host list", head + "r           smtp ((a)(b u 0\n", 5, nil},
		{"N without r", head + "N NOTIFY=NEVER\n", 5, nil},
		{"d without tab", head + rc + "m\n\nd 121:1:-1::5 notary\n", 8, nil},
		{"d with 4 fields", head + rc + "m\n\nd 121:1:-1:5\tn\tt\n", 8, nil},
		{"d with bad number", head + rc + "m\n\nd 121:x:-1::5\tn\tt\n", 8, nil},
		{"d with bad status", head + rc + "m\n\nd-121:1:-1::5\tn\tt\n", 8, nil},
		{"i with a slash", "@ 0x00000007\ni ../etc/passwd\n", 2, nil},
		{"i is ..", "@ 0x00000007\ni ..\n", 2, nil},
		{"second i", head + "i 78\n", 5, nil},
		{"bad o", "@ 0x00000007\ni 77\no -5\n", 3, nil},
		{"bad @", "@ seven\n", 1, nil},
		{"@ after r", "i 77\nl <x>\n" + rc + "@ 0x00000007\n", 4, nil},
		{"empty line", head + "\n" + rc, 5, nil},
		{"binary tag", head + "\x00 x\n", 5, nil},
		{"status column not blank", "@ 0x00000007\ni~77\n", 2, nil},
		{"line numbers count header lines", head + rc + "m\nA: 1\nB: 2\n\nr           bad\n", 10, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("77", []byte(tc.file))
			if err == nil {
				t.Fatalf("no error; parsed %+v", f)
			}
			if f != nil {
				t.Error("a File came back with the error")
			}
			if !strings.HasPrefix(err.Error(), "ctlfile: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if tc.is != nil {
				if !errors.Is(err, tc.is) {
					t.Errorf("error %v is not %v", err, tc.is)
				}
				return
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *SyntaxError", err, err)
			}
			if se.Line != tc.line {
				t.Errorf("error %q names line %d, want %d", err, se.Line, tc.line)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("line %d:", tc.line)) {
				t.Errorf("error %q does not name line %d", err, tc.line)
			}
			lines := strings.SplitAfter(tc.file, "\n")
			var off int64
			for _, l := range lines[:min(tc.line-1, len(lines))] {
				off += int64(len(l))
			}
			if se.Offset != off {
				t.Errorf("offset %d, want %d", se.Offset, off)
			}
		})
	}
}

func TestUnknownFormatNamesLine(t *testing.T) {
	_, err := Parse("1", []byte("@ 0x00000017\n"))
	if !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), "0x00000017") {
		t.Errorf("error %v", err)
	}
}

func TestHashPath(t *testing.T) {
	// Paths observed from ZMailer's own scheduler and agents (O7, §6).
	for _, tc := range []struct {
		inum int64
		want string
	}{
		{10003003, "I/X/10003003"},
		{9986412, "U/U/9986412"},
		{9986414, "U/W/9986414"},
		{9986417, "U/Z/9986417"},
		{9986095, "I/P/9986095"},
	} {
		name := fmt.Sprint(tc.inum)
		if got := HashPath(name, tc.inum, 2); got != tc.want {
			t.Errorf("HashPath(%d, 2) = %q, want %q", tc.inum, got, tc.want)
		}
		if got, want := HashPath(name, tc.inum, 1), tc.want[2:]; got != want {
			t.Errorf("HashPath(%d, 1) = %q, want %q", tc.inum, got, want)
		}
		if got := HashPath(name, tc.inum, 0); got != name {
			t.Errorf("HashPath(%d, 0) = %q", tc.inum, got)
		}
	}
}

func TestQueuePath(t *testing.T) {
	for _, tc := range []struct{ ctl, want string }{
		{"123", "../queue/123"},
		{"A/123", "../queue/A/123"},
		{"I/X/123", "../queue/I/X/123"},
		{"/po/transport/I/X/123", "/po/queue/I/X/123"},
		{"/po/transport/123", "/po/queue/123"},
		{"transport/A/123", "queue/A/123"},
	} {
		if got := QueuePath(tc.ctl, "123"); got != tc.want {
			t.Errorf("QueuePath(%q) = %q, want %q", tc.ctl, got, tc.want)
		}
	}
}

func TestNotifyString(t *testing.T) {
	for _, s := range []string{"NEVER", "SUCCESS,FAILURE", "FAILURE,DELAY", "SUCCESS,FAILURE,DELAY"} {
		n, err := ParseNotify(strings.ToLower(s))
		if err != nil || n.String() != s {
			t.Errorf("ParseNotify(%q) = %v, %v", s, n, err)
		}
	}
	if _, err := ParseNotify("SOMETIMES"); err == nil {
		t.Error("ParseNotify accepted SOMETIMES")
	}
}

// fiveRcpts is a 5-recipient file for the benchmark: two destinations, N
// lines, a d line.
func fiveRcpts() []byte {
	b := mkmsgLayout("10002600", []string{"a@dest.test", "b@dest.test", "c@dest.test", "d@dest.test", "e@dest.test"}, "SUCCESS,FAILURE")
	s := strings.Replace(string(b), "smtp dest.test c@", "smtp other.test c@", 1)
	return append([]byte(s), observedFiles[1].dLines[0]...)
}

func BenchmarkParse(b *testing.B) {
	data := fiveRcpts()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("10002600", data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGroupsManyDestinations covers files with more destinations than the
// linear search handles, against a naive reference.
func TestGroupsManyDestinations(t *testing.T) {
	var b strings.Builder
	b.WriteString("@ 0x00000007\ni 9\no 1\nl <x>\n")
	for i := range 60 {
		st := " "
		if i%7 == 3 {
			st = "+"
		}
		fmt.Fprintf(&b, "r%s          ch%d h%d.test u%d 0\n", st, i%2, (i*7)%13, i)
	}
	b.WriteString("m\n\n")
	f, err := Parse("9", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	var want []Group
	for i, r := range f.Rcpts {
		if r.Status != Pending {
			continue
		}
		found := false
		for j := range want {
			if want[j].Channel == r.Channel && want[j].Host == r.Host {
				want[j].Rcpts = append(want[j].Rcpts, i)
				found = true
			}
		}
		if !found {
			want = append(want, Group{r.Channel, r.Host, []int{i}})
		}
	}
	if len(want) < 20 {
		t.Fatalf("only %d destinations; the test needs many", len(want))
	}
	if got := f.Groups(); !reflect.DeepEqual(got, want) {
		t.Errorf("Groups() =\n%v\nwant\n%v", got, want)
	}
}

// TestGroupsAllocs: grouping a file, which the scheduler does for every
// file it reads, costs two allocations (the groups, one array of their
// indexes), each group's list capped at its length so that appending to
// one cannot write into the next.
func TestGroupsAllocs(t *testing.T) {
	var b strings.Builder
	b.WriteString("@ 0x00000007\ni 9\no 1\nl <x>\n")
	for i := range 5 {
		fmt.Fprintf(&b, "r           smtp h%d.test u%d 0\n", i, i)
	}
	b.WriteString("m\n\n")
	f, err := Parse("9", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	gs := f.Groups()
	if len(gs) != 5 {
		t.Fatalf("%d groups; want 5", len(gs))
	}
	for _, g := range gs {
		if cap(g.Rcpts) != len(g.Rcpts) {
			t.Errorf("group %s has %d recipients and room for %d", g.Host, len(g.Rcpts), cap(g.Rcpts))
		}
	}
	if n := testing.AllocsPerRun(100, func() { f.Groups() }); n > 2 {
		t.Errorf("Groups of 5 destinations: %v allocations; want 2", n)
	}
}

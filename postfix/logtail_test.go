package postfix

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Lines as Postfix 3.7 writes them to maillog_file.
const sampleLog = `Nov 25 09:57:07 sink postfix/master[7022]: daemon started -- version 3.7.11, configuration /tmp/x/etc
Nov 25 09:57:08 sink postfix/qmgr[7040]: 6CB64985B39: from=<bench@example.org>, size=312, nrcpt=5 (queue active)
Nov 25 09:57:08 sink postfix/discard[7069]: 6CB64985B39: to=<u829.0@d145.test>, relay=none, delay=17, delays=17/0.23/0/0, dsn=2.0.0, status=sent (d145.test)
Nov 25 10:13:16 sink postfix/smtp[29086]: A44ED3790: to=<u8205.1@d26.test>, relay=d26.test[127.0.0.1]:46179, conn_use=498, delay=704, delays=204/500/0.61/0.01, dsn=2.0.0, status=sent (250 2.0.0 Ok)
Nov 25 10:13:16 sink postfix/smtp[29087]: B44ED3790: to=<x@d1.test>, relay=none, delay=1, delays=0/0/1/0, dsn=4.4.1, status=deferred (connect to d1.test[127.0.0.1]:25: Connection refused)
Nov 25 10:13:16 sink postfix/smtp[29088]: C44ED3790: to=<y@d2.test>, relay=d2.test[127.0.0.1]:25, delay=1, delays=0/0/0/1, dsn=5.1.1, status=bounced (host d2.test[127.0.0.1] said: 550 5.1.1 unknown (in reply to RCPT TO command))
Nov 25 10:13:16 sink postfix/smtp[29089]: warning: smtp_connection_cache_on_demand: ignored
Nov 25 10:13:17 sink postfix/qmgr[7040]: 6CB64985B39: removed
Nov 25 10:13:17 sink postfix/cleanup[7041]: 6CB64985B40: message-id=<x: removed>
`

func TestProgressCount(t *testing.T) {
	var p Progress
	for _, l := range strings.Split(strings.TrimSuffix(sampleLog, "\n"), "\n") {
		p.Count([]byte(l))
	}
	want := Progress{Removed: 1, Sent: 2, Deferred: 1, Bounced: 1, Trouble: 1,
		First: "Nov 25 10:13:16 sink postfix/smtp[29089]: warning: smtp_connection_cache_on_demand: ignored"}
	if p != want {
		t.Errorf("progress %+v\nwant %+v", p, want)
	}
}

// The tail counts each line once, however the log grows: whole lines,
// a line in two pieces, a log that does not exist yet.
func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "maillog")
	tail, err := NewLogTail(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := tail.Read(); err != nil || p != (Progress{}) {
		t.Fatalf("no log yet: %+v, %v", p, err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := strings.SplitAfter(sampleLog, "\n")
	var want Progress
	for i, l := range lines {
		if l == "" {
			continue
		}
		// Half a line, read, the rest, read: counted once, when whole.
		half := len(l) / 2
		f.WriteString(l[:half])
		before := want
		if p, _ := tail.Read(); p != before {
			t.Fatalf("line %d half written: %+v, want %+v", i, p, before)
		}
		f.WriteString(l[half:])
		want.Count([]byte(strings.TrimSuffix(l, "\n")))
		if p, _ := tail.Read(); p != want {
			t.Fatalf("line %d written: %+v, want %+v", i, p, want)
		}
	}
	// A tail opened now starts at the end.
	late, err := NewLogTail(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(lines[len(lines)-3]) // the qmgr "removed" line
	if p, _ := late.Read(); p != (Progress{Removed: 1}) {
		t.Errorf("a tail opened at the end: %+v, want the one new line", p)
	}
}

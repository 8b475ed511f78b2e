package trace

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// readAllFrom reads every record of s; a read error (never a malformed
// line) fails the test.
func readAllFrom(t testing.TB, s string, f Format) ([]Record, Stats) {
	t.Helper()
	r := NewReader(strings.NewReader(s), f, Options{Year: 2026, Location: time.UTC})
	var out []Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read error (malformed lines must not be errors): %v", err)
		}
		out = append(out, rec)
	}
	return out, r.Stats()
}

// checkRecords holds for any input: every record is complete enough to
// replay, and the counts add up.
func checkRecords(t *testing.T, recs []Record, st Stats) {
	t.Helper()
	if st.Records != len(recs) {
		t.Fatalf("stats say %d records, read %d", st.Records, len(recs))
	}
	if st.Malformed > st.Lines {
		t.Fatalf("%d malformed of %d lines", st.Malformed, st.Lines)
	}
	for _, r := range recs {
		if r.At.IsZero() || r.Arrival.IsZero() || r.Msg == "" || r.Channel == "" || r.Status == 0 || r.Job == 0 {
			t.Fatalf("incomplete record %+v", r)
		}
		if r.Arrival.After(r.At) {
			t.Fatalf("arrival after the outcome: %+v", r)
		}
	}
}

func seeds(f *testing.F, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i += 7 {
		f.Add(strings.Join(lines[i:min(i+7, len(lines))], "\n"))
	}
}

func FuzzZsched(f *testing.F) {
	seeds(f, "testdata/zsched-text.log")
	seeds(f, "testdata/zsched-json.log")
	f.Add("2026-11-25T10:09:40.351Z outcome msg=1 channel=smtp host=h status=ok delay=1s attempts=1")
	f.Add(`{"@timestamp":"2026-11-25T10:09:40.351Z","@message":"outcome","msg":1,"channel":"smtp","status":"ok","delay":"1s","attempts":1}`)
	f.Fuzz(func(t *testing.T, s string) {
		recs, st := readAllFrom(t, s, Zsched)
		checkRecords(t, recs, st)
	})
}

func FuzzPostfix(f *testing.F) {
	seeds(f, "testdata/postfix-3.7.maillog")
	f.Add("Dec 31 23:59:59 h postfix/smtp[1]: ABCDE12345: to=<a@b>, relay=none, delay=1, delays=0/0/0/0, dsn=4.4.1, status=deferred (connect to b: x)\n" +
		"Jan  1 00:00:00 h postfix/qmgr[2]: ABCDE12345: removed")
	f.Fuzz(func(t *testing.T, s string) {
		recs, st := readAllFrom(t, s, Postfix)
		checkRecords(t, recs, st)
	})
}

package lab

import (
	"cmp"
	"strings"
	"testing"

	"zsched/ctlfile"
)

// TestBenchQueue: recipient r of message i at domain (i·Rcpts+r) mod
// Domains, every message with its Rcpts recipients, or all at the relay.
func TestBenchQueue(t *testing.T) {
	q := BenchQueue{Messages: 5, Rcpts: 3, Domains: 4}
	if d, a := q.Rcpt(3, 1); d != "d2.test" || a != "u3.1@d2.test" {
		t.Fatalf("Rcpt(3, 1) = %s, %s; want d2.test, u3.1@d2.test", d, a)
	}
	for _, host := range []string{"", relayHost} {
		spool := &ctlfile.Spool{Root: t.TempDir(), Hash: 2, NoSync: true}
		if err := spool.Init(); err != nil {
			t.Fatal(err)
		}
		if err := q.Write(spool, host); err != nil {
			t.Fatal(err)
		}
		var rels []string
		if err := spool.Scan(func(rel string) { rels = append(rels, rel) }); err != nil {
			t.Fatal(err)
		}
		if len(rels) != q.Messages {
			t.Fatalf("host %q: %d control files, want %d", host, len(rels), q.Messages)
		}
		for _, rel := range rels {
			f, _, err := spool.Peek(rel)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Rcpts) != q.Rcpts {
				t.Fatalf("%s: %d recipients, want %d", rel, len(f.Rcpts), q.Rcpts)
			}
			for _, r := range f.Rcpts {
				_, domain, _ := strings.Cut(r.User, "@")
				if want := cmp.Or(host, domain); r.Host != want {
					t.Fatalf("%s: %s at host %s, want %s", rel, r.User, r.Host, want)
				}
			}
		}
	}
}

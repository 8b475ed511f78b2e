package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zsched/ctlfile"
)

// The binary with ZMailer's smtp command line: -c, -h, -F [ip] with -p,
// -l; then host-bound, the host as the last argument and job lines
// without one.
func TestBinaryZMailerArgv(t *testing.T) {
	t.Parallel()
	sink := startSink(t)
	_, port, _ := net.SplitHostPort(sink.Addr)
	sp := newSpool(t)
	m1 := sp.enqueue("one\n", "a@d0.test", "b@d0.test")
	m2 := sp.enqueue("two\n", "c@d1.test")
	logFile := filepath.Join(t.TempDir(), "smtp.log")

	d := execAgent(t, sp, "-c", "smtp", "-h", "helo.test", "-F", "[127.0.0.1]", "-p", port, "-l", logFile)
	if st := statuses(d.job(sp, m1, "d0.test")); st["a@d0.test"] != "ok" || st["b@d0.test"] != "ok" {
		t.Fatalf("%v", st)
	}
	d.idle()
	d.end()

	hb := execAgent(t, sp, "-c", "smtp", "-F", "127.0.0.1:"+port, "d1.test")
	if st := statuses(hb.job(sp, m2, "")); st["c@d1.test"] != "ok" {
		t.Fatalf("host-bound: %v", st)
	}
	hb.end()

	for _, rel := range []string{m1, m2} {
		for a, m := range sp.marks(rel) {
			if m != ctlfile.Done {
				t.Errorf("%s marked %q", a, m)
			}
		}
	}
	var txs []string
	deadline := time.Now().Add(5 * time.Second)
	for len(txs) < 2 && time.Now().Before(deadline) {
		all, err := sink.Transactions()
		if err != nil {
			t.Fatal(err)
		}
		txs = txs[:0]
		for _, tx := range all {
			txs = append(txs, tx.Mail+" "+strings.Join(tx.Rcpts, " "))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(txs) != 2 {
		t.Fatalf("sink got %q, want 2 transactions", txs)
	}
	dumps, _ := os.ReadDir(sink.DumpDir)
	var helo bool
	for _, e := range dumps {
		b, _ := os.ReadFile(filepath.Join(sink.DumpDir, e.Name()))
		helo = helo || strings.Contains(string(b), "X-Helo-Args: helo.test")
	}
	if !helo {
		t.Error("no transaction after EHLO helo.test (-h)")
	}
	log, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(log), "transaction: job=") {
		t.Errorf("-l log: %q, %v", log, err)
	}
}

func TestBinaryUsageErrors(t *testing.T) {
	t.Parallel()
	sp := newSpool(t)
	for _, args := range [][]string{{"-tls", "sometimes"}, {"-F", "[x"}, {"-maxrcpt", "0"}, {"a", "b"}} {
		cmd := execCommand(t, sp, args...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.HasPrefix(string(out), "# smtp-ta: ") {
			t.Errorf("%q: exit %v, output %q; want a failure reported as a # line", args, err, out)
		}
	}
}

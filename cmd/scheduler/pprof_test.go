package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestPprofLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "[::]:0", "example.org:6060"} {
		if _, _, err := servePprof(addr, hclog.NewNullLogger()); !errors.Is(err, errPprofNotLoopback) {
			t.Errorf("servePprof(%q) = %v, want a refusal", addr, err)
		}
	}
	srv, addr, err := servePprof("127.0.0.1:0", hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + addr.String() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Errorf("goroutine profile: %s\n%.200s", resp.Status, body)
	}
}

// TestRunTrace: run -trace writes the drain's execution trace, which
// `go tool trace` reads (its header names the Go release).
func TestRunTrace(t *testing.T) {
	p := newPostoffice(t, "")
	p.rewrite(fmt.Sprintf(`[[clause]]
select = "smtp/*"
command = [%q, "-c", "smtp"]
`, p.agent("sink")))
	p.enqueue(3, 2, 2)
	path := filepath.Join(p.dir, "run.trace")
	if out, err := p.scheduler("run", "-drain", "-trace", path).CombinedOutput(); err != nil {
		t.Fatalf("run -drain -trace: %v\n%s", err, tail(string(out), 20))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:min(len(b), 32)], []byte(" trace")) || len(b) < 1024 {
		t.Fatalf("trace file: %d bytes beginning %q, want a Go execution trace", len(b), b[:min(len(b), 32)])
	}
}

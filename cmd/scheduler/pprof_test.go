package main

import (
	"errors"
	"io"
	"net/http"
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

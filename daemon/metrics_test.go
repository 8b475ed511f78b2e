package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// guard bounds every wait in these tests; it is a failure guard, never the
// thing measured.
const guard = 20 * time.Second

// Issue 16.14: idle metrics connections exhausted the scheduler's
// descriptors. With maxConns connections open, one more is closed
// unanswered; once they close, scrapes are answered again.
func TestMetricsConnectionCap(t *testing.T) {
	e := startControlled(t, nil, `metrics_listen = "127.0.0.1:0"`, "[[clause]]\nselect = \"smtp/*\"\ncommand = \"/bin/false\"\n")
	addr := e.d.MetricsAddr()
	max := metricsLimits().maxConns
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	answered := 0
	const extra = 4
	for range extra {
		if get(t, addr, "/metrics") == nil {
			answered++
		}
	}
	if answered > 0 {
		t.Fatalf("%d of %d connections beyond %d idle ones were answered", answered, extra, max)
	}
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	e.waitFor("a scrape answered once the idle connections closed", func() bool { return get(t, addr, "/metrics") == nil })
}

// get asks for path on a connection of its own and returns nil if it was
// answered 200.
func get(t *testing.T, addr, path string) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(guard))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: zsched\r\nConnection: close\r\n\r\n", path); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// Issue 16.14: a client that keeps a connection idle, trickles a request
// body or never reads the answer is cut off, each by its own timeout
// (shortened here).
func TestMetricsTimeouts(t *testing.T) {
	lim := listenLimits{maxConns: 8, readHeader: 200 * time.Millisecond, read: 300 * time.Millisecond,
		write: 300 * time.Millisecond, idle: 200 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bodyErr, writeErr := make(chan error, 1), make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/body", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		bodyErr <- err
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
	})
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}})
	srv, _ := serveMetrics(ln, mux, log, lim)
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(guard))
		return c
	}

	t.Run("idle", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "GET /small HTTP/1.1\r\nHost: zsched\r\n\r\n")
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("kept-alive connection after its answer: %v, want the server to close it (EOF)", err)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "POST /body HTTP/1.1\r\nHost: zsched\r\nContent-Length: 1000000\r\n\r\nx")
		select {
		case err := <-bodyErr:
			if err == nil {
				t.Fatal("the body read ended without an error")
			}
		case <-time.After(guard):
			t.Fatal("a request body that never comes is still being read")
		}
	})
	t.Run("unread answer", func(t *testing.T) {
		c := dial()
		fmt.Fprint(c, "GET /big HTTP/1.1\r\nHost: zsched\r\n\r\n")
		select {
		case err := <-writeErr:
			if err == nil {
				t.Fatal("no write error")
			}
		case <-time.After(guard):
			t.Fatal("an answer the client never reads is still being written")
		}
	})
}

// Issue 16.14: the metrics listener survives EMFILE. net/http's Serve
// already treats it as temporary (it backs off and accepts again); this
// holds it to that with a real descriptor exhaustion, in a child process
// so that the lowered limit touches no other test.
func TestMetricsAcceptEMFILE(t *testing.T) {
	if os.Getenv("ZSCHED_TEST_EMFILE") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMetricsAcceptEMFILE$", "-test.v")
		cmd.Env = append(os.Environ(), "ZSCHED_TEST_EMFILE=1")
		out, err := cmd.CombinedOutput()
		t.Logf("child:\n%s", out)
		if err != nil || !strings.Contains(string(out), "--- PASS: TestMetricsAcceptEMFILE") {
			t.Fatalf("child: %v", err)
		}
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}})
	srv, cl := serveMetrics(ln, mux, log, metricsLimits())
	t.Cleanup(func() { srv.Close() })

	// The client's socket is made before the table is filled: with one
	// descriptor left for a dial, anything else in the process that
	// opens a file for a moment (the race detector's runtime does) can
	// take it first. connect(2) needs no descriptor of its own.
	sfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	client := os.NewFile(uintptr(sfd), "client")
	defer client.Close()
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := saved
	low.Cur = uint64(len(fds) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fill []*os.File
	release := func() {
		for _, f := range fill {
			f.Close()
		}
		fill = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved)
	}
	t.Cleanup(release)
	// fillUp takes every free descriptor, so the server's accept gets
	// EMFILE; it is run again while waiting, in case a descriptor taken
	// for a moment elsewhere came back.
	fillUp := func() {
		for {
			f, err := os.Open("/dev/null")
			if errors.Is(err, syscall.EMFILE) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fill = append(fill, f)
		}
	}
	fillUp()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := syscall.Connect(sfd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("connect with no descriptor left: %v", err)
	}
	deadline := time.Now().Add(guard)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for cl.acceptErrors.Load() < 2 { // a retry after a failed accept
		if time.Now().After(deadline) {
			t.Fatal("the listener's accept never failed")
		}
		<-tick.C
		fillUp()
	}
	release()
	c, err := net.FileConn(client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	release()
	c.SetDeadline(time.Now().Add(guard))
	fmt.Fprint(c, "GET /metrics HTTP/1.1\r\nHost: zsched\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("after EMFILE: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after EMFILE: %s", resp.Status)
	}
	t.Logf("answered after %d failed accepts", cl.acceptErrors.Load())
}

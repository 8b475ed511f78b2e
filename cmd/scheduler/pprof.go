package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hashicorp/go-hclog"
)

// servePprof serves the runtime profiles (net/http/pprof: CPU, heap,
// goroutines, mutexes, execution trace) of a live scheduler on addr, which
// must be a loopback address: profiles show the queue's file names and
// addresses, and the profile endpoints cost CPU on demand. It returns once
// the listener is open, with the server (run lets it live as long as the
// process).
func servePprof(addr string, log hclog.Logger) (*http.Server, net.Addr, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("run: -pprof %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, nil, fmt.Errorf("run: -pprof %q: %w", addr, errPprofNotLoopback)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("run: -pprof: %w", err)
	}
	// A mux of our own: importing net/http/pprof also registers on
	// http.DefaultServeMux, which nothing here serves.
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("pprof listening", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server stopped", "error", err)
		}
	}()
	return srv, ln.Addr(), nil
}

var errPprofNotLoopback = errors.New("not a loopback address (profiles are served on loopback only)")

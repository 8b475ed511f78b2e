// Command limited is a destination that accepts at most K concurrent
// sessions across all agent processes and refuses the rest at once, as a
// server with an active concurrency limiter does (Postfix's
// smtpd_client_connection_count_limit: 421 and disconnect). The experiment
// of SCHEDULER_README's "Impact of active server concurrency limiter" runs
// against it.
//
// Each job is one session. A job that finds a free session holds it while it
// delivers, sleeping the service delay per recipient, releases it, and
// reports ok3 for each recipient (releasing before the reports, as a server
// closes the connection before the client reports back). A job that finds
// none is refused: every recipient gets deferall, the site-failure word
// ZMailer's smtp uses for a 421 greeting.
//
// Sessions are K slot files in a directory shared by all agents of the
// destination, each taken with flock(LOCK_EX|LOCK_NB): the limit holds
// across processes, and a killed agent's slot is freed by the kernel.
//
//	limited -c channel -slots DIR [-k 5] [-kfile FILE] [-noise N] [-d 20ms] [-log FILE] [-refused FILE] [host]
//
// With -kfile, the limit is read from FILE (a decimal number, at most -k)
// at every job, so a test can raise or lower it mid-run by rewriting the
// file; a missing or unreadable file means -k. With -noise N, one session
// in N (at random) fails its handshake whatever the concurrency, as one
// bad server of N behind one address does: deferall for each recipient.
//
// With -log, each delivered recipient is appended to FILE as
// "inum/offset user" (one write each, O_APPEND), so tests can count
// deliveries and duplicates. With -refused, each refused recipient is
// appended to its FILE the same way, so the lab counts refusals and
// first attempts refused from the destination's side.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"zsched/report"
	"zsched/ta"
	"zsched/testagents"
)

func main() {
	fs := flag.NewFlagSet("limited", flag.ContinueOnError)
	dir := fs.String("slots", "", "directory of the destination's session slot files (required)")
	k := fs.Int("k", 5, "concurrent sessions the destination accepts")
	delay := fs.Duration("d", 20*time.Millisecond, "service time per recipient")
	logPath := fs.String("log", "", "append delivered recipients to this file")
	kfile := fs.String("kfile", "", "read the current limit (at most -k) from this file at every job")
	noise := fs.Int("noise", 0, "one session in this many fails its handshake (0 = none)")
	refusedPath := fs.String("refused", "", "append refused recipients to this file")
	a, err := ta.ParseFlags(fs, os.Args[1:], "")
	if err != nil {
		fail(err)
	}
	if *dir == "" || *k < 1 {
		fail(errors.New("-slots DIR and -k >= 1 are required"))
	}
	slots, err := openSlots(*dir, *k)
	if err != nil {
		fail(err)
	}
	sink := testagents.Sink{Delay: *delay}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		sink.Log = f
	}
	var refusedLog *os.File
	if *refusedPath != "" {
		refusedLog, err = os.OpenFile(*refusedPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fail(err)
		}
		defer refusedLog.Close()
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano() ^ int64(os.Getpid())))
	err = a.Serve(func(d *ta.Delivery) []ta.Result {
		refuse := func(text string) []ta.Result {
			res := make([]ta.Result, 0, len(d.Rcpts))
			if refusedLog != nil {
				var b strings.Builder
				for _, i := range d.Rcpts {
					fmt.Fprintf(&b, "%d/%d %s\n", d.File.Inum, d.Rcpt(i).Offset, d.Rcpt(i).User)
				}
				// One write: the lines of a job stay together. A failed
				// write loses a count, never mail.
				_, _ = refusedLog.WriteString(b.String())
			}
			for _, i := range d.Rcpts {
				res = append(res, ta.Result{Rcpt: i, Status: report.DeferAll, Text: text,
					Notary: report.Notary{Recipient: d.Rcpt(i).User, Action: "failed",
						Status: "4.7.0", Diagnostic: "smtp; " + text}})
			}
			return res
		}
		if *noise > 0 && rng.Intn(*noise) == 0 {
			return refuse("421 4.3.2 bad server behind the address")
		}
		n := limit(*kfile, *k)
		slot := take(slots[:n])
		if slot == nil {
			return refuse(fmt.Sprintf("421 4.7.0 too many concurrent sessions (limit %d)", n))
		}
		res := sink.Deliver(d)
		release(slot)
		return res
	})
	if err != nil {
		fail(err)
	}
}

// limit is the destination's current limit: from kfile when it holds a
// number from 1 to k, else k.
func limit(kfile string, k int) int {
	if kfile == "" {
		return k
	}
	b, err := os.ReadFile(kfile)
	if err != nil {
		return k
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 || n > k {
		return k
	}
	return n
}

// slot is one session of the destination: a slot file, open for the
// agent's life so that taking it is one flock call.
type slot struct {
	f    *os.File
	held bool // flock succeeds again on a descriptor that holds the lock
}

// openSlots opens (creating) the k slot files in dir.
func openSlots(dir string, k int) ([]*slot, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ss := make([]*slot, k)
	for i := range ss {
		f, err := os.OpenFile(filepath.Join(dir, "slot."+strconv.Itoa(i)), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		ss[i] = &slot{f: f}
	}
	return ss, nil
}

// take returns a slot it locked, or nil when every slot is held.
func take(slots []*slot) *slot {
	for _, s := range slots {
		if s.held {
			continue
		}
		for {
			err := syscall.Flock(int(s.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				s.held = true
				return s
			}
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
	}
	return nil
}

// release frees a slot. Unlocking a descriptor that holds a lock cannot
// fail short of a kernel fault, and the agent's exit frees it anyway.
func release(s *slot) {
	_ = syscall.Flock(int(s.f.Fd()), syscall.LOCK_UN)
	s.held = false
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "# limited: %v\n", err)
	os.Exit(1)
}

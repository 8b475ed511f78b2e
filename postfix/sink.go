package postfix

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sink is a running smtp-sink, Postfix's test server: it accepts mail and
// throws it away, or fails chosen commands (-Q cmd: 421 and disconnect,
// -r cmd: 4xx, -f cmd: 5xx), and dumps each transaction it accepts, with
// its MAIL and RCPT arguments, to a file in DumpDir.
type Sink struct {
	Addr    string
	Port    int
	DumpDir string

	cmd    *exec.Cmd
	exited chan struct{}
	stderr *bytes.Buffer
}

// SinkAvailable reports whether smtp-sink (the postfix package) is
// installed.
func SinkAvailable() error {
	if _, err := os.Stat(SmtpSinkPath); err != nil {
		return fmt.Errorf("%w: smtp-sink is not installed (%s)", ErrUnavailable, SmtpSinkPath)
	}
	return nil
}

// StartSink starts smtp-sink on 127.0.0.1:port (0 picks a free port) with
// extra flags, dumping into dir/dump. dir must be searchable by others
// (smtp-sink runs as nobody when started by root). With dir "" nothing is
// dumped: a sink for benchmarks, where writing a file per transaction
// would cost more than the SMTP.
func StartSink(dir string, port int, flags ...string) (*Sink, error) {
	if err := SinkAvailable(); err != nil {
		return nil, err
	}
	dump := ""
	if dir != "" {
		dir, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("postfix: %w", err)
		}
		dump = filepath.Join(dir, "dump")
		if err := os.MkdirAll(dump, 0o777); err != nil {
			return nil, fmt.Errorf("postfix: %w", err)
		}
		// Written by "nobody" when we are root.
		if err := os.Chmod(dump, 0o777); err != nil {
			return nil, fmt.Errorf("postfix: %w", err)
		}
		if os.Geteuid() == 0 {
			if err := searchable(dump); err != nil {
				return nil, err
			}
		}
	}
	fixed := port != 0
	for attempt := 0; ; attempt++ {
		if !fixed {
			var err error
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		s, err := startSink(dump, port, flags)
		if err == nil || fixed || attempt == 2 {
			return s, err
		}
	}
}

func startSink(dump string, port int, flags []string) (*Sink, error) {
	s := &Sink{Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), DumpDir: dump}
	args := []string{"-h", "sink.test"}
	if dump != "" {
		args = append(args, "-d", filepath.Join(dump, "%H%M%S."))
	}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "nobody")
	}
	args = append(args, flags...)
	args = append(args, s.Addr, "100")
	s.cmd = exec.Command(SmtpSinkPath, args...)
	s.stderr = &bytes.Buffer{}
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("postfix: start smtp-sink: %w", err)
	}
	s.exited = make(chan struct{})
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !listening(s.Addr) {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("postfix: smtp-sink exited: %s", s.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, errors.New("postfix: smtp-sink did not listen within 10s")
		}
	}
	return s, nil
}

// Stop kills smtp-sink and waits for it. It is safe to call twice.
func (s *Sink) Stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Transaction is one dumped mail transaction.
type Transaction struct {
	Mail    string   // the MAIL command's arguments
	Rcpts   []string // each RCPT command's arguments
	Message string   // header and body as received
}

// Pid is smtp-sink's process id.
func (s *Sink) Pid() int { return s.cmd.Process.Pid }

// Transactions reads every dumped transaction so far, oldest first.
func (s *Sink) Transactions() ([]Transaction, error) {
	if s.DumpDir == "" {
		return nil, errors.New("postfix: smtp-sink was started without a dump directory")
	}
	ents, err := os.ReadDir(s.DumpDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("postfix: %w", err)
	}
	type file struct {
		mod  time.Time
		name string
	}
	var files []file
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			files = append(files, file{fi.ModTime(), e.Name()})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mod.Before(files[j].mod) })
	var out []Transaction
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(s.DumpDir, f.name))
		if err != nil {
			return nil, fmt.Errorf("postfix: %w", err)
		}
		out = append(out, parseDump(string(data)))
	}
	return out, nil
}

// parseDump reads smtp-sink's dump format: its X- records, a three-line
// Received header, then the message.
func parseDump(d string) Transaction {
	var t Transaction
	lines := strings.SplitAfter(d, "\n")
	i := 0
	for ; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], "\r\n")
		if v, ok := strings.CutPrefix(l, "X-Mail-Args: "); ok {
			t.Mail = v
		} else if v, ok := strings.CutPrefix(l, "X-Rcpt-Args: "); ok {
			t.Rcpts = append(t.Rcpts, v)
		} else if strings.HasPrefix(l, "Received: ") {
			i += 3 // the Received header has two continuation lines
			break
		}
	}
	if i < len(lines) {
		t.Message = strings.Join(lines[i:], "")
	}
	return t
}

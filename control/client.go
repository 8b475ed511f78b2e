package control

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// ErrNotRunning is returned by Dial when nothing listens on the socket: the
// scheduler is not running (or runs on another postoffice).
var ErrNotRunning = errors.New("control: the scheduler is not running")

// ErrRefused is returned by Dial when the server refuses the client.
var ErrRefused = errors.New("control: access refused")

// Client is one control session.
type Client struct {
	conn      net.Conn
	r         *bufio.Reader
	timeout   time.Duration
	Challenge string // the server's "220 MAILQ-V2-CHALLENGE: …" line
}

// Dial connects to the scheduler's Unix control socket.
func Dial(path string, timeout time.Duration) (*Client, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, fmt.Errorf("%w (no listener on %s)", ErrNotRunning, path)
		}
		return nil, fmt.Errorf("control: %w", err)
	}
	return greet(c, timeout)
}

// DialTCP connects to a MAILQ v2 TCP listener and logs in.
func DialTCP(addr, user, password string, timeout time.Duration) (*Client, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (no listener on %s)", ErrNotRunning, addr)
		}
		return nil, fmt.Errorf("control: %w", err)
	}
	cl, err := greet(c, timeout)
	if err != nil {
		return nil, err
	}
	rep, err := cl.Do(VerbAuth + " " + user + " " + Authenticator(cl.Challenge, password))
	if err != nil {
		cl.Close()
		return nil, err
	}
	if !rep.OK {
		cl.Close()
		return nil, fmt.Errorf("%w: %s", ErrRefused, rep.Text)
	}
	return cl, nil
}

func greet(c net.Conn, timeout time.Duration) (*Client, error) {
	cl := &Client{conn: c, r: bufio.NewReader(c), timeout: timeout}
	c.SetDeadline(time.Now().Add(timeout))
	first, err := cl.line()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("control: greeting: %w", err)
	}
	if first != Greeting {
		c.Close()
		return nil, fmt.Errorf("control: unexpected greeting %q", first)
	}
	second, err := cl.line()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("control: greeting: %w", err)
	}
	switch {
	case strings.HasPrefix(second, "220 "):
		cl.Challenge = second
		return cl, nil
	case strings.HasPrefix(second, "550"):
		c.Close()
		return nil, fmt.Errorf("%w: %s", ErrRefused, second)
	}
	c.Close()
	return nil, fmt.Errorf("control: %s", strings.TrimPrefix(second, "-"))
}

func (cl *Client) line() (string, error) {
	s, err := cl.r.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && s == "" {
			return "", io.ErrUnexpectedEOF
		}
		return "", err
	}
	return strings.TrimRight(s, "\r\n"), nil
}

// Do sends one command and reads its reply. A "-" reply is a Reply with OK
// false, not an error; errors are about the connection.
func (cl *Client) Do(cmd string) (Reply, error) {
	cl.conn.SetDeadline(time.Now().Add(cl.timeout))
	if _, err := io.WriteString(cl.conn, cmd+"\n"); err != nil {
		return Reply{}, fmt.Errorf("control: %w", err)
	}
	head, err := cl.line()
	if err != nil {
		return Reply{}, fmt.Errorf("control: reply: %w", err)
	}
	switch {
	case head == multiHead:
		rep := Reply{OK: true, Multi: true}
		for {
			l, err := cl.line()
			if err != nil {
				return Reply{}, fmt.Errorf("control: listing: %w", err)
			}
			if l == "." {
				return rep, nil
			}
			rep.Lines = append(rep.Lines, strings.TrimPrefix(l, "."))
		}
	case strings.HasPrefix(head, "+"):
		return Reply{OK: true, Text: strings.TrimPrefix(head[1:], "OK ")}, nil
	case strings.HasPrefix(head, "-"):
		return Reply{Text: head[1:]}, nil
	}
	return Reply{}, fmt.Errorf("control: unexpected reply %q", head)
}

// Close ends the session with QUIT.
func (cl *Client) Close() error {
	cl.conn.SetDeadline(time.Now().Add(time.Second))
	io.WriteString(cl.conn, VerbQuit+"\n")
	return cl.conn.Close()
}

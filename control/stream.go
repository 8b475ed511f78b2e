package control

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Streamed listings (issue 17): a reply too large to build in memory —
// the whole spool, one message a line — is written as it is produced.
// The loop answers with Stream(f); the session's goroutine then runs f,
// which calls emit once per line (dot-stuffed and framed as a Listing)
// and may take as long as it needs, each write bounded by ReplyTimeout.
// emit returns false once the client is gone: f should stop then.

// Stream is a listing produced by f after the loop has answered.
func Stream(f func(emit func(line string) bool) error) Reply {
	return Reply{OK: true, Multi: true, stream: f}
}

// sendStream runs a streamed reply: the listing's head, f's lines, and the
// end line. An error from f ends the listing with a last line "!" and the
// error, which StreamDo reports.
func (ss *session) sendStream(f func(emit func(string) bool) error) bool {
	write := func(l string) bool {
		ss.c.SetWriteDeadline(time.Now().Add(ss.s.opt.ReplyTimeout))
		ss.w.WriteString(l)
		if err := ss.w.WriteByte('\n'); err != nil {
			return false
		}
		if ss.w.Buffered() > 32<<10 {
			return ss.w.Flush() == nil
		}
		return true
	}
	// A listing may outlast the session bound: it ends when f does.
	ss.c.SetDeadline(time.Time{})
	if !write(multiHead) {
		return false
	}
	alive := true
	emit := func(l string) bool {
		for _, part := range strings.Split(l, "\n") {
			if strings.HasPrefix(part, ".") || strings.HasPrefix(part, "!") {
				part = "." + part
			}
			if alive = alive && write(part); !alive {
				return false
			}
		}
		return true
	}
	err := f(emit)
	if !alive {
		return false
	}
	if err != nil {
		write("!" + strings.ReplaceAll(err.Error(), "\n", " "))
	}
	ss.c.SetWriteDeadline(time.Now().Add(ss.s.opt.ReplyTimeout))
	ok := write(".") && ss.w.Flush() == nil
	ss.c.SetDeadline(ss.end)
	return ok
}

// StreamDo sends one command whose reply is a listing and hands each of
// its lines to fn as it arrives, never holding the listing: for replies of
// any size. A "-" reply is returned as a Reply with OK false; a listing
// that ends in an error line ("!" from Stream) is an error.
func (cl *Client) StreamDo(cmd string, fn func(line string) error) (Reply, error) {
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
		for {
			cl.conn.SetDeadline(time.Now().Add(cl.timeout))
			l, err := cl.line()
			if err != nil {
				return Reply{}, fmt.Errorf("control: listing: %w", err)
			}
			switch {
			case l == ".":
				return Reply{OK: true, Multi: true}, nil
			case strings.HasPrefix(l, "!"):
				// The end line follows.
				cl.line()
				return Reply{}, fmt.Errorf("control: %s", l[1:])
			}
			if err := fn(strings.TrimPrefix(l, ".")); err != nil {
				return Reply{}, err
			}
		}
	case strings.HasPrefix(head, "+"):
		return Reply{OK: true, Text: strings.TrimPrefix(head[1:], "OK ")}, nil
	case strings.HasPrefix(head, "-"):
		return Reply{Text: head[1:]}, nil
	}
	return Reply{}, fmt.Errorf("control: unexpected reply %q", head)
}

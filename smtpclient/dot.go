package smtpclient

import "bufio"

// dotWriter writes a message as the DATA command's content: a '.' at the
// start of a line doubled, every LF not after a CR preceded by one, and
// Close ends it with ".\r\n" (after a CRLF if the message lacks a final
// newline). Its output is net/textproto's DotWriter's, byte for byte (the
// tests compare them), but it copies the runs of plain bytes between the
// ones it must act on in one call rather than a byte at a time: a message
// of some kilobytes is a few calls, not thousands.
type dotWriter struct {
	w     *bufio.Writer
	state uint8
}

// The states of net/textproto's dotWriter.
const (
	dotBegin     = iota // nothing written yet
	dotBeginLine        // after a line's LF
	dotCR               // after a CR
	dotData             // within a line
)

func (d *dotWriter) Write(b []byte) (int, error) {
	start := 0 // b[start:i] is still to be copied
	for i, c := range b {
		switch d.state {
		case dotBegin, dotBeginLine:
			d.state = dotData
			if c == '.' {
				d.w.Write(b[start:i])
				d.w.WriteByte('.')
				start = i
			}
			fallthrough
		case dotData:
			switch c {
			case '\r':
				d.state = dotCR
			case '\n':
				d.w.Write(b[start:i])
				d.w.WriteByte('\r')
				start = i
				d.state = dotBeginLine
			}
		case dotCR:
			d.state = dotData
			if c == '\n' {
				d.state = dotBeginLine
			}
		}
	}
	if _, err := d.w.Write(b[start:]); err != nil {
		// bufio's error is sticky: the earlier writes failed too.
		return 0, err
	}
	return len(b), nil
}

// Close ends the content with ".\r\n" and flushes.
func (d *dotWriter) Close() error {
	switch d.state {
	case dotBegin, dotData:
		d.w.WriteString("\r\n.\r\n")
	case dotCR:
		d.w.WriteString("\n.\r\n")
	case dotBeginLine:
		d.w.WriteString(".\r\n")
	}
	return d.w.Flush()
}

package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// FeedbackKind says how a feedback amount depends on the destination's concurrency.
type FeedbackKind uint8

const (
	FeedbackInverse     FeedbackKind = iota // Value/N: Postfix's "1/concurrency"
	FeedbackInverseSqrt                     // Value/sqrt(N): "1/sqrt_concurrency"
	FeedbackFixed                           // Value, whatever N
)

func (k FeedbackKind) String() string {
	switch k {
	case FeedbackInverse:
		return "inverse"
	case FeedbackInverseSqrt:
		return "inverse_sqrt"
	case FeedbackFixed:
		return "fixed"
	}
	return "FeedbackKind(" + strconv.Itoa(int(k)) + ")"
}

// Feedback is Postfix's per-delivery concurrency feedback g(N) or f(N). In TOML:
// "1/concurrency", "1/sqrt_concurrency", a number in (0,1] (also as a fraction
// "1/8"), or Postfix's general "x/concurrency" and "x/sqrt_concurrency".
type Feedback struct {
	Kind  FeedbackKind
	Value float64 // in (0,1]; 1 for the two named forms
}

// Of returns the feedback amount at the given concurrency. A concurrency below 1
// is treated as 1, so the amount never exceeds Value or becomes infinite.
func (f Feedback) Of(concurrency float64) float64 {
	if concurrency < 1 {
		concurrency = 1
	}
	switch f.Kind {
	case FeedbackInverse:
		return f.Value / concurrency
	case FeedbackInverseSqrt:
		return f.Value / math.Sqrt(concurrency)
	}
	return f.Value
}

// ParseFeedback parses the TOML text form of a Feedback.
func ParseFeedback(s string) (Feedback, error) {
	t := strings.TrimSpace(s)
	num, den, hasSlash := strings.Cut(t, "/")
	num, den = strings.TrimSpace(num), strings.TrimSpace(den)
	f := Feedback{Kind: FeedbackFixed}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return Feedback{}, fmt.Errorf("config: feedback %q: want \"1/concurrency\", \"1/sqrt_concurrency\" or a number in (0,1]", s)
	}
	if hasSlash {
		switch den {
		case "concurrency":
			f.Kind = FeedbackInverse
		case "sqrt_concurrency":
			f.Kind = FeedbackInverseSqrt
		default:
			d, err := strconv.ParseFloat(den, 64)
			if err != nil || d == 0 {
				return Feedback{}, fmt.Errorf("config: feedback %q: want \"1/concurrency\", \"1/sqrt_concurrency\" or a number in (0,1]", s)
			}
			v /= d
		}
	}
	f.Value = v
	if err := f.check(); err != nil {
		return Feedback{}, fmt.Errorf("config: feedback %q: %w", s, err)
	}
	return f, nil
}

func (f Feedback) check() error {
	if math.IsNaN(f.Value) || f.Value <= 0 || f.Value > 1 {
		return fmt.Errorf("amount %g must be in (0,1]", f.Value)
	}
	return nil
}

func (f Feedback) String() string {
	v := strconv.FormatFloat(f.Value, 'g', -1, 64)
	switch f.Kind {
	case FeedbackInverse:
		return v + "/concurrency"
	case FeedbackInverseSqrt:
		return v + "/sqrt_concurrency"
	}
	return v
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (f *Feedback) UnmarshalText(b []byte) error {
	v, err := ParseFeedback(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (f Feedback) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// Order is a ring's feed order: which job a hungry agent is given next.
type Order uint8

const (
	OrderPreemptive Order = iota // Postfix's delivery-slot preemption (DESIGN §7)
	OrderFIFO                    // arrival order
	OrderRandom                  // ZMailer's default shuffle
	OrderAge                     // oldest message first: ZMailer's ageorder
)

var orderNames = [...]string{"preemptive", "fifo", "random", "age"}

func (o Order) String() string {
	if int(o) < len(orderNames) {
		return orderNames[o]
	}
	return "Order(" + strconv.Itoa(int(o)) + ")"
}

// ParseOrder parses "preemptive", "fifo", "random" or "age".
func ParseOrder(s string) (Order, error) {
	for i, n := range orderNames {
		if s == n {
			return Order(i), nil
		}
	}
	return 0, fmt.Errorf("config: order %q: want one of %s", s, strings.Join(orderNames[:], ", "))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (o *Order) UnmarshalText(b []byte) error {
	v, err := ParseOrder(string(b))
	if err != nil {
		return err
	}
	*o = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (o Order) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Stdio is how an agent's standard descriptors are connected to the scheduler.
type Stdio uint8

const (
	StdioSocketpair Stdio = iota // fds 0, 1 and 2 one socket, as ZMailer
	StdioPipes                   // stdin and stdout pipes, stderr separate and logged
	StdioPTY                     // a pseudo-terminal, for agents that only line-buffer on a tty
)

var stdioNames = [...]string{"socketpair", "pipes", "pty"}

func (s Stdio) String() string {
	if int(s) < len(stdioNames) {
		return stdioNames[s]
	}
	return "Stdio(" + strconv.Itoa(int(s)) + ")"
}

// ParseStdio parses "socketpair", "pipes" or "pty".
func ParseStdio(s string) (Stdio, error) {
	for i, n := range stdioNames {
		if s == n {
			return Stdio(i), nil
		}
	}
	return 0, fmt.Errorf("config: stdio %q: want one of %s", s, strings.Join(stdioNames[:], ", "))
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Stdio) UnmarshalText(b []byte) error {
	v, err := ParseStdio(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText implements encoding.TextMarshaler.
func (s Stdio) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// The values of a clause's feed key (Clause.Feed).
const (
	FeedThread  = "thread"  // an agent is fed from its own thread (ZMailer)
	FeedMessage = "message" // a message's vertices in the ring one after another (Postfix's peers)
)

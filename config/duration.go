package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a non-negative span of time as written in scheduler.toml: a Go
// duration that may also use 'd' for 24-hour days ("1h30m", "5d", "2d12h"), or a
// bare integer of seconds (ZMailer's form). Components are summed; ZMailer kept
// only the first one (quirk Q1).
type Duration time.Duration

// ErrDuration is wrapped by every duration syntax error.
var ErrDuration = errors.New("config: invalid duration")

const day = 24 * time.Hour

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ParseDuration parses the scheduler.toml duration syntax.
func ParseDuration(s string) (Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty", ErrDuration)
	}
	if isDigits(s) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > math.MaxInt64/int64(time.Second) {
			return 0, fmt.Errorf("%w: %q overflows", ErrDuration, s)
		}
		return Duration(time.Duration(n) * time.Second), nil
	}
	var total time.Duration
	rest := s
	for rest != "" {
		num := leadingNumber(rest)
		if num == "" {
			return 0, fmt.Errorf("%w: %q: expected a number at %q", ErrDuration, s, rest)
		}
		rest = rest[len(num):]
		unit := leadingUnit(rest)
		if unit == "" {
			return 0, fmt.Errorf("%w: %q: missing unit after %s (use ns, us, ms, s, m, h or d)", ErrDuration, s, num)
		}
		rest = rest[len(unit):]
		var part time.Duration
		if unit == "d" {
			// time.ParseDuration does the fractions and overflow checks in
			// hours; days only scale the result.
			h, err := time.ParseDuration(num + "h")
			if err != nil || h > math.MaxInt64/24 {
				return 0, fmt.Errorf("%w: %q overflows", ErrDuration, s)
			}
			part = h * 24
		} else {
			p, err := time.ParseDuration(num + unit)
			if err != nil {
				return 0, fmt.Errorf("%w: %q: unknown unit %q (use ns, us, ms, s, m, h or d)", ErrDuration, s, unit)
			}
			part = p
		}
		if total > math.MaxInt64-part {
			return 0, fmt.Errorf("%w: %q overflows", ErrDuration, s)
		}
		total += part
	}
	return Duration(total), nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// leadingNumber returns the digits and optional fraction at the start of s.
func leadingNumber(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i+1 && i == 0 {
			return ""
		}
		i = j
	}
	return s[:i]
}

// leadingUnit returns the unit letters at the start of s ("µ" included).
func leadingUnit(s string) string {
	for i, r := range s {
		if r != 'µ' && r != 'μ' && (r < 'a' || r > 'z') {
			return s[:i]
		}
	}
	return s
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText implements encoding.TextMarshaler; the text parses back to d.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// String formats d with days, hours, minutes and seconds ("2d12h", "1h30m", "0s").
func (d Duration) String() string {
	t := time.Duration(d)
	if t < 0 {
		return t.String()
	}
	if t == 0 {
		return "0s"
	}
	var b strings.Builder
	if n := t / day; n > 0 {
		fmt.Fprintf(&b, "%dd", n)
		t %= day
	}
	if n := t / time.Hour; n > 0 {
		fmt.Fprintf(&b, "%dh", n)
		t %= time.Hour
	}
	if n := t / time.Minute; n > 0 {
		fmt.Fprintf(&b, "%dm", n)
		t %= time.Minute
	}
	if t > 0 {
		b.WriteString(t.String())
	}
	return b.String()
}

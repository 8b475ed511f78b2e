package config

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"1h30m", 90 * time.Minute}, // ZMailer read this as 1h (Q1)
		{"1m30s", 90 * time.Second},
		{"5d", 5 * 24 * time.Hour},
		{"2d12h", 60 * time.Hour},
		{"1d1d", 48 * time.Hour},
		{"1.5d", 36 * time.Hour},
		{"90", 90 * time.Second},
		{"0", 0},
		{"0s", 0},
		{"250ms", 250 * time.Millisecond},
		{"1h5m20s", time.Hour + 5*time.Minute + 20*time.Second},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil {
			t.Errorf("ParseDuration(%q): %v", tt.in, err)
			continue
		}
		if got.D() != tt.want {
			t.Errorf("ParseDuration(%q) = %v, want %v", tt.in, got.D(), tt.want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	for _, in := range []string{"", "1x", "d", "h1", "-5m", "+5m", "1h 30m", "5 d", "1.2.3s",
		"99999999999999999999", "300000d", "106751d23h47m16s854775808ns", "."} {
		if d, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
		} else if !errors.Is(err, ErrDuration) {
			t.Errorf("ParseDuration(%q): %v does not wrap ErrDuration", in, err)
		}
	}
}

// The text form must parse back to the same value, so MarshalText output (in a
// dumped effective config) can be fed back in.
func TestDurationRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []Duration{0, 1, Duration(time.Second), Duration(day), Duration(day + time.Nanosecond)}
	for range 2000 {
		cases = append(cases, Duration(r.Int64N(int64(400*day))))
	}
	for _, d := range cases {
		text, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := back.UnmarshalText(text); err != nil {
			t.Fatalf("%d formats as %q, which does not parse: %v", d, text, err)
		}
		if back != d {
			t.Fatalf("%d formats as %q, which parses as %d", d, text, back)
		}
	}
	if got := Duration(60 * time.Hour).String(); got != "2d12h" {
		t.Errorf("String(60h) = %q, want 2d12h", got)
	}
}

package admission

import (
	"testing"
	"time"
)

func TestStartupEnds(t *testing.T) {
	for _, c := range []struct {
		name       string
		at         time.Duration
		read, full bool
		want       string
	}{
		{"under way", StartupMax - time.Millisecond, false, false, ""},
		{"first pass in core", time.Second, true, false, "queue read"},
		{"core full", time.Second, false, true, "core full"},
		{"read and full", time.Second, true, true, "queue read"},
		{"time limit", StartupMax, false, false, "time limit"},
	} {
		s := NewStartup(2)
		s.Begin(t0)
		s.Begin(t0.Add(time.Hour)) // only the first pass counts
		if !s.On() || s.RingCap() != 2 || !s.Wake().Equal(t0.Add(StartupMax)) {
			t.Fatalf("%s: on %v, cap %d, wake %v", c.name, s.On(), s.RingCap(), s.Wake())
		}
		if got := s.Check(t0.Add(c.at), c.read, c.full); got != c.want {
			t.Errorf("%s: ended %q, want %q", c.name, got, c.want)
		}
		if c.want != "" && (s.On() || s.RingCap() != 0 || !s.Wake().IsZero() || s.Check(t0.Add(time.Hour), true, true) != "") {
			t.Errorf("%s: not over once ended", c.name)
		}
	}
	off := NewStartup(0)
	off.Begin(t0)
	if off.On() || off.RingCap() != 0 || off.Check(t0.Add(time.Hour), true, true) != "" {
		t.Error("startup_maxring 0 runs a startup read")
	}
}

package admission

import (
	"strings"
	"testing"
)

// TestOverlong: RFC 5321's limits on hosts and addresses.
func TestOverlong(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct {
		host, user string
		status     string
	}{
		{"a.test", "u@a.test", ""},
		{long(255), "u@" + long(180), ""},
		{long(256), "u@a.test", "5.1.2"},
		{"a.test", long(64) + "@a.test", ""},
		{"a.test", long(65) + "@a.test", "5.1.3"},
		{"a.test", long(257), "5.1.3"},
		{"a.test", "u@" + long(254), ""},
		{"localhost", "|/usr/bin/procmail -a " + long(100), ""}, // no @: only the path limit
	} {
		status, why := Overlong(c.host, c.user)
		if !strings.HasPrefix(status, c.status) || (c.status == "") != (status == "") {
			t.Errorf("Overlong(%d-octet host, %d-octet user) = %q %q, want %q", len(c.host), len(c.user), status, why, c.status)
		}
	}
}

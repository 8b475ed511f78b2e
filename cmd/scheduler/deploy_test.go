package main

import (
	"os"
	"strings"
	"testing"
)

// The shipped unit runs the scheduler as systemd's Type=notify service it
// is, reloads through `scheduler reload` (so a refused configuration fails
// `systemctl reload`), and says why for each hardening setting a mail
// system must think about.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("../../deploy/zsched.service")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	set := map[string]string{}
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			set[k] = v
		}
	}
	for k, want := range map[string]string{
		"Type":       "notify",
		"ExecReload": "/usr/local/bin/zsched reload -config /etc/zsched/scheduler.toml",
		"ExecStart":  "/usr/local/bin/zsched run -config /etc/zsched/scheduler.toml",
		"KillMode":   "mixed",
	} {
		if set[k] != want {
			t.Errorf("%s=%q, want %q", k, set[k], want)
		}
	}
	// The settings that break mail delivery are off, each with its reason.
	for _, k := range []string{"ProtectHome", "NoNewPrivileges"} {
		if v, on := set[k]; on {
			t.Errorf("%s=%s is set: it breaks local delivery or setuid helpers", k, v)
		}
		if !strings.Contains(string(b), "#"+k+"=") || !strings.Contains(string(b), "# "+k+"=") {
			t.Errorf("%s is not documented next to its commented-out line", k)
		}
	}
	// Every hardening line is in a group of settings under a comment.
	for i, l := range lines {
		for _, k := range []string{"ProtectSystem", "PrivateTmp", "ProtectKernel", "ProtectControlGroups", "RestrictAddressFamilies", "ReadWritePaths"} {
			if !strings.HasPrefix(l, k) {
				continue
			}
			j := i - 1
			for j >= 0 && strings.Contains(lines[j], "=") && !strings.HasPrefix(lines[j], "#") {
				j--
			}
			if j < 0 || !strings.HasPrefix(lines[j], "#") {
				t.Errorf("line %d %q has no comment saying why", i+1, l)
			}
		}
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
)

// ta-check's exit status is what CI keys on: 0 when the agent conforms, 1
// when a case fails (with its transcript printed), 2 for a usage error.
func TestTACheckCommand(t *testing.T) {
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		want   []string // substrings of stdout
	}{
		{"conforming", []string{"-stdio", "socketpair", "-case", "first-hungry,report-keys", "--", binaries.agents["sink"], "-c", "$channel"},
			0, []string{"PASS  socketpair  first-hungry", "PASS  socketpair  report-keys", "2 passed, 0 failed, 0 skipped"}},
		{"failing", []string{"-stdio", "pipes", "-case", "report-keys", "--", binaries.agents["garbage"], "-c", "$channel"},
			1, []string{"FAIL  pipes       report-keys", "TA> garbage without any tab", "0 passed, 1 failed"}},
		{"transcript", []string{"-stdio", "pty", "-case", "first-hungry", "-transcript", "--", binaries.agents["sink"], "-c", "$channel"},
			0, []string{"TA> #hungry", "S>  \\n", "exit status 0"}},
		{"list", []string{"-list"}, 0, []string{"partial-line"}},
		{"no agent", nil, 2, nil},
		{"bad mode", []string{"-stdio", "tty", "--", binaries.agents["sink"]}, 2, nil},
		{"unknown case", []string{"-case", "nope", "--", binaries.agents["sink"]}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			got := run(append([]string{"ta-check"}, tc.args...), nil, &out, &errb)
			if got != tc.status {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", got, tc.status, out.String(), errb.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

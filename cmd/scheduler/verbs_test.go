package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"zsched/control"
)

// Every control verb that names the scheduler command sending it names a
// real operator command, listed by `scheduler help`, with the flag that
// chooses the verb in that command's help; and every operator command
// sends some verb.
func TestEveryVerbHasItsCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"help"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("help: exit %d: %s", code, errOut.String())
	}
	_, operators, ok := strings.Cut(out.String(), "\noperator commands")
	if !ok {
		t.Fatalf("help lists no operator commands:\n%s", out.String())
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  (\S+) `).FindAllStringSubmatch(operators, -1) {
		listed[m[1]] = true
	}
	sent := map[string]bool{}
	for _, v := range control.Verbs {
		if v.Command == "" {
			continue
		}
		words := strings.Fields(v.Command)
		sent[words[0]] = true
		if !listed[words[0]] {
			t.Errorf("%s: command %q is not an operator command in `scheduler help`", v.Name, words[0])
			continue
		}
		var usage bytes.Buffer
		if code := run([]string{"help", words[0]}, nil, &usage, &usage); code != 0 {
			t.Errorf("help %s: exit %d: %s", words[0], code, usage.String())
			continue
		}
		for _, w := range words[1:] {
			if strings.HasPrefix(w, "-") && !regexp.MustCompile(`(?m)^  `+regexp.QuoteMeta(w)+`\b`).MatchString(usage.String()) {
				t.Errorf("%s: %s has no flag %s", v.Name, words[0], w)
			}
		}
	}
	for name := range listed {
		if !sent[name] {
			t.Errorf("operator command %s is the Command of no control verb", name)
		}
	}
}

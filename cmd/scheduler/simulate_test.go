package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeConfigs writes two configurations for simulate: the defaults, and
// Postfix's policy (no learned ceiling).
func writeConfigs(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "defaults.toml"), filepath.Join(dir, "postfix-like.toml")
	base := "[scheduler]\npostoffice = \"po\"\n\n[defaults]\nexpiry = \"2h\"\nexpiry2 = \"10m\"\n\n[[clause]]\nselect = \"smtp/*\"\ncommand = \"smtp\"\n"
	if err := os.WriteFile(a, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(base+"learned_ceiling = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestSimulateCommand runs `scheduler simulate` on a real daemon log and on
// a real Postfix maillog (the trace package's samples) with two
// configurations: one column each beside the trace's, the model with
// -model, one JSON document with -json, progress and counts on stderr.
func TestSimulateCommand(t *testing.T) {
	a, b := writeConfigs(t)
	for _, c := range []struct{ trace, format, dest string }{
		{"../../trace/testdata/zsched-text.log", "zsched", "smtp/limited.test"},
		{"../../trace/testdata/zsched-json.log", "auto", "smtp/limited.test"},
		{"../../trace/testdata/postfix-3.7.maillog", "postfix", "smtp/limited.test"},
	} {
		var stdout, stderr strings.Builder
		code := run([]string{"simulate", "-trace", c.trace, "-format", c.format, "-config", a, "-config", b,
			"-model", "-check", "1", "-year", "2026"}, nil, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", c.trace, code, stderr.String())
		}
		out := stdout.String()
		for _, want := range []string{"destination model", "trace  defaults.toml  postfix-like.toml", "first-pass deferred %",
			"delay p95", "peak agents", c.dest + " window peak/avg"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in\n%s", c.trace, want, out)
			}
		}
		if !strings.Contains(stderr.String(), "0 malformed lines skipped") || !strings.Contains(stderr.String(), "core checks") {
			t.Errorf("%s: stderr\n%s", c.trace, stderr.String())
		}
	}

	var stdout, stderr strings.Builder
	if code := run([]string{"simulate", "-trace", "../../trace/testdata/postfix-3.7.maillog", "-config", a, "-json", "-model",
		"-until", "end"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("-json: exit %d\n%s", code, stderr.String())
	}
	var doc struct {
		Trace struct {
			Format     string `json:"format"`
			Recipients int    `json:"recipients"`
		} `json:"trace"`
		Model   []struct{ Name string } `json:"model"`
		Results []struct {
			Name       string  `json:"name"`
			Recipients int     `json:"recipients"`
			Deferred   float64 `json:"first_deferred_pct"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &doc); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if doc.Trace.Format != "postfix" || len(doc.Results) != 2 || doc.Results[0].Name != "trace" ||
		doc.Results[1].Recipients != doc.Trace.Recipients || len(doc.Model) == 0 {
		t.Errorf("JSON %+v", doc)
	}
}

func TestSimulateCommandErrors(t *testing.T) {
	a, _ := writeConfigs(t)
	empty := filepath.Join(t.TempDir(), "empty.log")
	if err := os.WriteFile(empty, []byte("nothing here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "-config", a}, "-trace FILE is required"},
		{[]string{"simulate", "-trace", empty, "-config", a}, "the trace holds no outcome"},
		{[]string{"simulate", "-trace", empty, "-config", a, "-format", "exim"}, `unknown format "exim"`},
		{[]string{"simulate", "-trace", empty, "-config", filepath.Join(t.TempDir(), "missing.toml")}, "missing.toml"},
		{[]string{"simulate", "-trace", "../../trace/testdata/zsched-text.log", "-config", a, "-until", "soon"}, "-until"},
	} {
		var stdout, stderr strings.Builder
		if code := run(c.args, nil, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", c.args, code, stderr.String(), c.want)
		}
	}
}

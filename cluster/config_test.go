package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func table(t *testing.T, src string) map[string]any {
	t.Helper()
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		t.Fatal(err)
	}
	m, _ := raw["cluster"].(map[string]any)
	return m
}

func TestFromTableDefaults(t *testing.T) {
	c, err := FromTable(table(t, "[cluster]\nredis = \"redis://127.0.0.1:6379/0\"\n"), "/etc/zsched")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if c.Node != host || c.Lease != 30*time.Second || c.Prefix != "zsched:" || c.PasswordFile != "" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestFromTableEveryKey(t *testing.T) {
	c, err := FromTable(table(t, `[cluster]
redis = "rediss://user@redis.example:6380/2"
password_file = "redis.secret"
node = "mx1"
lease = "1m30s"
prefix = "mail:"
`), "/etc/zsched")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Redis: "rediss://user@redis.example:6380/2", PasswordFile: "/etc/zsched/redis.secret", Node: "mx1",
		Lease: 90 * time.Second, Prefix: "mail:"}
	if c != want {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	c, err = FromTable(table(t, "[cluster]\nredis = \"redis://h:1\"\nlease = 45\n"), "")
	if err != nil || c.Lease != 45*time.Second {
		t.Fatalf("lease as seconds: %+v, %v", c, err)
	}
}

// TestFromTableErrorsNameTheKey: every mistake is reported against its
// key (config/ adds the line), all of them at once, none leaking a
// password.
func TestFromTableErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		src  string
		keys []string
		msg  string
	}{
		{"[cluster]\nnode = \"a\"\n", []string{"redis"}, "required"},
		{"[cluster]\nredis = \"http://h:1\"\n", []string{"redis"}, "scheme"},
		{"[cluster]\nredis = \"redis://u:pw@h:1\"\npassword_file = \"/x\"\n", []string{"password_file"}, "one or the other"},
		{"[cluster]\nredis = \"redis://h:1\"\nnode = \"a b\"\n", []string{"node"}, "white space"},
		{"[cluster]\nredis = \"redis://h:1\"\nlease = \"1s\"\n", []string{"lease"}, "at least 3s"},
		{"[cluster]\nredis = \"redis://h:1\"\nlease = \"soon\"\n", []string{"lease"}, "invalid duration"},
		{"[cluster]\nredis = 6379\nleases = \"30s\"\n", []string{"leases", "redis"}, "unknown key"},
		{"[cluster]\nredis = \"redis://h:1\"\nprefix = \"a{b}\"\n", []string{"prefix"}, "braces"},
		{"[cluster]\nredis = \"redis://u:hunter2@h:1\"\nnode = \"\"\n", []string{"node"}, "empty"},
	} {
		_, err := FromTable(table(t, tc.src), "")
		if err == nil {
			t.Errorf("%q: no error", tc.src)
			continue
		}
		var keys []string
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var ke *KeyError
			if !errors.As(e, &ke) {
				t.Errorf("%q: %v is not a *KeyError", tc.src, e)
				continue
			}
			keys = append(keys, ke.Key)
		}
		if strings.Join(keys, ",") != strings.Join(tc.keys, ",") || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: keys %v, error %q; want keys %v and %q", tc.src, keys, err, tc.keys, tc.msg)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the password is in the error: %v", tc.src, err)
		}
	}
}

func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	os.WriteFile(p, []byte("  s3cret \n"), 0o600)
	c := Config{PasswordFile: p}
	if pw, err := c.Password(); err != nil || pw != "s3cret" {
		t.Fatalf("%q, %v", pw, err)
	}
	os.WriteFile(p, []byte("\n"), 0o600)
	if _, err := c.Password(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
	c.PasswordFile = filepath.Join(dir, "missing")
	if _, err := c.Password(); err == nil || !strings.Contains(err.Error(), "password_file") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestRedactedAndStatus(t *testing.T) {
	c := Config{Redis: "redis://u:hunter2@h:1/0"}
	if r := c.Redacted(); strings.Contains(r, "hunter2") {
		t.Fatalf("redacted %q", r)
	}
	since := time.Date(2026, 1, 2, 12, 0, 1, 0, time.UTC)
	if s := (Status{Node: "mx1", Mode: Fallback, Since: since, Err: "dial tcp: refused"}).String(); s != "cluster: fallback since 12:00:01 (node mx1): dial tcp: refused" {
		t.Fatalf("fallback status %q", s)
	}
	if s := (Status{Node: "mx1", Mode: Shared, Nodes: 3}).String(); s != "cluster: shared (node mx1, 3 nodes)" {
		t.Fatalf("shared status %q", s)
	}
}

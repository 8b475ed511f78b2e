package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"zsched/internal/need"
)

// TestAgentEnvironmentAndCredentials: an agent gets only its command's
// VAR= words, PATH and TZ (nothing else of the scheduler's environment),
// and, when the scheduler runs as root, the clause's user and group.
func TestAgentEnvironmentAndCredentials(t *testing.T) {
	p := newPostoffice(t, "")
	out := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(out, 0o777)
	report := filepath.Join(out, "agent-env")
	creds, wantID := "", fmt.Sprintf("%d %d", os.Geteuid(), os.Getegid())
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		need.Met(t, "a user nobody to run an agent as", err)
		creds = "user = \"nobody\"\n"
		// nobody must reach postoffice/transport, its working directory.
		for _, d := range []string{filepath.Dir(p.dir), p.dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		wantID = u.Uid + " " + u.Gid
	}
	// /bin/sh is the program here, named in the command: zsched itself never
	// runs a shell. sh adds PWD, SHLVL and _ of its own.
	p.rewrite(fmt.Sprintf(`[[clause]]
select = "smtp/*"
command = ["ZVAR=one", "ZOTHER=two words", "/bin/sh", "-c", "{ echo $(id -u) $(id -g); env; } > %s.tmp && mv %s.tmp %s; exec %s -c smtp"]
%s`, report, report, report, p.agent("sink"), creds))
	p.enqueue(1, 1, 1)
	cmd := p.scheduler("run")
	cmd.Env = append(cmd.Env, "ZSCHED_SECRET=must-not-leak", "TZ=UTC")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var b []byte
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		if b, err = os.ReadFile(report); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent never ran\n%s", tail(stderr.String(), 20))
		}
		<-time.After(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != wantID {
		t.Errorf("agent ran as uid/gid %q, want %q", lines[0], wantID)
	}
	var names []string
	env := map[string]string{}
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "PWD", "SHLVL", "_", "OLDPWD":
			continue // the shell's own
		}
		names = append(names, k)
		env[k] = v
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "PATH TZ ZOTHER ZVAR" {
		t.Fatalf("agent environment has %s, want PATH TZ ZOTHER ZVAR", got)
	}
	if env["ZVAR"] != "one" || env["ZOTHER"] != "two words" || env["TZ"] != "UTC" || env["PATH"] != os.Getenv("PATH") {
		t.Fatalf("agent environment %v", env)
	}
}

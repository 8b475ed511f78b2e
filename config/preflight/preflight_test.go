package preflight

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"zsched/config"
	"zsched/internal/need"
)

// site is a good postoffice and agent program, which each case breaks in
// one way.
type site struct {
	dir, po, prog string
}

func newSite(t *testing.T) *site {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o755) // agent users must reach the postoffice
	s := &site{dir: dir, po: filepath.Join(dir, "po"), prog: filepath.Join(dir, "bin", "agent")}
	for _, d := range []string{"queue", "transport"} {
		if err := os.MkdirAll(filepath.Join(s.po, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Dir(s.prog), 0o755)
	if err := os.WriteFile(s.prog, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *site) config(t *testing.T, scheduler, clause string) *config.Config {
	t.Helper()
	command := fmt.Sprintf("command = [%q, \"-c\", \"smtp\"]", s.prog)
	if strings.HasPrefix(clause, "command") {
		command = ""
	}
	text := fmt.Sprintf("[scheduler]\npostoffice = %q\n%s\n\n[[clause]]\nselect = \"smtp/*\"\n%s\n%s\n",
		s.po, scheduler, command, clause)
	path := filepath.Join(s.dir, "scheduler.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("the case's configuration does not parse: %v", err)
	}
	return c
}

// checkCases are the broken configurations `scheduler check` catches on
// the host, with the message each gets (the README shows this table).
var checkCases = []struct {
	name       string
	root       bool                    // needs root (another user's view of modes)
	scheduler  string                  // [scheduler] lines
	clause     string                  // clause lines
	breakIt    func(*testing.T, *site) // after the config is written
	want, warn string                  // a substring of the error, or of the warning
}{
	{name: "missing agent program", breakIt: func(t *testing.T, s *site) { os.Remove(s.prog) },
		want: "clause.command: smtp/*: program %PROG does not exist"},
	{name: "agent program not executable", breakIt: func(t *testing.T, s *site) { os.Chmod(s.prog, 0o644) },
		want: "program %PROG is not executable (mode 0644)"},
	{name: "agent program is a directory", breakIt: func(t *testing.T, s *site) { os.Remove(s.prog); os.Mkdir(s.prog, 0o755) },
		want: "program %PROG is a directory"},
	{name: "bare program not in $PATH", clause: `command = "no-such-agent-zsched -c smtp"`,
		want: `clause.command: smtp/*: program "no-such-agent-zsched" not found in $PATH`},
	{name: "unknown user", clause: `user = "nosuchuser"`,
		want: `:8: clause.user: smtp/*: no user "nosuchuser" in the password database`},
	{name: "unknown numeric uid", clause: `user = 4242424`,
		want: `clause.user: smtp/*: no user with uid 4242424 in the password database`},
	{name: "unknown group", clause: `group = "nosuchgroup"`,
		want: `clause.group: smtp/*: no group "nosuchgroup" in the group database`},
	{name: "missing postoffice", breakIt: func(t *testing.T, s *site) { os.RemoveAll(s.po) },
		want: "scheduler.postoffice: %PO does not exist (a mistyped path? `scheduler init` creates a postoffice)"},
	{name: "postoffice without transport/", breakIt: func(t *testing.T, s *site) { os.RemoveAll(filepath.Join(s.po, "transport")) },
		want: "scheduler.postoffice: %PO has no transport/ directory: not a postoffice"},
	{name: "postoffice is a file", breakIt: func(t *testing.T, s *site) { os.RemoveAll(s.po); os.WriteFile(s.po, nil, 0o644) },
		want: "scheduler.postoffice: %PO is not a directory"},
	{name: "unwritable transport/", breakIt: func(t *testing.T, s *site) { os.Chmod(filepath.Join(s.po, "transport"), 0o555) },
		want: "%PO/transport is writable by no one (mode 0555)"},
	{name: "world-writable queue/", breakIt: func(t *testing.T, s *site) { os.Chmod(filepath.Join(s.po, "queue"), 0o777) },
		want: "%PO/queue is writable by every user (mode 0777)"},
	{name: "control socket's directory missing", scheduler: `control_socket = "run/zsched/ctl.sock"`,
		want: "scheduler.control_socket: directory %DIR/run/zsched: no such file or directory"},
	{name: "notify socket's directory is a file", scheduler: `notify_socket = "scheduler.toml/notify"`,
		want: "scheduler.notify_socket: %DIR/scheduler.toml is not a directory"},
	{name: "statelog's directory missing", scheduler: `statelog = "log/attempts.log"`,
		want: "scheduler.statelog: directory %DIR/log: no such file or directory"},
	{name: "unknown control_group", scheduler: `control_group = "nosuchgroup"`,
		want: `scheduler.control_group: no group "nosuchgroup" in the group database`},
	{name: "missing auth file", scheduler: "control_listen = \"174\"\ncontrol_auth = \"scheduler.auth\"",
		want: "scheduler.control_auth: %DIR/scheduler.auth: no such file or directory"},
	{name: "auth file with a bad line (a warning: the other lines apply)", scheduler: "control_auth = \"auth\"",
		breakIt: func(t *testing.T, s *site) {
			os.WriteFile(filepath.Join(s.dir, "auth"), []byte("ok:pw:TT:[127.0.0.0]/8\nbad:pw:TT:[300.0.0.1]/8\n"), 0o600)
		},
		warn: `scheduler.control_auth: %DIR/auth:2: "[300.0.0.1]/8": not an IP address`},
	{name: "missing redis password file", scheduler: "[cluster]\nredis = \"redis://127.0.0.1:6379/0\"\npassword_file = \"redis.secret\"",
		want: ":5: cluster.password_file: %DIR/redis.secret: no such file or directory"},
	{name: "empty redis password file", scheduler: "[cluster]\nredis = \"redis://127.0.0.1:6379/0\"\npassword_file = \"redis.secret\"",
		breakIt: func(t *testing.T, s *site) { os.WriteFile(filepath.Join(s.dir, "redis.secret"), []byte("\n"), 0o600) },
		want:    "cluster.password_file: %DIR/redis.secret: empty"},
	{name: "redis password file readable by others", scheduler: "[cluster]\nredis = \"redis://127.0.0.1:6379/0\"\npassword_file = \"redis.secret\"",
		breakIt: func(t *testing.T, s *site) { os.WriteFile(filepath.Join(s.dir, "redis.secret"), []byte("pw\n"), 0o644) },
		warn:    "cluster.password_file: %DIR/redis.secret holds the store's password and is readable by others (mode 0644)"},
	{name: "program not executable by the clause's user", root: true, clause: `user = "nobody"`,
		breakIt: func(t *testing.T, s *site) { os.Chmod(s.prog, 0o700) },
		want:    "clause.command: smtp/*: %PROG is not executable by user nobody"},
	{name: "clause's user cannot enter transport/", root: true, clause: `user = "nobody"`,
		breakIt: func(t *testing.T, s *site) { os.Chmod(filepath.Join(s.po, "transport"), 0o700) },
		want:    "clause.user: smtp/*: user nobody (uid 65534) cannot enter %PO/transport (mode 0700"},
}

func TestCheckTable(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				need.Root(t)
			}
			s := newSite(t)
			c := s.config(t, tc.scheduler, tc.clause)
			if tc.breakIt != nil {
				tc.breakIt(t, s)
			}
			r := Check(c, Options{})
			expand := strings.NewReplacer("%PROG", s.prog, "%PO", s.po, "%DIR", s.dir)
			errs, warns := joined(r.Errors), joined(r.Warnings)
			switch {
			case tc.want != "":
				if !strings.Contains(errs, expand.Replace(tc.want)) {
					t.Fatalf("errors:\n%s\nwant one containing\n%s", errs, expand.Replace(tc.want))
				}
				if len(r.Errors) != 1 {
					t.Errorf("want exactly one error, got:\n%s", errs)
				}
				t.Logf("message: %s", strings.ReplaceAll(errs, s.dir, "/etc/zsched"))
			default:
				if errs != "" {
					t.Fatalf("errors: %s", errs)
				}
				if !strings.Contains(warns, expand.Replace(tc.warn)) {
					t.Fatalf("warnings:\n%s\nwant one containing\n%s", warns, expand.Replace(tc.warn))
				}
				t.Logf("warning: %s", strings.ReplaceAll(warns, s.dir, "/etc/zsched"))
			}
		})
	}
}

// The untouched site passes: no case's message comes from the site itself.
func TestCheckGoodSite(t *testing.T) {
	s := newSite(t)
	r := Check(s.config(t, "", ""), Options{})
	if len(r.Errors)+len(r.Warnings) > 0 {
		t.Fatalf("a good site: %v %v", r.Errors, r.Warnings)
	}
	// The shipped example, on a postoffice made the way `scheduler init` does.
	os.RemoveAll(s.po)
	c := s.config(t, "", "")
	r = Check(c, Options{})
	if !errors.Is(r.Err(), ErrNoPostoffice) {
		t.Fatalf("missing postoffice: %v, want ErrNoPostoffice", r.Err())
	}
	if r := Check(c, Options{NoPostoffice: true}); r.Err() != nil {
		t.Fatalf("with NoPostoffice: %v", r.Err())
	}
}

func joined(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

// TestCheckAsOperator: `scheduler check` run by an operator who is not
// root, on a postoffice only root may write, warns that the scheduler
// must run as root or the owner instead of failing: the operator's uid is
// not the scheduler's. The scheduler's own check (run, reload) as that
// user still fails. The check runs in this test binary restarted as
// nobody.
func TestCheckAsOperator(t *testing.T) {
	if cfg := os.Getenv("PREFLIGHT_OPERATOR_CONFIG"); cfg != "" {
		operatorChild(t, cfg)
		return
	}
	need.Root(t)
	u, err := user.Lookup("nobody")
	need.Met(t, "a user nobody to run the check as", err)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// t.TempDir's parent is private to root; nobody must read the site.
	dir, err := os.MkdirTemp("", "preflight-operator")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	s := newSite(t)
	s.dir, s.po, s.prog = dir, filepath.Join(dir, "po"), filepath.Join(dir, "bin", "agent")
	for _, d := range []string{"po/queue", "po/transport", "bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(s.prog, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := s.config(t, "", "")

	// go test's build directory is root's too: a copy of the binary.
	bin := filepath.Join(dir, "preflight.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestCheckAsOperator$", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PREFLIGHT_OPERATOR_CONFIG="+c.File)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the check as nobody: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// operatorChild runs as nobody: the operator's check warns, the
// scheduler's fails, on a postoffice of root's.
func operatorChild(t *testing.T, file string) {
	c, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(c, Options{Operator: true})
	if len(r.Errors) > 0 {
		t.Fatalf("operator's check: errors %v, want none (only warnings)", r.Errors)
	}
	warns := joined(r.Warnings)
	if !strings.Contains(warns, "/po/queue is not writable by uid "+strconv.Itoa(os.Geteuid())+", who runs this check (owner 0, mode 0755): the scheduler must run as root or as a user who may write there") {
		t.Fatalf("operator's check: warnings\n%s\nwant one saying who must write queue/", warns)
	}
	r = Check(c, Options{})
	if errs := joined(r.Errors); !strings.Contains(errs, "/po/queue is not writable by uid "+strconv.Itoa(os.Geteuid())+" (owner 0, mode 0755): the scheduler creates and removes files there") {
		t.Fatalf("the scheduler's own check: errors\n%s\nwant queue/ not writable", errs)
	}
}

// Package preflight checks what a loaded configuration needs from the host
// it runs on, as `postfix check` does for Postfix: each clause's agent
// program exists and is executable (by the clause's user), users and
// groups exist, the postoffice exists with queue/ and transport/ and sane
// permissions, the sockets' directories exist, the auth file reads.
//
// Parse cannot do this: the scheduling core imports package config and
// must not touch the host. `scheduler check`, `scheduler run` and every
// reload call Check; a problem is a *config.Error naming the file, line and
// key, as Parse's are.
package preflight

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"zsched/config"
	"zsched/control"
)

// ErrNoPostoffice is wrapped by the error for a postoffice that does not
// exist: `scheduler init` (or `run -create`) makes one.
var ErrNoPostoffice = errors.New("preflight: the postoffice does not exist")

// Result is what Check found.
type Result struct {
	Errors   []error // each a *config.Error; the configuration must not run
	Warnings []error // worth fixing; the scheduler runs anyway
}

// Err joins the errors, nil when there are none.
func (r Result) Err() error { return errors.Join(r.Errors...) }

// Options adjust Check.
type Options struct {
	// NoPostoffice skips the postoffice's own checks: `scheduler init` is
	// about to make it.
	NoPostoffice bool
	// Operator says the check is an operator's (`scheduler check`), whose
	// user need not be the scheduler's: a directory only this user may
	// not write is a warning that says who must, not an error. run and
	// reload check as the scheduler itself, where it is an error.
	Operator bool
}

// Check examines the host for c.
func Check(c *config.Config, opt Options) Result {
	var r Result
	ch := &checker{c: c, r: &r, poBad: opt.NoPostoffice, operator: opt.Operator}
	if !opt.NoPostoffice {
		ch.postoffice()
	}
	ch.sockets()
	ch.clauses()
	ch.cluster()
	return r
}

type checker struct {
	c     *config.Config
	r     *Result
	poBad bool // the postoffice has an error already: its sockets are not checked
	// operator: Options.Operator.
	operator bool
}

// missing is the error for a postoffice that does not exist: a
// *config.Error that is also ErrNoPostoffice.
type missing struct{ e *config.Error }

func (m missing) Error() string   { return m.e.Error() }
func (m missing) Unwrap() []error { return []error{m.e, ErrNoPostoffice} }

func (ch *checker) errorf(clause int, key, format string, args ...any) {
	ch.r.Errors = append(ch.r.Errors, ch.c.Errorf(clause, key, format, args...))
}

func (ch *checker) warnf(clause int, key, format string, args ...any) {
	ch.r.Warnings = append(ch.r.Warnings, ch.c.Errorf(clause, key, format, args...))
}

// postoffice checks the spool root and its two directories.
func (ch *checker) postoffice() {
	po := ch.c.Scheduler.Postoffice
	fi, err := os.Stat(po)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e := ch.c.Errorf(-1, "postoffice", "%s does not exist (a mistyped path? `scheduler init` creates a postoffice)", po)
		ch.r.Errors = append(ch.r.Errors, missing{e})
		ch.poBad = true
		return
	case err != nil:
		ch.errorf(-1, "postoffice", "%v", err)
		ch.poBad = true
		return
	case !fi.IsDir():
		ch.errorf(-1, "postoffice", "%s is not a directory", po)
		ch.poBad = true
		return
	}
	for _, sub := range []string{"queue", "transport"} {
		dir := filepath.Join(po, sub)
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			ch.errorf(-1, "postoffice", "%s has no %s/ directory: not a postoffice (`scheduler init` makes the layout)", po, sub)
			ch.poBad = true
			continue
		case err != nil:
			ch.errorf(-1, "postoffice", "%v", err)
			ch.poBad = true
			continue
		case !fi.IsDir():
			ch.errorf(-1, "postoffice", "%s is not a directory", dir)
			ch.poBad = true
			continue
		}
		mode := fi.Mode().Perm()
		switch {
		case mode&0o002 != 0:
			ch.errorf(-1, "postoffice", "%s is writable by every user (mode %04o): anyone could queue control files the agents act on; chmod o-w", dir, mode)
		case mode&0o222 == 0:
			ch.errorf(-1, "postoffice", "%s is writable by no one (mode %04o): the scheduler creates and removes files there", dir, mode)
		case unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS) != nil:
			ch.unwritable("postoffice", dir, fmt.Sprintf(" (owner %d, mode %04o)", owner(fi), mode),
				"the scheduler creates and removes files there")
		}
	}
}

// unwritable reports what the checking user may not write: an error when
// that user is the scheduler's, a warning for an operator's check run as
// another user than root (the scheduler may well run as root or as the
// directory's owner; only a check as that user can tell).
func (ch *checker) unwritable(key, what, detail, why string) {
	uid := os.Geteuid()
	if ch.operator && uid != 0 {
		ch.warnf(-1, key, "%s is not writable by uid %d, who runs this check%s: the scheduler must run as root or as a user who may write there (%s); run check as that user to be sure",
			what, uid, detail, why)
		return
	}
	ch.errorf(-1, key, "%s is not writable by uid %d%s: %s", what, uid, detail, why)
}

func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// sockets checks the directories of the sockets and files the scheduler
// creates, the control group and the auth file.
func (ch *checker) sockets() {
	s := &ch.c.Scheduler
	for _, f := range []struct{ key, path string }{
		{"control_socket", s.ControlSocket},
		{"notify_socket", s.NotifySocket},
		{"statelog", s.StateLog},
	} {
		if f.path == "" {
			continue
		}
		dir := filepath.Dir(f.path)
		if ch.poBad && (dir == s.Postoffice || strings.HasPrefix(dir, s.Postoffice+string(filepath.Separator))) {
			continue // reported with the postoffice
		}
		fi, err := os.Stat(dir)
		switch {
		case err != nil:
			ch.errorf(-1, f.key, "directory %s: %v", dir, unwrapPath(err))
		case !fi.IsDir():
			ch.errorf(-1, f.key, "%s is not a directory", dir)
		case unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS) != nil:
			ch.unwritable(f.key, "directory "+dir, "", "the scheduler creates its files there")
		}
	}
	if s.ControlGroup != "" {
		if _, err := lookupGroup(s.ControlGroup); err != nil {
			ch.errorf(-1, "control_group", "%v", err)
		}
	}
	if s.ControlAuth != "" {
		a, err := control.ReadAuth(s.ControlAuth)
		if err != nil {
			ch.errorf(-1, "control_auth", "%s: %v", s.ControlAuth, unwrapPath(err))
			return
		}
		for _, p := range a.Problems {
			ch.warnf(-1, "control_auth", "%v", strings.TrimPrefix(p.Error(), control.ErrAuthFile.Error()+": "))
		}
		if fi, err := os.Stat(s.ControlAuth); err == nil && fi.Mode().Perm()&0o044 != 0 {
			ch.warnf(-1, "control_auth", "%s holds passwords and is readable by others (mode %04o); chmod 0600", s.ControlAuth, fi.Mode().Perm())
		}
	}
}

// cluster checks what [cluster] needs from the host: its password file
// reads and holds a password, and only its owner may read it. The store
// itself is not dialled: a node starts while Redis is down (it falls back)
// and the check must not wait on the network.
func (ch *checker) cluster() {
	cc := ch.c.Cluster
	if cc == nil || cc.PasswordFile == "" {
		return
	}
	if _, err := cc.Password(); err != nil {
		msg := strings.TrimPrefix(err.Error(), "cluster: password_file ")
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			msg = cc.PasswordFile + ": " + pe.Err.Error()
		}
		ch.r.Errors = append(ch.r.Errors, ch.c.ClusterErrorf("password_file", "%s", msg))
		return
	}
	if fi, err := os.Stat(cc.PasswordFile); err == nil && fi.Mode().Perm()&0o044 != 0 {
		ch.r.Warnings = append(ch.r.Warnings, ch.c.ClusterErrorf("password_file",
			"%s holds the store's password and is readable by others (mode %04o); chmod 0600", cc.PasswordFile, fi.Mode().Perm()))
	}
}

// clauses checks each clause's program, user and group.
func (ch *checker) clauses() {
	for i := range ch.c.Clauses {
		cl := &ch.c.Clauses[i]
		uid, gid, gids, ok := ch.credentials(i, cl)
		if len(cl.Command.Argv) == 0 {
			continue
		}
		prog := cl.Command.Argv[0]
		if strings.Contains(prog, "${") {
			continue // substituted per thread: checked when an agent starts
		}
		path, err := Program(prog)
		if err != nil {
			ch.errorf(i, "command", "%s: %v", cl.Select, err)
			continue
		}
		if ok && uid >= 0 && os.Geteuid() == 0 {
			fi, err := os.Stat(path)
			if err == nil && !mayExec(fi, uid, gid, gids) {
				ch.errorf(i, "command", "%s: %s is not executable by user %s (uid %d; mode %04o, owner %d)",
					cl.Select, path, cl.User, uid, fi.Mode().Perm(), owner(fi))
			}
			for _, sub := range []string{"transport", "queue"} {
				dir := filepath.Join(ch.c.Scheduler.Postoffice, sub)
				if fi, err := os.Stat(dir); err == nil && !mayEnter(fi, uid, gid, gids) {
					ch.errorf(i, "user", "%s: user %s (uid %d) cannot enter %s (mode %04o, owner %d): the agent works there",
						cl.Select, cl.User, uid, dir, fi.Mode().Perm(), owner(fi))
				}
			}
		}
	}
}

// credentials resolves a clause's user and group as the daemon does: a
// name, else a numeric id, which must exist too.
func (ch *checker) credentials(i int, cl *config.Clause) (uid, gid int, gids []string, ok bool) {
	uid, gid, ok = -1, -1, true
	if cl.User != "" {
		u, err := lookupUser(cl.User)
		if err != nil {
			ch.errorf(i, "user", "%s: %v", cl.Select, err)
			ok = false
		} else {
			uid, _ = strconv.Atoi(u.Uid)
			gid, _ = strconv.Atoi(u.Gid)
			gids, _ = u.GroupIds()
		}
	}
	if cl.Group != "" {
		g, err := lookupGroup(cl.Group)
		if err != nil {
			ch.errorf(i, "group", "%s: %v", cl.Select, err)
			ok = false
		} else {
			gid = g
			gids = []string{strconv.Itoa(g)}
		}
	}
	return uid, gid, gids, ok
}

func lookupUser(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if err == nil {
		return u, nil
	}
	if _, nerr := strconv.Atoi(name); nerr == nil {
		if u, err := user.LookupId(name); err == nil {
			return u, nil
		}
		return nil, fmt.Errorf("no user with uid %s in the password database", name)
	}
	return nil, fmt.Errorf("no user %q in the password database", name)
}

func lookupGroup(name string) (int, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			if g, err = user.LookupGroupId(name); err != nil {
				return -1, fmt.Errorf("no group with gid %s in the group database", name)
			}
		} else {
			return -1, fmt.Errorf("no group %q in the group database", name)
		}
	}
	return strconv.Atoi(g.Gid)
}

// Program resolves an agent's program as the daemon does when it starts
// one: a name with a '/' is a path (made absolute by config relative to
// the configuration file), a bare name is looked up in $PATH. It returns
// the path, or an error saying what is wrong with it.
func Program(prog string) (string, error) {
	path, err := exec.LookPath(prog)
	if err == nil {
		return path, nil
	}
	if errors.Is(err, exec.ErrDot) {
		return "", fmt.Errorf("program %q is found only through a relative $PATH entry (%s); give its path", prog, os.Getenv("PATH"))
	}
	if !strings.ContainsRune(prog, '/') {
		return "", fmt.Errorf("program %q not found in $PATH (%s)", prog, os.Getenv("PATH"))
	}
	fi, serr := os.Stat(prog)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		return "", fmt.Errorf("program %s does not exist", prog)
	case serr != nil:
		return "", fmt.Errorf("program %s: %v", prog, unwrapPath(serr))
	case fi.IsDir():
		return "", fmt.Errorf("program %s is a directory", prog)
	case fi.Mode()&0o111 == 0:
		return "", fmt.Errorf("program %s is not executable (mode %04o)", prog, fi.Mode().Perm())
	}
	return "", fmt.Errorf("program %s: %v", prog, unwrapPath(err))
}

// mayExec reports whether uid (primary group gid, groups gids) may execute
// the file, by its mode bits.
func mayExec(fi fs.FileInfo, uid, gid int, gids []string) bool {
	return permits(fi, uid, gid, gids, 0o1)
}

// mayEnter reports whether uid may search the directory.
func mayEnter(fi fs.FileInfo, uid, gid int, gids []string) bool {
	return permits(fi, uid, gid, gids, 0o1)
}

// permits applies the owner, group or other bits of fi's mode, as the
// kernel does for a process that is not root.
func permits(fi fs.FileInfo, uid, gid int, gids []string, bit fs.FileMode) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	mode := fi.Mode().Perm()
	switch {
	case uid == 0:
		return mode&0o111 != 0 || fi.IsDir()
	case int(st.Uid) == uid:
		return mode&(bit<<6) != 0
	case int(st.Gid) == gid || slices.Contains(gids, strconv.Itoa(int(st.Gid))):
		return mode&(bit<<3) != 0
	}
	return mode&bit != 0
}

// unwrapPath drops the *fs.PathError's repetition of the path.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

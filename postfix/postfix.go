// Package postfix runs private Postfix instances on the loopback interface
// as real receiving servers for zsched's SMTP agent tests and experiments,
// and as the scheduler zsched is measured against (an instance held
// without its queue manager until its queue is in place, then drained),
// and parses what they log. Each instance has its own configuration, queue
// and data directories under one directory, listens on 127.0.0.1 only, is
// started as a child process (master -d in its own process group) and is
// stopped by its process group id. The system-wide Postfix service is
// never touched. Postfix's master runs as root (it drops privileges to
// mail_owner for its daemons), so Start needs root; Available tells tests
// why they must skip.
package postfix

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Where Debian's postfix package puts its programs.
const (
	MasterPath   = "/usr/lib/postfix/sbin/master"
	PostfixPath  = "/usr/sbin/postfix" // looked for only as a sign the package is installed
	SmtpSinkPath = "/usr/sbin/smtp-sink"
)

// ErrUnavailable is wrapped by Available's error.
var ErrUnavailable = errors.New("postfix: cannot run a private instance")

// Available reports whether a private instance can be started here: the
// postfix package is installed (CI installs it: .ci/run), we are root, and
// the mail_owner account "postfix" exists.
func Available() error {
	for _, p := range []string{MasterPath, PostfixPath} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: postfix is not installed (%s missing; apt-get install postfix)", ErrUnavailable, p)
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: Postfix's master must run as root", ErrUnavailable)
	}
	if _, err := osuser.Lookup("postfix"); err != nil {
		return fmt.Errorf("%w: no postfix user: %w", ErrUnavailable, err)
	}
	return nil
}

// Config describes one instance.
type Config struct {
	// Dir is the instance's root (created if missing). Postfix's daemons
	// drop privileges, so Dir and every directory above it must be
	// searchable by others (mode o+x); Start checks.
	Dir string
	// Port on 127.0.0.1; 0 picks a free one.
	Port int
	// Reject maps recipient addresses to the reply smtpd gives at RCPT,
	// e.g. "550 5.1.1 user unknown" (an access map).
	Reject map[string]string
	// TLS makes smtpd offer STARTTLS with a fresh self-signed certificate.
	TLS bool
	// ConnectionLimit is smtpd_client_connection_count_limit, applied to
	// loopback clients too (0 = Postfix's default, loopback exempt): over
	// the limit smtpd answers 421 and disconnects.
	ConnectionLimit int
	// ProcessLimit is default_process_limit (0 = Postfix's 100).
	ProcessLimit int
	// RcptDelay delays smtpd's answer to every RCPT, through a policy
	// service run by this process (Postfix's own "sleep" restriction only
	// takes whole seconds).
	RcptDelay time.Duration
	// Main holds extra main.cf lines, "name = value"; a name the instance
	// already sets (default_transport, say) is set to the new value in
	// place.
	Main []string
	// Master holds extra master.cf lines (an smtp(8) client service, say).
	Master []string
	// Files are written under the queue directory, which is the root of
	// chrooted daemons (etc/hosts for an smtp(8) with chroot = y).
	Files map[string]string
	// Hold leaves qmgr out of master.cf: mail accepted stays in the
	// incoming queue until StartQmgr. cleanup and smtpd then get no flow
	// tokens, so in_flow_delay is 0 (no wait per message).
	Hold bool
}

// Instance is a running private Postfix.
type Instance struct {
	Dir  string
	Addr string // "127.0.0.1:port"
	Port int

	cfg    Config
	cmd    *exec.Cmd
	exited chan struct{}
	policy *policyServer
}

// Start writes the configuration, creates the queue, starts master and
// waits until it has logged that it runs.
func Start(cfg Config) (*Instance, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("postfix: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("postfix: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("postfix: %w", err)
	}
	if err := searchable(dir); err != nil {
		return nil, err
	}
	in := &Instance{Dir: dir, cfg: cfg}
	if cfg.RcptDelay > 0 {
		if in.policy, err = startPolicy(cfg.RcptDelay); err != nil {
			return nil, err
		}
	}
	// A port picked free may be taken before master binds it; master then
	// exits at once and another is tried.
	for attempt := 0; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				in.policy.close()
				return nil, err
			}
		}
		err = in.start(cfg, port)
		if err == nil {
			return in, nil
		}
		if cfg.Port != 0 || attempt == 2 || !errors.Is(err, errExited) {
			in.policy.close()
			return nil, err
		}
	}
}

var errExited = errors.New("postfix: master exited during start-up")

func (in *Instance) start(cfg Config, port int) error {
	dir := in.Dir
	etc := filepath.Join(dir, "etc")
	for _, d := range []string{etc, in.QueueDir(), filepath.Join(dir, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("postfix: %w", err)
		}
	}
	in.Port, in.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// The log of a failed attempt would confuse the readiness check.
	os.Remove(in.LogPath())
	if err := in.writeConfig(cfg); err != nil {
		return err
	}
	if err := chown(filepath.Join(dir, "data"), "postfix", "", 0o700); err != nil {
		return err
	}
	if err := mkQueue(in.QueueDir()); err != nil {
		return err
	}
	cmd := exec.Command(MasterPath, "-c", etc, "-d")
	cmd.Dir = dir
	// Its own process group: master signals its group on SIGTERM, and
	// Stop ends the daemons it leaves by that group id.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("postfix: start master: %w", err)
	}
	in.cmd = cmd
	in.exited = make(chan struct{})
	go func() {
		cmd.Wait()
		close(in.exited)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		log, _ := os.ReadFile(in.LogPath())
		if bytes.Contains(log, []byte("daemon started")) && listening(in.Addr) {
			return nil
		}
		select {
		case <-in.exited:
			in.killGroup()
			return fmt.Errorf("%w: %s%s", errExited, stderr.String(), log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			in.Stop()
			return fmt.Errorf("postfix: master did not start within 15s:\n%s", log)
		}
	}
}

// listening reports whether something accepts TCP connections at addr,
// without starting an SMTP session: the ss-like check reads
// /proc/net/tcp, so readiness polling adds no sessions to the log.
func listening(addr string) bool {
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return true // cannot tell; the log line has to do
	}
	want := fmt.Sprintf("0100007F:%04X", port)
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && f[1] == want && f[3] == "0A" { // 0A = LISTEN
			return true
		}
	}
	return false
}

func (in *Instance) writeConfig(cfg Config) error {
	dir := in.Dir
	etc := filepath.Join(dir, "etc")
	policy := ""
	if in.policy != nil {
		policy = "check_policy_service inet:" + in.policy.addr() + ", "
	}
	main := []string{
		"compatibility_level = 3.6",
		"queue_directory = " + in.QueueDir(),
		"data_directory = " + filepath.Join(dir, "data"),
		"mail_owner = postfix",
		"setgid_group = postdrop",
		"inet_interfaces = 127.0.0.1",
		"inet_protocols = ipv4",
		"myhostname = sink.test",
		"mydestination =",
		"mynetworks = 127.0.0.0/8",
		"relay_domains =",
		"alias_maps =",
		"alias_database =",
		"biff = no",
		// Everything accepted is thrown away, and logged as "status=sent".
		"default_transport = discard",
		"local_transport = discard",
		"smtpd_relay_restrictions = permit_mynetworks, reject",
		"smtpd_recipient_restrictions = " + policy + "check_recipient_access texthash:" + filepath.Join(etc, "reject") + ", permit",
		"maillog_file = " + in.LogPath(),
		"maillog_file_prefixes = " + dir,
		"smtpd_peername_lookup = no",
		"smtp_dns_support_level = disabled",
		"smtputf8_enable = yes",
	}
	if cfg.Hold {
		main = append(main, "in_flow_delay = 0")
	}
	if cfg.ConnectionLimit > 0 {
		main = append(main,
			"smtpd_client_connection_count_limit = "+strconv.Itoa(cfg.ConnectionLimit),
			"smtpd_client_event_limit_exceptions =")
	}
	if cfg.ProcessLimit > 0 {
		main = append(main, "default_process_limit = "+strconv.Itoa(cfg.ProcessLimit))
	}
	if cfg.TLS {
		cert, key, err := writeCert(etc)
		if err != nil {
			return err
		}
		main = append(main,
			"smtpd_tls_security_level = may",
			"smtpd_tls_cert_file = "+cert,
			"smtpd_tls_key_file = "+key,
			"smtpd_tls_loglevel = 1")
	}
	main, err := mergeMain(main, cfg.Main)
	if err != nil {
		return err
	}
	var reject strings.Builder
	addrs := make([]string, 0, len(cfg.Reject))
	for a := range cfg.Reject {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		fmt.Fprintf(&reject, "%s %s\n", a, cfg.Reject[a])
	}
	for name, data := range map[string]string{
		"main.cf":   strings.Join(main, "\n") + "\n",
		"master.cf": in.masterCf(!cfg.Hold),
		"reject":    reject.String(),
	} {
		if err := writeOld(filepath.Join(etc, name), data); err != nil {
			return err
		}
	}
	for name, data := range cfg.Files {
		if !filepath.IsLocal(name) {
			return fmt.Errorf("postfix: file %q is not below the queue directory", name)
		}
		p := filepath.Join(in.QueueDir(), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("postfix: %w", err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return fmt.Errorf("postfix: %w", err)
		}
	}
	return nil
}

// masterCf is master.cf: smtpd on the instance's port, the daemons the
// instance needs, qmgr unless held, and Config.Master.
func (in *Instance) masterCf(qmgr bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s inet n - n - - smtpd\n", in.Addr)
	b.WriteString(`cleanup   unix n - n - 0 cleanup
tlsmgr    unix - - n 1000? 1 tlsmgr
rewrite   unix - - n - - trivial-rewrite
bounce    unix - - n - 0 bounce
defer     unix - - n - 0 bounce
trace     unix - - n - 0 bounce
verify    unix - - n - 1 verify
flush     unix n - n 1000? 0 flush
proxymap  unix - - n - - proxymap
error     unix - - n - - error
retry     unix - - n - - error
discard   unix - - n - - discard
anvil     unix - - n - 1 anvil
scache    unix - - n - 1 scache
postlog   unix-dgram n - n - 1 postlogd
`)
	if qmgr {
		b.WriteString("qmgr      unix n - n 300 1 qmgr\n")
	}
	for _, l := range in.cfg.Master {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// writeOld writes a configuration file dated in the past: Postfix waits,
// in 300 ms steps, until a configuration file is at least a second old,
// lest it read one half written; ours are complete.
func writeOld(p, data string) error {
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		return fmt.Errorf("postfix: %w", err)
	}
	old := time.Now().Add(-10 * time.Second)
	if err := os.Chtimes(p, old, old); err != nil {
		return fmt.Errorf("postfix: %w", err)
	}
	return nil
}

// mergeMain sets each "name = value" of extra in base: in place where base
// sets that name, appended otherwise. Postfix would take the last of two
// settings too, but warns about each in the log.
func mergeMain(base, extra []string) ([]string, error) {
	out := slices.Clone(base)
	for _, l := range extra {
		name, _, ok := strings.Cut(l, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("postfix: main.cf line %q: want \"name = value\"", l)
		}
		i := slices.IndexFunc(out, func(b string) bool {
			n, _, _ := strings.Cut(b, "=")
			return strings.TrimSpace(n) == name
		})
		if i >= 0 {
			out[i] = l
		} else {
			out = append(out, l)
		}
	}
	return out, nil
}

// QueueDir is the instance's queue directory (the chroot of chrooted
// daemons): incoming/, active/, deferred/, ...
func (in *Instance) QueueDir() string { return filepath.Join(in.Dir, "spool") }

// Pgid is the process group of master and every daemon it starts.
func (in *Instance) Pgid() int { return in.cmd.Process.Pid }

// StartQmgr starts the queue manager of an instance started with Hold:
// master.cf gets its qmgr line and master is told to reload (SIGHUP, as
// "postfix reload" does), which starts qmgr at once; qmgr then scans the
// incoming queue. It returns once master has the signal.
func (in *Instance) StartQmgr() error {
	if !in.cfg.Hold {
		return errors.New("postfix: StartQmgr: the instance was not started with Hold")
	}
	if err := writeOld(filepath.Join(in.Dir, "etc", "master.cf"), in.masterCf(true)); err != nil {
		return err
	}
	in.cfg.Hold = false
	if err := in.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("postfix: reload master: %w", err)
	}
	return nil
}

// Stop kills master and its daemons (its process group) and waits for them
// to be gone. The instance is disposable, so there is no graceful stop:
// Postfix's own takes a second, and tests start many instances. Stop is
// safe to call twice.
func (in *Instance) Stop() error {
	defer in.policy.close()
	if in.cmd == nil || in.cmd.Process == nil {
		return nil
	}
	return in.killGroup()
}

// killGroup kills master's process group and waits until master is reaped
// and no process of the group is left.
func (in *Instance) killGroup() error {
	pgid := in.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-in.exited
	deadline := time.Now().Add(5 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("postfix: processes of group %d outlived SIGKILL for 5s", pgid)
		}
		// The daemons are not our children (master was), so there is no
		// wait to block on: poll the process table.
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// groupAlive reports whether a process of group pgid is still running.
// Zombies do not count: the daemons outlive master, are reparented to
// init, and init may reap them a while later.
func groupAlive(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold blanks and ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			return true
		}
	}
	return false
}

// LogPath is the instance's maillog file.
func (in *Instance) LogPath() string { return filepath.Join(in.Dir, "maillog") }

// Log returns the maillog so far.
func (in *Instance) Log() (string, error) {
	b, err := os.ReadFile(in.LogPath())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("postfix: %w", err)
	}
	return string(b), nil
}

// Summary is what a maillog says about deliveries.
type Summary struct {
	Sent     map[string]int    // recipient → deliveries logged status=sent
	Rejected map[string]string // recipient → the RCPT reject reply
	// TooMany counts sessions refused with 421 for the connection limit.
	TooMany int
	// TLS counts sessions that established TLS.
	TLS int
	// Connects counts SMTP sessions.
	Connects int
}

var (
	sentRE   = regexp.MustCompile(`: to=<([^>]*)>,.* status=sent `)
	rejectRE = regexp.MustCompile(`reject: RCPT from [^:]*: (\d{3} [^;]*?); from=<[^>]*> to=<([^>]*)>`)
)

// Parse reads a maillog.
func Parse(log string) Summary {
	s := Summary{Sent: map[string]int{}, Rejected: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.Contains(l, "status=sent"):
			if m := sentRE.FindStringSubmatch(l); m != nil {
				s.Sent[m[1]]++
			}
		case strings.Contains(l, "reject: RCPT from"):
			if m := rejectRE.FindStringSubmatch(l); m != nil {
				s.Rejected[m[2]] = m[1]
			}
		case strings.Contains(l, "Connection concurrency limit exceeded"):
			s.TooMany++
		case strings.Contains(l, "TLS connection established from"):
			s.TLS++
		case strings.Contains(l, "smtpd[") && strings.Contains(l, ": connect from "):
			s.Connects++
		}
	}
	return s
}

// Summary parses the maillog so far.
func (in *Instance) Summary() (Summary, error) {
	log, err := in.Log()
	return Parse(log), err
}

// WaitSent waits until the maillog shows at least n recipients delivered,
// polling the log (Postfix writes it; there is nothing to block on).
func (in *Instance) WaitSent(n int, timeout time.Duration) (Summary, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := in.Summary()
		if err != nil {
			return s, err
		}
		if len(s.Sent) >= n {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("postfix: %d of %d recipients delivered after %v", len(s.Sent), n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// searchable checks that the postfix user can reach dir: every directory
// from / down to it must be searchable by others.
func searchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("postfix: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("postfix: %s is not searchable by the postfix user (mode %v); chmod o+x it", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// mkQueue lays out a queue directory as "postfix check" would (which
// takes seconds): the daemons' directories owned by postfix, maildrop and
// public group postdrop, pid by root.
func mkQueue(q string) error {
	for _, d := range []struct {
		name, user, group string
		mode              os.FileMode
	}{
		{"active", "postfix", "", 0o700}, {"bounce", "postfix", "", 0o700},
		{"corrupt", "postfix", "", 0o700}, {"defer", "postfix", "", 0o700},
		{"deferred", "postfix", "", 0o700}, {"flush", "postfix", "", 0o700},
		{"hold", "postfix", "", 0o700}, {"incoming", "postfix", "", 0o700},
		{"private", "postfix", "", 0o700}, {"saved", "postfix", "", 0o700},
		{"trace", "postfix", "", 0o700}, {"maildrop", "postfix", "postdrop", 0o730},
		{"public", "postfix", "postdrop", 0o710}, {"pid", "", "", 0o755},
	} {
		p := filepath.Join(q, d.name)
		if err := os.MkdirAll(p, d.mode); err != nil {
			return fmt.Errorf("postfix: %w", err)
		}
		if err := chown(p, d.user, d.group, d.mode); err != nil {
			return err
		}
	}
	return nil
}

// chown gives p to user and group ("" keeps root) with mode.
func chown(p, user, group string, mode os.FileMode) error {
	uid, gid := 0, 0
	if user != "" {
		u, err := osuser.Lookup(user)
		if err != nil {
			return fmt.Errorf("postfix: %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
	}
	if group != "" {
		g, err := osuser.LookupGroup(group)
		if err != nil {
			return fmt.Errorf("postfix: %w", err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if err := os.Chown(p, uid, gid); err != nil {
		return fmt.Errorf("postfix: %w", err)
	}
	if err := os.Chmod(p, mode); err != nil {
		return fmt.Errorf("postfix: %w", err)
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("postfix: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// FreePort returns a loopback port nothing listens on now (for a server
// that is down, or one started later on a known port).
func FreePort() (int, error) { return freePort() }

// writeCert writes a self-signed certificate for sink.test and 127.0.0.1.
func writeCert(etc string) (certPath, keyPath string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("postfix: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "sink.test"},
		DNSNames:     []string{"sink.test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("postfix: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("postfix: %w", err)
	}
	certPath, keyPath = filepath.Join(etc, "cert.pem"), filepath.Join(etc, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", fmt.Errorf("postfix: %w", err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", fmt.Errorf("postfix: %w", err)
	}
	return certPath, keyPath, nil
}

// Package cluster owns what a node knows about the cluster it belongs to:
// the optional [cluster] table of scheduler.toml (Config) and the health of
// its link to the shared store (Status, Mode), for metrics and mailq.
// The store itself is package cluster/redisbook; the windows it shares are
// package window. This package imports neither go-redis nor the network, so
// that config (and through it the core) can hold a Config.
//
// The [cluster] table (DESIGN §13, issue 20). Without it nothing is shared:
//
//	[cluster]
//	# The shared store: redis://[user:password@]host:port/db, or rediss://
//	# for TLS. Required.
//	redis = "redis://127.0.0.1:6379/0"
//	# A file holding the password (one line; surrounding white space is
//	# dropped), instead of one in the URL. Relative to scheduler.toml.
//	password_file = "/etc/zsched/redis.secret"
//	# This node's name in the cluster, unique per node. Default: the host
//	# name.
//	node = "mx1"
//	# How long a session's lease lives unless renewed (every third of it);
//	# a node that dies frees its sessions this long after. Default 30s.
//	lease = "30s"
//	# Prefix of every Redis key and channel, so several clusters can share
//	# one Redis. Default "zsched:".
//	prefix = "zsched:"
//
// Package config reads the table through FromTable (config imports this
// package, so this one imports nothing of zsched's).
package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Config is the [cluster] table.
type Config struct {
	Redis        string        // the store's URL: redis:// or rediss://
	PasswordFile string        // absolute once resolved; "" = the URL's password, if any
	Node         string        // this node's name
	Lease        time.Duration // a lease's life without renewal
	Prefix       string        // of every key and channel
}

// Defaults.
const (
	DefaultLease  = 30 * time.Second
	DefaultPrefix = "zsched:"
	// MinLease keeps renewals (every third of a lease) above the store's
	// round trips and a loaded node's scheduling delays.
	MinLease = 3 * time.Second
)

// Default returns a Config with the defaults and this host's name. Redis
// has no default: a [cluster] table must say where the store is.
func Default() Config {
	host, _ := os.Hostname()
	return Config{Node: host, Lease: DefaultLease, Prefix: DefaultPrefix}
}

// KeyError is one key's error in a [cluster] table.
type KeyError struct {
	Key string // "redis", "lease", ...; the table's own problems use ""
	Err error
}

func (e *KeyError) Error() string {
	if e.Key == "" {
		return "cluster: " + e.Err.Error()
	}
	return "cluster: " + e.Key + ": " + e.Err.Error()
}

func (e *KeyError) Unwrap() error { return e.Err }

// keys are the table's keys, in the order errors are reported.
var keys = []string{"redis", "password_file", "node", "lease", "prefix"}

// FromTable reads a decoded [cluster] table (the map BurntSushi/toml gives
// for it). dir resolves a relative password_file (scheduler.toml's
// directory). Its errors are *KeyError values joined in the keys' order;
// package config reports each at its key's line. lease is a string
// time.ParseDuration reads, an integer of seconds, or a time.Duration
// (config hands it so, parsed in scheduler.toml's duration syntax).
func FromTable(m map[string]any, dir string) (Config, error) {
	c := Default()
	var errs []error
	fail := func(key string, err error) { errs = append(errs, &KeyError{Key: key, Err: err}) }
	str := func(key string, dst *string) {
		v, ok := m[key]
		if !ok {
			return
		}
		s, ok := v.(string)
		if !ok {
			fail(key, fmt.Errorf("want a string, not %T", v))
			return
		}
		*dst = s
	}
	var unknown []string
	for k := range m {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		fail(k, errors.New("unknown key"))
	}
	str("redis", &c.Redis)
	str("password_file", &c.PasswordFile)
	str("node", &c.Node)
	str("prefix", &c.Prefix)
	if v, ok := m["lease"]; ok {
		switch t := v.(type) {
		case string:
			d, err := time.ParseDuration(t)
			if err != nil {
				fail("lease", fmt.Errorf("invalid duration %q", t))
			}
			c.Lease = d
		case time.Duration:
			c.Lease = t
		case int64:
			c.Lease = time.Duration(t) * time.Second
		default:
			fail("lease", fmt.Errorf("want a duration such as \"30s\", not %T", v))
		}
	}
	if c.PasswordFile != "" && !filepath.IsAbs(c.PasswordFile) && dir != "" {
		c.PasswordFile = filepath.Join(dir, c.PasswordFile)
	}
	if len(errs) == 0 {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// Validate checks c; its errors are *KeyError values, joined.
func (c *Config) Validate() error {
	var errs []error
	fail := func(key string, err error) { errs = append(errs, &KeyError{Key: key, Err: err}) }
	switch u, err := url.Parse(c.Redis); {
	case c.Redis == "":
		fail("redis", errors.New("required: the shared store, e.g. \"redis://127.0.0.1:6379/0\""))
	case err != nil:
		fail("redis", errors.New("not a URL")) // err repeats the URL, password and all
	case u.Scheme != "redis" && u.Scheme != "rediss":
		fail("redis", fmt.Errorf("scheme %q: want redis:// or rediss://", u.Scheme))
	case u.Host == "":
		fail("redis", errors.New("no host"))
	default:
		if _, set := u.User.Password(); set && c.PasswordFile != "" {
			fail("password_file", errors.New("the redis URL has a password already: give one or the other"))
		}
	}
	switch {
	case c.Node == "":
		fail("node", errors.New("must not be empty (the host name is the default; it could not be read)"))
	case strings.ContainsFunc(c.Node, func(r rune) bool { return r <= ' ' || r == ':' || r == 0x7f }):
		fail("node", fmt.Errorf("%q: no white space, control characters or ':'", c.Node))
	}
	if c.Lease < MinLease {
		fail("lease", fmt.Errorf("%v: at least %v", c.Lease, MinLease))
	}
	if strings.ContainsFunc(c.Prefix, func(r rune) bool { return r <= ' ' || r == '{' || r == '}' }) {
		fail("prefix", fmt.Errorf("%q: no white space, control characters or braces", c.Prefix))
	}
	return errors.Join(errs...)
}

// Password returns the store's password from password_file, "" when there
// is none (the URL's, if any, applies).
func (c *Config) Password() (string, error) {
	if c.PasswordFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("cluster: password_file: %w", err)
	}
	p := strings.TrimSpace(string(b))
	if p == "" {
		return "", fmt.Errorf("cluster: password_file %s: empty", c.PasswordFile)
	}
	return p, nil
}

// Redacted is the store's URL without its password, for logs and mailq.
func (c *Config) Redacted() string {
	u, err := url.Parse(c.Redis)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}

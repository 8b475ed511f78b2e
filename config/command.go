package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Command is a transport agent's command line, parsed once at load time. In TOML
// it is an array of strings, or one string split on blanks (spaces and tabs)
// with no shell and no quoting, as ZMailer does. Leading words of the form
// NAME=value become the agent's environment, in both forms.
type Command struct {
	Env  []string // leading NAME=value words
	Argv []string // program and arguments, unsubstituted
}

// ErrCommand is wrapped by every command-line syntax error.
var ErrCommand = errors.New("config: invalid command")

// ParseCommand splits a command string on spaces and tabs.
func ParseCommand(s string) (Command, error) {
	return CommandFromWords(strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' }))
}

// CommandFromWords builds a Command from already split words (the TOML array form).
func CommandFromWords(words []string) (Command, error) {
	var c Command
	i := 0
	for ; i < len(words); i++ {
		name, _, ok := strings.Cut(words[i], "=")
		if !ok {
			break
		}
		// ZMailer takes every leading word with '=' as environment; a name
		// the environment cannot carry is a mistake worth reporting.
		if !isEnvName(name) {
			return Command{}, fmt.Errorf("%w: %q: %q is not a valid environment variable name", ErrCommand, words[i], name)
		}
		c.Env = append(c.Env, words[i])
	}
	if i == len(words) {
		return Command{}, fmt.Errorf("%w: no program", ErrCommand)
	}
	for _, w := range words[i:] {
		if w == "" {
			return Command{}, fmt.Errorf("%w: empty argument", ErrCommand)
		}
		if strings.ContainsRune(w, 0) {
			return Command{}, fmt.Errorf("%w: argument %q contains NUL", ErrCommand, w)
		}
	}
	c.Argv = append([]string(nil), words[i:]...)
	return c, nil
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// HostBound reports whether an argument is exactly "$host": such a clause keeps
// one ring per host and its job lines carry no host. A "${host}" inside a longer
// word is substituted but does not bind, as in ZMailer (quirk Q16).
func (c Command) HostBound() bool {
	for _, a := range c.argsOnly() {
		if a == "$host" {
			return true
		}
	}
	return false
}

func (c Command) argsOnly() []string {
	if len(c.Argv) < 2 {
		return nil
	}
	return c.Argv[1:]
}

// Expand returns the argv and environment words for one agent: arguments that
// are exactly "$host" or "$channel" become the host or channel, and "${host}" and
// "${channel}" are replaced inside any word, environment values included. Other
// "${NAME}" forms are left as written (ZMailer took them from its ZENV file,
// which zsched does not have). The returned slices are new.
func (c Command) Expand(channel, host string) (argv, env []string) {
	r := strings.NewReplacer("${host}", host, "${channel}", channel)
	argv = make([]string, len(c.Argv))
	for i, a := range c.Argv {
		switch {
		case i > 0 && a == "$host":
			argv[i] = host
		case i > 0 && a == "$channel":
			argv[i] = channel
		default:
			argv[i] = r.Replace(a)
		}
	}
	if len(c.Env) > 0 {
		env = make([]string, len(c.Env))
		for i, e := range c.Env {
			env[i] = r.Replace(e)
		}
	}
	return argv, env
}

// String returns the command as one line of words, environment first.
func (c Command) String() string {
	words := make([]string, 0, len(c.Env)+len(c.Argv))
	for _, w := range append(append([]string(nil), c.Env...), c.Argv...) {
		if w == "" || strings.ContainsAny(w, " \t\"") {
			// Only the array form can hold such words; quote them so the
			// line is not misread as more words.
			w = strconv.Quote(w)
		}
		words = append(words, w)
	}
	return strings.Join(words, " ")
}

// UnmarshalTOML implements toml.Unmarshaler: a string split on blanks, or an
// array of strings.
func (c *Command) UnmarshalTOML(v any) error {
	var (
		cmd Command
		err error
	)
	switch t := v.(type) {
	case string:
		cmd, err = ParseCommand(t)
	case []any:
		words := make([]string, len(t))
		for i, w := range t {
			s, ok := w.(string)
			if !ok {
				return fmt.Errorf("%w: word %d is %s, not a string", ErrCommand, i+1, tomlType(w))
			}
			words[i] = s
		}
		cmd, err = CommandFromWords(words)
	default:
		return fmt.Errorf("%w: want a string or an array of strings, not %s", ErrCommand, tomlType(v))
	}
	if err != nil {
		return err
	}
	*c = cmd
	return nil
}

// IsZero reports whether no command was configured.
func (c Command) IsZero() bool { return len(c.Argv) == 0 }

package config

import (
	"errors"
	"slices"
	"testing"
)

func TestParseCommand(t *testing.T) {
	tests := []struct {
		in        string
		env, argv []string
	}{
		{"smtp -s", nil, []string{"smtp", "-s"}},
		{"  smtp\t-c  $channel  ", nil, []string{"smtp", "-c", "$channel"}},
		{"MALLOC_DEBUG_=1 FOO=x smtp -s", []string{"MALLOC_DEBUG_=1", "FOO=x"}, []string{"smtp", "-s"}},
		{"EMPTY= prog", []string{"EMPTY="}, []string{"prog"}},
		// Only leading words are environment; later '=' words are arguments.
		{"A=1 prog --opt=x B=2", []string{"A=1"}, []string{"prog", "--opt=x", "B=2"}},
		// No shell: quotes are ordinary characters.
		{`sm -c "a b"`, nil, []string{"sm", "-c", `"a`, `b"`}},
	}
	for _, tt := range tests {
		c, err := ParseCommand(tt.in)
		if err != nil {
			t.Errorf("ParseCommand(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(c.Env, tt.env) || !slices.Equal(c.Argv, tt.argv) {
			t.Errorf("ParseCommand(%q) = env %q argv %q, want env %q argv %q", tt.in, c.Env, c.Argv, tt.env, tt.argv)
		}
	}
	for _, in := range []string{"", "   ", "A=1 B=2", "1A=x prog", "=x prog", "A-B=x prog"} {
		if c, err := ParseCommand(in); !errors.Is(err, ErrCommand) {
			t.Errorf("ParseCommand(%q) = %+v, %v; want ErrCommand", in, c, err)
		}
	}
}

func TestCommandUnmarshalTOML(t *testing.T) {
	var c Command
	if err := c.UnmarshalTOML([]any{"TZ=UTC", "/opt/ta/sm", "-c", "my channel"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Env, []string{"TZ=UTC"}) || !slices.Equal(c.Argv, []string{"/opt/ta/sm", "-c", "my channel"}) {
		t.Errorf("array form parsed as %+v", c)
	}
	// String must not turn one array word into two.
	if got, want := c.String(), `TZ=UTC /opt/ta/sm -c "my channel"`; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, bad := range []any{int64(3), []any{"prog", int64(1)}, []any{}, []any{"prog", ""}} {
		if err := c.UnmarshalTOML(bad); !errors.Is(err, ErrCommand) {
			t.Errorf("UnmarshalTOML(%#v) = %v, want ErrCommand", bad, err)
		}
	}
}

func TestCommandExpandAndHostBound(t *testing.T) {
	tests := []struct {
		cmd       string
		hostBound bool
		argv, env []string
	}{
		{"smtp -c $channel", false, []string{"smtp", "-c", "smtp-x"}, nil},
		{"smtp -c $channel $host", true, []string{"smtp", "-c", "smtp-x", "mx.example.com"}, nil},
		// ${host} inside a word is substituted but does not bind (Q16).
		{"smtp -l /var/log/${channel}-${host}.log", false, []string{"smtp", "-l", "/var/log/smtp-x-mx.example.com.log"}, nil},
		{"prog ${host}", false, []string{"prog", "mx.example.com"}, nil},
		// A $host inside a longer word stays as written, as in ZMailer.
		{"prog -h$host x$channel", false, []string{"prog", "-h$host", "x$channel"}, nil},
		// Other ${NAME} forms are left alone.
		{"prog ${LOGDIR}/x", false, []string{"prog", "${LOGDIR}/x"}, nil},
		{"LOG=/tmp/${channel}.log prog $host", true, []string{"prog", "mx.example.com"}, []string{"LOG=/tmp/smtp-x.log"}},
		// The program itself is not an argument.
		{"$host", false, []string{"$host"}, nil},
	}
	for _, tt := range tests {
		c, err := ParseCommand(tt.cmd)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.HostBound(); got != tt.hostBound {
			t.Errorf("%q: HostBound() = %v, want %v", tt.cmd, got, tt.hostBound)
		}
		argv, env := c.Expand("smtp-x", "mx.example.com")
		if !slices.Equal(argv, tt.argv) || !slices.Equal(env, tt.env) {
			t.Errorf("%q: Expand = %q %q, want %q %q", tt.cmd, argv, env, tt.argv, tt.env)
		}
		// Expand must not write through to the parsed command.
		argv[0] = "changed"
		fresh, _ := ParseCommand(tt.cmd)
		if !slices.Equal(fresh.Argv, c.Argv) || !slices.Equal(fresh.Env, c.Env) {
			t.Errorf("%q: Expand mutated the command to %+v", tt.cmd, c)
		}
	}
}

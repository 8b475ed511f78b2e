package control

import (
	"strings"
	"testing"
)

// The verb table is the one place verbs are declared: each is named once,
// in canonical form, with a help line that starts with its name, bounds
// that make sense and a right that exists; every right is needed by some
// verb; and no verb shadows a word the session answers itself.
func TestVerbTableIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	var needed Perm
	for _, v := range Verbs {
		if seen[v.Name] {
			t.Errorf("%s: listed twice", v.Name)
		}
		seen[v.Name] = true
		if v.Name != strings.ToUpper(v.Name) || strings.Join(strings.Fields(v.Name), " ") != v.Name {
			t.Errorf("%q: not canonical (upper case, one blank between words)", v.Name)
		}
		switch strings.Fields(v.Name)[0] {
		case VerbAuth, VerbHelp, VerbQuit, VerbExit:
			t.Errorf("%s: starts with a word the session answers itself", v.Name)
		}
		if !strings.HasPrefix(v.Help, v.Name+" ") && !strings.HasPrefix(v.Help, v.Name+":") {
			t.Errorf("%s: help %q does not start with the verb", v.Name, v.Help)
		}
		if strings.Contains(v.Help, "(") && strings.HasSuffix(v.Help, ")") {
			t.Errorf("%s: help %q names its command itself; that is Command's", v.Name, v.Help)
		}
		if v.MinArgs < 0 || v.MaxArgs < -1 || (v.MaxArgs >= 0 && v.MaxArgs < v.MinArgs) {
			t.Errorf("%s: arguments %d..%d", v.Name, v.MinArgs, v.MaxArgs)
		}
		if v.Need&^PermAll != 0 {
			t.Errorf("%s: needs right %#x, which does not exist", v.Name, v.Need)
		}
		needed |= v.Need
		if w := strings.Fields(v.Command); v.Command != "" && (len(w) == 0 || w[0] != strings.ToLower(w[0])) {
			t.Errorf("%s: command %q does not start with a scheduler subcommand's name", v.Name, v.Command)
		}
		got, args, ok := parse(v.Name + strings.Repeat(" x", v.MinArgs))
		if !ok || got.Name != v.Name || len(args) != v.MinArgs {
			t.Errorf("%s: its own name with %d arguments parses as %q %v (ok %v)", v.Name, v.MinArgs, got.Name, args, ok)
		}
	}
	if needed != PermAll {
		t.Errorf("rights no verb needs: %#x", PermAll&^needed)
	}
}

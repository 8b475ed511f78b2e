package config

import (
	"reflect"
	"strings"
	"testing"
)

// Every row is complete: a unique name, a field or a rule of its own, a
// default its own setter accepts, sane bounds; and every field of Scheduler
// and Clause is filled by a row (or derived, as AgeOrder and Line are).
func TestKeyTables(t *testing.T) {
	checkTable(t, "scheduler", schedulerTable, reflect.TypeFor[Scheduler](), &Scheduler{},
		func(p *Scheduler) any { return p })
	checkTable(t, "clause", clauseTable, reflect.TypeFor[Clause](), &layer{},
		func(l *layer) any { return &l.c })
}

func checkTable[T any](t *testing.T, name string, table []key[T], st reflect.Type, probe *T, base func(*T) any) {
	t.Helper()
	seen := map[string]bool{}
	filled := map[uintptr]bool{}
	for i := range table {
		k := &table[i]
		if k.name == "" || seen[k.name] || strings.ToLower(k.name) != k.name {
			t.Errorf("%s: bad or repeated key name %q", name, k.name)
		}
		seen[k.name] = true
		if k.field == nil && k.set == nil {
			t.Errorf("%s.%s: neither a field nor a setter", name, k.name)
			continue
		}
		if k.field != nil {
			p := reflect.ValueOf(k.field(probe)).Pointer()
			filled[p-reflect.ValueOf(base(probe)).Pointer()] = true
			if _, ok := k.field(probe).(*int); ok && k.set == nil && k.lo >= k.hi {
				t.Errorf("%s.%s: integer range %d..%d", name, k.name, k.lo, k.hi)
			}
		}
		if k.def != nil {
			var x T
			if err := k.assign(&x, tomlValue(k.def)); err != nil {
				t.Errorf("%s.%s: default %v refused: %v", name, k.name, k.def, err)
			}
		}
		// The setter exists for the field's type (assign panics otherwise).
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s.%s: %v", name, k.name, r)
				}
			}()
			var x T
			k.assign(&x, struct{}{})
		}()
	}
	derived := map[string]bool{"AgeOrder": true, "Line": true}
	for i := range st.NumField() {
		f := st.Field(i)
		if !f.IsExported() || derived[f.Name] {
			continue
		}
		if !filled[f.Offset] {
			t.Errorf("%s: field %s has no row in the key table", name, f.Name)
		}
	}
}

// SameAgent compares exactly the keys marked agent.
func TestSameAgent(t *testing.T) {
	c, err := Parse("t.toml", []byte(`[scheduler]
postoffice = "/p"
[[clause]]
select = "a/*"
command = "/bin/ta -c a"
[[clause]]
select = "b/*"
command = "/bin/ta -c a"
maxring = 3
interval = "1h"
[[clause]]
select = "c/*"
command = "/bin/ta -c a"
nice = 5
[[clause]]
select = "d/*"
command = "/bin/ta -c a"
user = "daemon"
[[clause]]
select = "e/*"
command = "/bin/ta -c e"
[[clause]]
select = "f/*"
command = "/bin/ta -c a"
stdio = "pipes"
`))
	if err != nil {
		t.Fatal(err)
	}
	a := &c.Clauses[0]
	for i, want := range []bool{true, true, false, false, false, false} {
		if got := SameAgent(a, &c.Clauses[i]); got != want {
			t.Errorf("SameAgent(a/*, %s) = %v, want %v", c.Clauses[i].Select, got, want)
		}
	}
}

func TestRestartKeys(t *testing.T) {
	got := map[string]bool{}
	for _, s := range RestartKeys() {
		got[s.Key] = s.Fixed
	}
	want := map[string]bool{"postoffice": true, "hash": true, "control_socket": false, "control_group": false,
		"control_listen": false, "notify_socket": false, "metrics_listen": false, "metrics_public": false}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RestartKeys = %v, want %v", got, want)
	}
	old := Scheduler{ControlSocket: "/a"}
	s := Scheduler{ControlSocket: "/b"}
	if v, _ := s.Value("control_socket"); v != "/b" {
		t.Errorf("Value = %q", v)
	}
	s.Keep("control_socket", &old)
	if s.ControlSocket != "/a" {
		t.Errorf("Keep: %q", s.ControlSocket)
	}
}

package agentbin

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The agents and a command are built once into one directory, run, and
// are gone after Remove; a package that does not build says why, each time.
func TestBuildOnceAndRemove(t *testing.T) {
	var s Set
	defer s.Remove()
	agents := s.AgentsFor(t)
	for _, name := range []string{"sink", "limited", "deferall", Script} {
		if fi, err := os.Stat(agents[name]); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s: %q: %v", name, agents[name], err)
		}
	}
	if _, ok := agents["testagents"]; ok {
		t.Error("the library package testagents made a program")
	}
	again := s.AgentsFor(t)
	fi1, _ := os.Stat(agents["sink"])
	fi2, _ := os.Stat(again["sink"])
	if !os.SameFile(fi1, fi2) {
		t.Error("the agents were built twice")
	}
	prog := s.ProgramFor(t, "zsched/cmd/scheduler")
	if out, err := exec.Command(prog, "version").CombinedOutput(); err != nil {
		t.Fatalf("%s version: %v\n%s", prog, err, out)
	}
	if _, err := s.Program("zsched/no/such/package"); err == nil || !strings.Contains(err.Error(), "no/such/package") {
		t.Errorf("a package that does not exist: %v", err)
	}
	dir, _ := s.Dir()
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Remove: %v", dir, err)
	}
}

// A Set told where to build builds there and keeps it.
func TestBuildInKeeps(t *testing.T) {
	in := t.TempDir() + "/bin"
	s := Set{In: in}
	p := s.ProgramFor(t, "zsched/testagents/sink")
	if p != in+"/sink" {
		t.Errorf("built %s, want %s/sink", p, in)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("Remove deleted a directory it was given: %v", err)
	}
}

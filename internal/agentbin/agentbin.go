// Package agentbin builds the module's programs that tests and the lab run
// as real processes: the test agents (testagents/...) and commands such as
// cmd/scheduler or cmd/smtp-ta. A Set builds each once, on first demand,
// into one temporary directory, and Remove deletes it: a test binary keeps
// one Set for its tests and removes it when TestMain's m.Run returns, the
// lab keeps one for a run. It is the one place outside the Makefile that
// runs `go build`; the libraries it builds from (testagents, ta) never do.
package agentbin

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// Script is the name under which Agents returns the shell agent, which is
// not built: it is testagents/agent.sh in the source tree.
const Script = "agent.sh"

// agentsPattern is every test agent's main package.
const agentsPattern = "zsched/testagents/..."

// Set is the programs built for one process. Its zero value is ready; it
// may be used from many goroutines (parallel tests).
type Set struct {
	// In is the directory to build into, kept by Remove (the lab's soak
	// keeps its programs beside its results); "" is a new temporary one,
	// which Remove deletes.
	In string

	mu     sync.Mutex
	dir    string
	root   string            // the module's root directory
	built  map[string]string // package → program
	failed map[string]error  // package → why it did not build: not retried
	agents map[string]string // name → program, once built
}

// TB is the part of testing.TB the *For helpers use.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// Dir is the directory the programs are built into, made on first use:
// every agent and program is there under its own name (put it on a
// script's PATH).
func (s *Set) Dir() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirLocked()
}

func (s *Set) dirLocked() (string, error) {
	if s.dir != "" {
		return s.dir, nil
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("agentbin: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("agentbin: the working directory is not inside the zsched module")
	}
	dir := s.In
	if dir == "" {
		dir, err = os.MkdirTemp("", "zsched-bin-")
	} else {
		dir, err = filepath.Abs(dir)
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
	}
	if err != nil {
		return "", fmt.Errorf("agentbin: %w", err)
	}
	s.dir, s.root = dir, filepath.Dir(gomod)
	return dir, nil
}

// Agents builds every test agent with one `go build` and returns each
// agent's name ("sink", "limited", …) mapped to its program, plus Script
// mapped to the shell agent. The map is the caller's.
func (s *Set) Agents() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agents == nil {
		if err := s.buildLocked(agentsPattern); err != nil {
			return nil, err
		}
		src := filepath.Join(s.root, "testagents")
		entries, err := os.ReadDir(src)
		if err != nil {
			return nil, fmt.Errorf("agentbin: %w", err)
		}
		agents := map[string]string{Script: filepath.Join(src, Script)}
		for _, e := range entries {
			// Only the directories that hold a main package made a program.
			p := filepath.Join(s.dir, e.Name())
			if fi, err := os.Stat(p); e.IsDir() && err == nil && fi.Mode().IsRegular() {
				agents[e.Name()] = p
			}
		}
		s.agents = agents
	}
	return maps.Clone(s.agents), nil
}

// Program builds the main package pkg, an import path ("zsched/cmd/smtp-ta")
// or a directory relative to the working directory ("./testdata/echoagent"
// or "." from a test), and returns its program: Dir()/ and the package's
// last element (the directory's name).
func (s *Set) Program(pkg string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.buildLocked(pkg); err != nil {
		return "", err
	}
	return s.built[pkg], nil
}

// buildLocked runs `go build -o Dir()/ pkg` once per package; a failure is
// remembered, not retried.
func (s *Set) buildLocked(pkg string) error {
	if _, ok := s.built[pkg]; ok {
		return nil
	}
	if err := s.failed[pkg]; err != nil {
		return err
	}
	dir, err := s.dirLocked()
	if err != nil {
		return err
	}
	target := pkg
	if strings.HasPrefix(pkg, ".") {
		// A directory: its program is named after it, "." too.
		if target, err = filepath.Abs(pkg); err != nil {
			return fmt.Errorf("agentbin: %w", err)
		}
	}
	out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), target).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("agentbin: go build %s: %w\n%s", pkg, err, out)
		if s.failed == nil {
			s.failed = map[string]error{}
		}
		s.failed[pkg] = err
		return err
	}
	if s.built == nil {
		s.built = map[string]string{}
	}
	s.built[pkg] = filepath.Join(dir, filepath.Base(strings.TrimSuffix(target, "/...")))
	return nil
}

// AgentsFor is Agents for a test: a build that fails fails it.
func (s *Set) AgentsFor(t TB) map[string]string {
	t.Helper()
	agents, err := s.Agents()
	if err != nil {
		t.Fatal(err)
	}
	return agents
}

// ProgramFor is Program for a test: a build that fails fails it.
func (s *Set) ProgramFor(t TB, pkg string) string {
	t.Helper()
	p, err := s.Program(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Remove deletes the temporary directory and every program in it (a
// directory In is kept). The Set builds again on demand.
func (s *Set) Remove() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dir == "" {
		return nil
	}
	var err error
	if s.In == "" {
		err = os.RemoveAll(s.dir)
	}
	s.dir, s.built, s.failed, s.agents = "", nil, nil, nil
	if err != nil {
		return fmt.Errorf("agentbin: %w", err)
	}
	return nil
}

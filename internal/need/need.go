// Package need decides what a test does when the machine lacks something
// it needs: root, a tmpfs mount, the postfix package, a program such as
// redis-server. On a developer's machine the test is skipped, saying what
// is missing; under CI (ZSCHED_CI=1, which .ci/run exports, running as root
// with those packages installed) it fails, so that a test CI was meant to
// exercise cannot pass by not running.
package need

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CIEnv is the variable .ci/run sets to 1.
const CIEnv = "ZSCHED_CI"

// CI reports whether the tests run under CI.
func CI() bool { return os.Getenv(CIEnv) == "1" }

// Met skips the test, or fails it under CI, when err is not nil: err says
// why what (a few words: "the postfix package") is missing.
func Met(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if CI() {
		t.Fatalf("needs %s, missing under %s=1: %v", what, CIEnv, err)
	}
	t.Skipf("needs %s: %v", what, err)
}

// Root: the test needs to run as root.
func Root(t testing.TB) {
	t.Helper()
	var err error
	if uid := os.Geteuid(); uid != 0 {
		err = fmt.Errorf("running as uid %d", uid)
	}
	Met(t, "root", err)
}

// Program: the test needs an executable, found in PATH unless name is a
// path. It returns the executable's path.
func Program(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Met(t, "the program "+name, err)
	return p
}

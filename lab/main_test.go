package lab

import (
	"os"
	"testing"

	"zsched/internal/agentbin"
)

// bins are the agents and commands this package's tests run: each built
// on the first test that asks, once, and removed when the tests are over.
var bins agentbin.Set

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

package need

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The helpers are run in a child test process, with and without
// ZSCHED_CI=1, against something that is surely missing.
func TestMissingSkipsOrFailsUnderCI(t *testing.T) {
	if os.Getenv("NEED_TEST_CHILD") == "1" {
		Program(t, "zsched-no-such-program")
		t.Log("went on past a missing program")
		return
	}
	for _, ci := range []string{"", "1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingSkipsOrFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "NEED_TEST_CHILD=1", CIEnv+"="+ci)
		out, err := cmd.CombinedOutput()
		s := string(out)
		if strings.Contains(s, "went on past") {
			t.Fatalf("%s=%q: the test went on:\n%s", CIEnv, ci, s)
		}
		switch {
		case ci == "" && (err != nil || !strings.Contains(s, "--- SKIP") || !strings.Contains(s, "zsched-no-such-program")):
			t.Fatalf("without CI: %v, want a skip naming the program:\n%s", err, s)
		case ci == "1" && (err == nil || !strings.Contains(s, "--- FAIL") || !strings.Contains(s, "missing under ZSCHED_CI=1")):
			t.Fatalf("under CI: %v, want a failure:\n%s", err, s)
		}
	}
}

func TestPresentPasses(t *testing.T) {
	if p := Program(t, "sh"); p == "" {
		t.Fatal("no path for sh")
	}
	Met(t, "nothing", nil)
}

package tacheck

import (
	"context"
	"testing"
	"time"

	"zsched/agent"
)

// An agent in pipes mode writes its own stderr on another stream, which
// may be read before protocol lines it wrote earlier (ZMailer's agents'
// "# sink: ..." on the way out): such a line is neither an answer nor the
// agent's exit, so the #resync behind it still counts.
func TestStderrIsNotTheExit(t *testing.T) {
	k := &kit{cfg: Config{Timeout: time.Minute}}
	c := newConv(context.Background(), k, agent.Pipes, t.TempDir())
	c.events <- agent.Event{Kind: agent.Stderr, Line: "# sink: ta: unsupported control file format"}
	c.events <- agent.Event{Kind: agent.Lingering, Line: "1"}
	c.events <- agent.Event{Kind: agent.Line, Line: "#resync 12345"}
	c.events <- agent.Event{Kind: agent.Exited}
	a, err := c.reply("job 12345", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.resyncs) != 1 || a.resyncs[0] != "12345" {
		t.Errorf("resyncs %q, want [12345]; transcript:\n%s", a.resyncs, c.tr.out)
	}
	if !c.exited {
		t.Error("the Exited event was not taken as the exit")
	}
}

package mailq

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"zsched/core"
)

// TestEntryLayout: `scheduler queue`'s lines as the daemon laid them out
// before they moved here, byte for byte (scripts read them).
func TestEntryLayout(t *testing.T) {
	u := time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		q    Message
		want string
	}{
		{Message{ID: "5308609.3kq7m2c", Path: "A/5308609", Arrival: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Size: 1234,
			Sender: "me@example.org", InCore: true, Recipients: []Rcpt{
				{Offset: 150, Address: "a@x.test", Channel: "smtp", Host: "x.test", State: StatePending},
				{Offset: 190, Address: "b@x.test", Channel: "smtp", Host: "x.test", State: StateDeferred, Until: &u, Attempts: 3,
					Reason: "deferred: its own retry time", Last: "421 busy \"now\""},
				{Offset: 230, Address: "c@y.test", Channel: "smtp", Host: "y.test", State: StateHeld, Reason: "held by operator"},
			}},
			"5308609.3kq7m2c            1234  2026-03-01T12:00:00Z  me@example.org\n    smtp/x.test\ta@x.test\tpending\tattempts=0\n    smtp/x.test\tb@x.test\tdeferred until 2026-03-01T12:30:00Z\tattempts=3\tlast=\"421 busy \\\"now\\\"\"\n    smtp/y.test\tc@y.test\theld\tattempts=0\t(held by operator)"},
		{Message{ID: "77.abc", Path: "77", Arrival: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC), Size: 7, Held: true},
			"77.abc                        7  2026-03-01T11:00:00Z  <>  [held]  [on disk]"},
	} {
		if got := Entry(&tt.q); got != tt.want {
			t.Errorf("Entry(%s):\n got %q\nwant %q", tt.q.ID, got, tt.want)
		}
	}
	if got, want := Total(3, 7, 2), "-- 3 messages, 7 recipients (in core: 2 messages; on disk only: 1)"; got != want {
		t.Errorf("Total: %q, want %q", got, want)
	}
}

// TestCountersLayout: SHOW COUNTERS as the daemon laid it out before it
// moved here: fixed names in a fixed order, then threads and agents by
// state; sessions_borrowed (feed = "message") came after
// queue_recipients, a name of its own that readers of the others skip.
func TestCountersLayout(t *testing.T) {
	var dispatch, wait, run core.Latency
	dispatch.Observe(3 * time.Millisecond)
	wait.Observe(time.Microsecond)
	run.Observe(40 * time.Microsecond)
	run.Observe(50 * time.Microsecond)
	s := CounterSet{
		Counters: core.Counters{Arrived: 10, Delivered: 7, Failed: 1, Deferred: 2, Expired: 3, Spawned: 4, AgentsEnded: 5, Killed: 6, Garbage: 8},
		Gauges:   core.Gauges{Messages: 11, Vertices: 12, Recipients: 13, Borrowed: 14, Agents: map[string]int{"idle": 2, "busy": 1}},
		Dispatch: &dispatch, Uptime: time.Hour + 2*time.Minute, ControlWait: &wait, ControlRun: &run,
	}
	s.Gauges.Threads[0] = 9
	want := []string{"messages_arrived 10", "recipients_delivered 7", "recipients_failed 1", "recipients_deferred 2",
		"recipients_expired 3", "agents_started 4", "agents_ended 5", "agents_killed 6", "agent_garbage_lines 8",
		"queue_messages 11", "queue_vertices 12", "queue_recipients 13", "sessions_borrowed 14", "dispatched 1",
		"dispatch_latency_p50 " + dispatch.Quantile(0.5).String(), "dispatch_latency_p99 " + dispatch.Quantile(0.99).String(),
		"uptime 1h2m", "control_commands 2", "control_wait_p50 1µs", "control_wait_p99 1µs",
		"control_run_p50 " + run.Quantile(0.5).String(), "control_run_p99 " + run.Quantile(0.99).String()}
	for i, st := range core.ThreadStates() {
		want = append(want, fmt.Sprintf("threads_%s %d", st, map[bool]int{true: 9}[i == 0]))
	}
	want = append(want, "agents_busy 1", "agents_idle 2")
	if got := Counters(s); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("SHOW COUNTERS:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

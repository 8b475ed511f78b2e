package sim

import (
	"fmt"
	"testing"
	"time"

	"zsched/config"
	"zsched/core"
)

func testConfig(t *testing.T, scheduler string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.toml", []byte("[scheduler]\npostoffice = \"/nonexistent\"\n"+scheduler+`
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
maxring = 10
maxthr = 3
`))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

// slow delivers everything after 10 s: messages stay in core a while.
func slow(j Job) Response {
	r := Sink(j)
	r.Delay = 10 * time.Second
	return r
}

// inCore counts the messages the simulation handed the core and did not
// see complete, and their recipients without a final outcome (agents mark
// the file when they take a job, so the marks do not tell).
func inCore(s *Sim) (msgs, rcpts int) {
	waiting := make(map[int64]bool, len(s.Waiting))
	for _, m := range s.Waiting {
		waiting[m.Inum] = true
	}
	final := make(map[int64]int)
	for _, o := range s.Outcomes {
		if o.Final() {
			final[o.Inum]++
		}
	}
	for inum, m := range s.Msgs {
		if waiting[inum] || s.Completed[inum] {
			continue
		}
		msgs++
		rcpts += len(m.Rcpts) - final[inum]
	}
	return msgs, rcpts
}

// TestAdmissionMessageLimit: the simulator admits messages as the daemon
// does (package admission): never more than message_active_limit in core;
// the rest wait on the simulated disk and are all delivered.
func TestAdmissionMessageLimit(t *testing.T) {
	s := New(testConfig(t, "message_active_limit = 3\n"), slow, 1)
	s.Check = true
	peak, held := 0, false
	s.OnReady = func(*core.Ready) {
		peak = max(peak, s.Core.Messages())
		held = held || len(s.Waiting) > 0
	}
	for i := range 12 {
		s.Enqueue(fmt.Sprintf("smtp/h%d.test/u", i%4))
		peak = max(peak, s.Core.Messages())
	}
	s.Run(time.Hour)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if peak != 3 || !held {
		t.Errorf("peak %d messages in core (waiting seen: %v), want 3 under message_active_limit 3", peak, held)
	}
	if len(s.Completed) != 12 || len(s.Pending()) != 0 || len(s.Waiting) != 0 {
		t.Errorf("%d of 12 messages completed, %d recipients pending, %d waiting", len(s.Completed), len(s.Pending()), len(s.Waiting))
	}
}

// TestAdmissionRecipientLimit: a message is admitted while the recipients
// in core are below recipient_active_limit, whole (DESIGN §8: a control file
// is read whole), so the core holds at most the limit plus one message's
// recipients less one; final outcomes make room.
func TestAdmissionRecipientLimit(t *testing.T) {
	const limit, size = 5, 3
	s := New(testConfig(t, fmt.Sprintf("recipient_active_limit = %d\n", limit)), slow, 1)
	s.Check = true
	peak, held := 0, false
	look := func() {
		_, n := inCore(s)
		peak = max(peak, n)
		held = held || len(s.Waiting) > 0
	}
	s.OnReady = func(*core.Ready) { look() }
	for i := range 10 {
		var rcpts []string
		for r := range size {
			rcpts = append(rcpts, fmt.Sprintf("smtp/h%d.test/u%d", (i+r)%4, r))
		}
		s.Enqueue(rcpts...)
		look()
	}
	s.Run(time.Hour)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if peak > limit-1+size || peak < limit || !held {
		t.Errorf("peak %d recipients in core (waiting seen: %v), want %d to %d under recipient_active_limit %d",
			peak, held, limit, limit-1+size, limit)
	}
	if len(s.Completed) != 10 || len(s.Pending()) != 0 || len(s.Waiting) != 0 {
		t.Errorf("%d of 10 messages completed, %d recipients pending, %d waiting", len(s.Completed), len(s.Pending()), len(s.Waiting))
	}
}

// TestRestartRunsTheStartupRead: a restart reads the queue under the
// startup read: the first batch spawns at most startup_maxring agents a
// ring, the next opens the ring to its maxring.
func TestRestartRunsTheStartupRead(t *testing.T) {
	c := testConfig(t, "startup_maxring = 2\n")
	// Agents that hang on their jobs: the restart finds every recipient
	// pending (their locks reset).
	s := New(c, func(Job) Response { return Response{Hang: true} }, 1)
	for i := range 8 {
		s.Add(&Msg{Rcpts: []*Rcpt{{Offset: 100, Channel: "smtp", Host: fmt.Sprintf("h%d.test", i), User: "u", Status: ' '}}})
	}
	var spawns []int
	s.OnReady = func(r *core.Ready) {
		if len(r.Spawns) > 0 {
			spawns = append(spawns, len(r.Spawns))
		}
	}
	s.Behavior = slow
	s.Restart(c, 2)
	if len(spawns) < 2 || spawns[0] != 2 || s.StartupEnd != "queue read" || s.Core.RingCap() != 0 {
		t.Fatalf("spawns per batch %v, startup read ended %q, ring cap %d: want 2 first, then more, ended by the queue read",
			spawns, s.StartupEnd, s.Core.RingCap())
	}
	s.Run(time.Hour)
	if err := s.Err(); err != nil || len(s.Pending()) != 0 {
		t.Fatalf("pending %v, error %v", s.Pending(), err)
	}
}

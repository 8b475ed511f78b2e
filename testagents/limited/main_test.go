package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"zsched/ctlfile"
	"zsched/internal/agentbin"
	"zsched/report"
)

func TestSlotsLimitAcrossHolders(t *testing.T) {
	// flock conflicts between open file descriptions, so two openSlots in
	// one process behave as two agent processes do.
	dir := t.TempDir()
	a, err := openSlots(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openSlots(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	var held []*slot
	for i := 0; i < 3; i++ {
		s := take(a)
		if s == nil {
			t.Fatalf("slot %d not free in an idle destination", i)
		}
		held = append(held, s)
	}
	if take(a) != nil || take(b) != nil {
		t.Fatal("a fourth session got a slot with the limit at 3")
	}
	release(held[1])
	if take(b) == nil {
		t.Fatal("a released slot was not free for another agent")
	}
	if take(a) != nil {
		t.Fatal("limit exceeded after a release and a take")
	}
}

// TestAgentRefusesWhenFull runs the real binary on a real control file:
// with every session held elsewhere the job is refused with deferall and
// its recipients stay pending; with a session free they are delivered.
func TestAgentRefusesWhenFull(t *testing.T) {
	var bins agentbin.Set
	defer bins.Remove()
	bin := bins.ProgramFor(t, ".")
	po := t.TempDir()
	sp := &ctlfile.Spool{Root: po, NoSync: true}
	if err := sp.Init(); err != nil {
		t.Fatal(err)
	}
	rel, err := sp.Enqueue(&ctlfile.Message{Sender: "s@example.org", Header: []byte("Subject: x"), Body: []byte("x\n"),
		Rcpts: []ctlfile.Address{{Channel: "smtp", Host: "limited.test", User: "a@limited.test"},
			{Channel: "smtp", Host: "limited.test", User: "b@limited.test"}}})
	if err != nil {
		t.Fatal(err)
	}
	slots := filepath.Join(t.TempDir(), "slots")
	logf := filepath.Join(t.TempDir(), "delivered")
	refusedf := filepath.Join(t.TempDir(), "refused")
	run := func() []report.Line {
		t.Helper()
		cmd := exec.Command(bin, "-c", "smtp", "-slots", slots, "-k", "2", "-d", "1ms", "-log", logf, "-refused", refusedf)
		cmd.Dir = sp.TransportDir()
		cmd.Stdin = strings.NewReader(rel + "\tlimited.test\n")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("limited: %v\n%s", err, out.String())
		}
		var ls []report.Line
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			if l := sc.Text(); !strings.HasPrefix(l, "#") && l != "" {
				r, err := report.Parse(l)
				if err != nil {
					t.Fatalf("bad report %q: %v", l, err)
				}
				ls = append(ls, r)
			}
		}
		return ls
	}
	pending := func() int {
		t.Helper()
		f, err := sp.Read(rel)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, g := range f.Groups() {
			n += len(g.Rcpts)
		}
		return n
	}

	mine, err := openSlots(slots, 2)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := take(mine), take(mine)
	if s1 == nil || s2 == nil {
		t.Fatal("could not hold the destination's two sessions")
	}
	ls := run()
	if len(ls) != 2 {
		t.Fatalf("%d reports for a refused job of 2 recipients: %v", len(ls), ls)
	}
	for _, l := range ls {
		if l.Status != report.DeferAll || !strings.Contains(l.Text, "421") {
			t.Fatalf("refused job reported %v %q, want deferall with a 421", l.Status, l.Text)
		}
	}
	if n := pending(); n != 2 {
		t.Fatalf("%d recipients pending after a refusal, want both", n)
	}

	release(s2)
	ls = run()
	if len(ls) != 2 || ls[0].Status != report.OK3 || ls[1].Status != report.OK3 {
		t.Fatalf("with a free session: %v, want two ok3", ls)
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d recipients pending after delivery", n)
	}
	b, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "\n"); got != 2 {
		t.Fatalf("delivery log has %d lines, want 2:\n%s", got, b)
	}
	// The refused job's two recipients, once each (the delivered ones
	// are not refusals).
	b, err = os.ReadFile(refusedf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); strings.Count(got, "\n") != 2 || !strings.Contains(got, " a@limited.test\n") ||
		!strings.Contains(got, " b@limited.test\n") {
		t.Fatalf("refusal log:\n%s\nwant a@ and b@ once each", got)
	}
}

// TestLimitFile: the limit follows the file a test rewrites, within 1..k,
// and falls back to k when the file says nothing usable.
func TestLimitFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "k")
	if n := limit(f, 10); n != 10 {
		t.Errorf("missing file: limit %d, want 10", n)
	}
	for _, tc := range []struct {
		text string
		want int
	}{{"5\n", 5}, {"10", 10}, {"11", 10}, {"0", 10}, {"five", 10}, {" 3 ", 3}} {
		if err := os.WriteFile(f, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if n := limit(f, 10); n != tc.want {
			t.Errorf("file %q: limit %d, want %d", tc.text, n, tc.want)
		}
	}
	if n := limit("", 7); n != 7 {
		t.Errorf("no file: limit %d, want 7", n)
	}
}

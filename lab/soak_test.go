package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zsched/ctlfile"
)

// The router writer's files are what ZMailer's router writes: a control
// file named after its body's inode, parsed by ctlfile as any other, its
// body offset pointing past the headers.
func TestWriteZMailerLayout(t *testing.T) {
	po := t.TempDir()
	for _, d := range []string{"queue", "transport"} {
		if err := os.Mkdir(filepath.Join(po, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	name, err := writeZMailer(po, "t", [][3]string{{"smtp", "a.test", "u1@a.test"}, {"dead", "b.test", "u2@b.test"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(po, "transport", name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ctlfile.Parse(name, data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if f.ID != name || len(f.Rcpts) != 2 || f.Rcpts[1].Channel != "dead" || f.Rcpts[1].Host != "b.test" || f.Rcpts[1].User != "u2@b.test" {
		t.Fatalf("parsed %+v", f)
	}
	body, err := os.ReadFile(filepath.Join(po, "queue", name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(body[f.BodyOffset:]), "A soak body.") {
		t.Fatalf("body offset %d points at %q", f.BodyOffset, body[f.BodyOffset:])
	}
	ents, _ := os.ReadDir(filepath.Join(po, "transport"))
	if len(ents) != 1 {
		t.Fatalf("transport/ holds %d entries, want the control file only", len(ents))
	}
	odd, err := writeZMailer(po, "o", [][3]string{{"smtp", "a.test", "u3@a.test"}}, ".tmp")
	if err != nil || !strings.HasSuffix(odd, ".tmp") {
		t.Fatalf("decoy %q: %v", odd, err)
	}
}

// tally: every recipient is counted once, in one column.
func TestTally(t *testing.T) {
	msgs := []*soakMsg{
		{name: "1", users: []string{"a", "b"}},          // a once, b twice
		{name: "2", users: []string{"c", "d"}},          // c never: gone → lost; d once
		{name: "3", users: []string{"e"}, killed: true}, // killed, never delivered: not lost
		{name: "4", users: []string{"f", "g"}},          // both queued, WHY knows them
		{name: "5", users: []string{"h"}},               // queued, unknown to the scheduler
		{name: "6", users: []string{"i"}},               // in bad/
		{name: "7", users: []string{"j"}, killed: true}, // killed after delivery: delivered
		{name: "8", users: []string{"k"}},               // no answer
	}
	deliveries := map[string]int{"a": 1, "b": 2, "d": 1, "j": 1}
	fates := map[string]msgFate{"2": fateGone, "4": fateWaiting, "5": fateStranded, "6": fateQuarantined, "8": fateUnanswered}
	asked := map[string]int{}
	got := tally(msgs, deliveries, func(m *soakMsg) msgFate { asked[m.name]++; return fates[m.name] })
	want := soakCounts{Delivered: 4, Duplicated: 1, Extra: 1, Lost: 1, Waiting: 2, Stranded: 1, Quarantined: 1, Unanswered: 1}
	if got != want {
		t.Fatalf("tally = %+v, want %+v", got, want)
	}
	for name, n := range asked {
		if n != 1 || fates[name] == 0 && name != "2" {
			t.Errorf("fate of %s asked %d times", name, n)
		}
	}
	if asked["3"] != 0 || asked["1"] != 0 {
		t.Error("fate asked for a message with nothing missing")
	}
}

func TestReadDeliveries(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte("12/115 a@x\n12/173 b@x\n13/115 a@x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := readDeliveries(p)
	if err != nil || d["a@x"] != 2 || d["b@x"] != 1 || len(d) != 2 {
		t.Fatalf("%v %v", d, err)
	}
}

// A message written the other way round: its control file is there before
// its body, which the returned rename puts where the control file says.
func TestWriteOrderedBodyLast(t *testing.T) {
	po := t.TempDir()
	for _, d := range []string{"queue", "transport"} {
		if err := os.Mkdir(filepath.Join(po, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	name, placeBody, err := writeOrdered(po, "t", [][3]string{{"smtp", "a.test", "u1@a.test"}}, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(po, "transport", name)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(po, "queue", name)); !os.IsNotExist(err) {
		t.Fatalf("the body is in place before its rename: %v", err)
	}
	if err := placeBody(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(po, "queue", name)); err != nil {
		t.Fatalf("the body after its rename: %v", err)
	}
}

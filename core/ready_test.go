package core_test

import (
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"zsched/core"
	"zsched/sim"
	"zsched/vertex"
)

// TestReadyReuse: a batch from Ready stays as it was while the caller
// carries it out, feeding the core the events that make the next batch;
// only the batch taken after Advance reuses its slices.
func TestReadyReuse(t *testing.T) {
	q := newQueue(t, "fifo", 5, 1, 1000)
	for range 20 {
		q.arrive()
	}
	q.now = q.now.Add(time.Microsecond)
	r := q.s.Ready()
	if len(r.Spawns) == 0 || len(r.Writes) == 0 {
		t.Fatalf("first batch: %d agents started, %d job lines", len(r.Spawns), len(r.Writes))
	}
	for _, sp := range r.Spawns {
		q.s.AgentLine(q.now, sp.Agent, "#hungry")
	}
	for batch := range 4 {
		spawns, writes := slices.Clone(r.Spawns), slices.Clone(r.Writes)
		outcomes := slices.Clone(r.Outcomes)
		for _, w := range writes {
			if w.Line != "#idle" {
				q.answer(w) // reports and #hungry: outcomes and job lines for the next batch
			}
		}
		if !reflect.DeepEqual(r.Spawns, spawns) || !reflect.DeepEqual(r.Writes, writes) || !reflect.DeepEqual(r.Outcomes, outcomes) {
			t.Fatalf("batch %d changed while carried out", batch)
		}
		q.s.Advance()
		r = q.s.Ready()
		if len(r.Outcomes) == 0 || len(r.Writes) == 0 {
			t.Fatalf("batch %d: %d outcomes, %d job lines", batch+1, len(r.Outcomes), len(r.Writes))
		}
		for _, o := range r.Outcomes {
			if o.Status != "ok3" || o.Path == "" || o.User == "" {
				t.Fatalf("batch %d: outcome %+v", batch+1, o)
			}
		}
	}
	q.s.Advance()
}

// TestReadyContract: misusing the batches is a broken invariant the core
// reports at once, as a panic naming the step: Ready twice without
// Advance, Advance without Ready, an event or Advance before the batch's
// re-reads were answered.
func TestReadyContract(t *testing.T) {
	crashed := func(c *core.Core, inum int64) {
		// An agent dies with a job outstanding: the batch asks for a
		// re-read of its file.
		if err := c.Arrive(sim.Epoch, core.Arrival{Inum: inum, Path: "1", Arrival: sim.Epoch,
			Groups: []core.Group{{Channel: "smtp", Host: "a.test", Rcpts: []vertex.Rcpt{{Offset: 100, User: "u"}}}}}); err != nil {
			t.Fatal(err)
		}
		id := c.Ready().Spawns[0].Agent
		c.AgentLine(sim.Epoch, id, "#hungry")
		c.Advance()
		c.Ready()
		c.AgentExited(sim.Epoch, id, "")
		c.Advance()
	}
	fresh := func() *core.Core { return core.New(cfg(t, smtp), nil, rand.New(rand.NewSource(1))) }
	for _, tc := range []struct {
		name, panic string
		misuse      func(c *core.Core)
	}{
		{"Ready twice", "Ready called again before Advance", func(c *core.Core) {
			c.Ready()
			c.Ready()
		}},
		{"Advance alone", "Advance without a batch", func(c *core.Core) { c.Advance() }},
		{"Advance twice", "Advance without a batch", func(c *core.Core) {
			c.Ready()
			c.Advance()
			c.Advance()
		}},
		{"event before the re-read", "Tick before the batch's re-reads were answered", func(c *core.Core) {
			crashed(c, 1)
			if r := c.Ready(); len(r.Rereads) != 1 {
				t.Fatalf("no re-read asked for: %+v", r)
			}
			c.Tick(sim.Epoch)
		}},
		{"Advance before the re-read", "Advance before the batch's re-reads were answered", func(c *core.Core) {
			crashed(c, 1)
			c.Ready()
			c.Advance()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				p, _ := recover().(string)
				if !strings.Contains(p, tc.panic) {
					t.Fatalf("panic %q, want one saying %q", p, tc.panic)
				}
			}()
			tc.misuse(fresh())
		})
	}

	// Answered, the same steps go on: events between Ready and Advance
	// are fine, their effects make the next batch.
	c := fresh()
	crashed(c, 1)
	r := c.Ready()
	c.Reread(sim.Epoch, r.Rereads[0].Inum, &core.Arrival{Inum: 1, Path: "1", Arrival: sim.Epoch,
		Groups: []core.Group{{Channel: "smtp", Host: "a.test", Rcpts: []vertex.Rcpt{{Offset: 100, User: "u"}}}}})
	c.Tick(sim.Epoch.Add(time.Hour))
	c.Advance()
	if !c.HasReady() {
		t.Fatal("the retry an hour later left nothing to do")
	}
	c.Ready()
	c.Advance()
}

// TestDestinationsChangesNothing: the getter returns the learned state
// without stale entries and forgets nothing; Tick forgets them.
func TestDestinationsChangesNothing(t *testing.T) {
	s := sim.New(cfg(t, smtp), refuse, 1)
	s.Enqueue("smtp/dead.test/u")
	s.Advance(time.Minute)
	s.Core.Kill(s.Now, "1001") // the thread goes; what it learned stays
	s.Advance(2 * time.Minute)
	if d := s.Core.Destinations(s.Now); len(d) != 1 {
		t.Fatalf("learned %+v, want dead.test", d)
	}
	late := s.Now.Add(30 * 24 * time.Hour)
	for range 2 {
		if d := s.Core.Destinations(late); len(d) != 0 {
			t.Fatalf("stale state returned: %+v", d)
		}
	}
	if d := s.Core.Destinations(s.Now); len(d) != 1 {
		t.Fatalf("a getter forgot learned state: %+v", d)
	}
	s.Enqueue("smtp/other.test/u") // the expiry sweep needs mail in core
	s.Do(func(time.Time) { s.Core.Tick(late) })
	if d := s.Core.Destinations(s.Now); len(d) != 0 {
		t.Fatalf("Tick kept stale state: %+v", d)
	}
}

package core_test

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestReadyReuse: a batch from Ready stays as it was while the caller
// carries it out, feeding the core the events that make the next batch;
// only the call of Ready after the next reuses its slices.
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
}

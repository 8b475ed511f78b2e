package core

import (
	"testing"

	"zsched/vertex"
)

// TestFifoMovesEntriesRarely feeds an agent's queue as a busy agent's is fed
// (overfeed 32: 33 lines outstanding, one answered and one written per
// #hungry) and checks that it stays first in, first out, allocates nothing
// once grown, keeps no answered job's vertex in its array, and moves its
// entries about once each rather than at every #hungry.
func TestFifoMovesEntriesRarely(t *testing.T) {
	const depth, rounds = 33, 10_000
	vs := make([]*vertex.Vertex, depth+rounds)
	for i := range vs {
		vs[i] = &vertex.Vertex{Attempts: int32(i)}
	}
	a := &agent{}
	for i := range depth {
		a.push(entry{kind: entryJob, v: vs[i]})
	}
	next, moves := 0, 0
	round := func(i int) {
		front := &a.fifo[1]
		e := a.pop()
		if e.v != vs[next] {
			t.Fatalf("popped job %d, want %d", e.v.Attempts, next)
		}
		next++
		a.push(entry{kind: entryJob, v: vs[depth+i]})
		if &a.fifo[0] != front {
			moves++
		}
	}
	allocs := testing.AllocsPerRun(rounds/2, func() { round(next) })
	for next < rounds {
		round(next)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per round, want 0", allocs)
	}
	// The queue's entries move once per half array's pops: a quarter of the
	// rounds is a generous bound (a shift at each pop moves at every round).
	if moves > rounds/4 {
		t.Errorf("the queue's front moved in %d of %d rounds", moves, rounds)
	}
	if len(a.fifo) != depth {
		t.Fatalf("%d lines outstanding, want %d", len(a.fifo), depth)
	}
	for i, e := range a.fifo {
		if e.v != vs[next+i] {
			t.Fatalf("line %d is job %d, want %d", i, e.v.Attempts, next+i)
		}
	}
	live := map[*vertex.Vertex]bool{}
	for _, e := range a.fifo {
		live[e.v] = true
	}
	for i, e := range a.fifoBase[:cap(a.fifoBase)] {
		if e.v != nil && !live[e.v] {
			t.Errorf("slot %d of the array keeps answered job %d", i, e.v.Attempts)
		}
	}
}

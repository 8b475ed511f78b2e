package ring

import (
	"fmt"
	"testing"
	"time"

	"zsched/thread"
	"zsched/vertex"
)

// TestIndexWaitsForAQuery: jobs too small to be preempted never make the
// ring query its candidate index, so feeding them re-files nothing (the
// index is brought up to date when asked), the dirty list does not keep
// freed jobs alive, and the index is exact whenever it is asked.
func TestIndexWaitsForAQuery(t *testing.T) {
	r := New(Key{Channel: "smtp"}, false)
	r.SetOrder(true, Preemption{Cost: 5, MinSlots: 3})
	now := time.Unix(1_700_000_000, 0)
	var ths []*thread.Thread
	for h := range 10 {
		ths = append(ths, thread.New(thread.Key{Channel: "smtp", Host: fmt.Sprint("h", h)}, thread.Window{Concurrency: 1, Max: 1}))
	}
	var vs []*vertex.Vertex
	for i := range 2000 {
		m := &vertex.Message{Seq: uint64(i + 1), Inum: int64(i + 1)}
		for k := range 2 {
			th := ths[(2*i+k)%len(ths)]
			v := vertex.New(m, &th.Key, []vertex.Rcpt{{Offset: int64(k)}})
			m.Vertices = append(m.Vertices, v)
			r.AddEntry(v, now)
			th.Add(v, now)
			vs = append(vs, v)
		}
	}
	// Feed and finish the first half, as the core does; every pick makes
	// its preemption attempt, and none can query (2 entries < 3 × 5).
	for _, v := range vs[:2000] {
		if r.Preempt(now, nopPicker{}) {
			t.Fatal("a job of 2 entries preempted")
		}
		v.Dequeue()
		r.Select(v)
		Leave(v)
		v.Unlink()
	}
	js := &r.jobs
	if js.root != nil {
		t.Error("the index was built though nothing asked for it")
	}
	if len(js.dirty) > r.Jobs()+r.Jobs()/8+128 {
		t.Errorf("the dirty list holds %d jobs for %d live", len(js.dirty), r.Jobs())
	}
	// Asked now, it holds exactly the eligible jobs with exact keys.
	if err := r.CheckJobs(); err != nil {
		t.Fatal(err)
	}
	if js.root == nil {
		t.Fatal("the index is empty with jobs queued")
	}
}

type nopPicker struct{}

func (nopPicker) Open(*vertex.Vertex) bool { return true }
func (nopPicker) Moved(*vertex.Vertex)     {}

package vertex

import (
	"math/rand"
	"sort"
	"testing"
	"time"
)

// TestHeapAgainstSort drives the heap with random pushes, pops, removals and
// key changes and checks every pop against a sorted reference.
func TestHeapAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	m := &Message{Seq: 1}
	h := NewHeap(ByRank)
	var ref []*Vertex
	for step := 0; step < 20000; step++ {
		switch op := rng.Intn(10); {
		case op < 5:
			v := New(m, 0, "smtp", "h", []Rcpt{{Offset: int64(step)}})
			v.Rank = float64(rng.Intn(100))
			h.Push(v)
			ref = append(ref, v)
		case op < 7 && len(ref) > 0:
			i := rng.Intn(len(ref))
			v := ref[i]
			h.Remove(v)
			if v.Queued() {
				t.Fatal("removed vertex still queued")
			}
			ref = append(ref[:i], ref[i+1:]...)
		case op < 8 && len(ref) > 0:
			v := ref[rng.Intn(len(ref))]
			v.Rank = float64(rng.Intn(100))
			h.Fix(v)
		default:
			sort.Slice(ref, func(i, j int) bool { return ByRank(ref[i], ref[j]) })
			got := h.Pop()
			if len(ref) == 0 {
				if got != nil {
					t.Fatal("pop from an empty heap returned a vertex")
				}
				continue
			}
			if got != ref[0] {
				t.Fatalf("step %d: popped rank %v offset %d, want rank %v offset %d",
					step, got.Rank, got.Rcpts[0].Offset, ref[0].Rank, ref[0].Rcpts[0].Offset)
			}
			ref = ref[1:]
		}
		if h.Len() != len(ref) {
			t.Fatalf("heap holds %d, reference %d", h.Len(), len(ref))
		}
	}
}

func TestByTimeThenRank(t *testing.T) {
	m := &Message{Seq: 1}
	at := time.Unix(100, 0)
	a := New(m, 0, "c", "h", []Rcpt{{Offset: 1}})
	b := New(m, 0, "c", "h", []Rcpt{{Offset: 2}})
	a.NotBefore, b.NotBefore = at.Add(time.Second), at
	if !ByTime(b, a) || ByTime(a, b) {
		t.Fatal("ByTime does not put the earlier retry first")
	}
	b.NotBefore = a.NotBefore
	a.Rank, b.Rank = 2, 1
	if !ByTime(b, a) {
		t.Fatal("equal times are not ordered by rank")
	}
}

func TestFindAndDrop(t *testing.T) {
	m := &Message{Pending: 3}
	v := New(m, 0, "c", "h", []Rcpt{{Offset: 300}, {Offset: 100}, {Offset: 200}})
	m.Vertices = []*Vertex{v}
	i, ok := v.Find(200)
	if !ok || i != 1 {
		t.Fatalf("Find(200) = %d, %v", i, ok)
	}
	if _, ok := v.Find(150); ok {
		t.Fatal("found a recipient that is not there")
	}
	if r := v.Drop(i); r.Offset != 200 || m.Pending != 2 || len(v.Rcpts) != 2 {
		t.Fatalf("Drop: %+v, pending %d", r, m.Pending)
	}
	v.Unlink()
	if len(m.Vertices) != 0 {
		t.Fatal("Unlink left the vertex in its message")
	}
}

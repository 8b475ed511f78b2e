package vertex

import (
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"
	"unsafe"
)

var dest = &Dest{Channel: "smtp", Host: "h"}

// TestHeapAgainstSort drives both heap orders with random pushes, pops,
// removals, key changes and relabellings and checks every pop against a
// sorted reference, and the heap's own invariants after every step.
//
// "random" pushes keys at random (most go to the 4-ary heap); "rising"
// pushes mostly after everything queued, as FIFO arrivals and retry times
// do (most go to the run), with removals that leave holes in it.
func TestHeapAgainstSort(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	for _, o := range []Order{ByRankOrder, ByTimeOrder} {
		for _, rising := range []bool{false, true} {
			name := o.String() + "/random"
			if rising {
				name = o.String() + "/rising"
			}
			t.Run(name, func(t *testing.T) { heapAgainstSort(t, o, rising, base) })
		}
	}
}

func heapAgainstSort(t *testing.T, o Order, rising bool, base time.Time) {
	rng := rand.New(rand.NewSource(1))
	less := ByRank
	if o == ByTimeOrder {
		less = ByTime
	}
	m := &Message{Seq: 1}
	h := NewHeap(o)
	var ref []*Vertex
	inRun := 0
	for step := 0; step < 20000; step++ {
		switch op := rng.Intn(11); {
		case op < 5:
			v := New(m, dest, []Rcpt{{Offset: int64(step)}})
			v.Rank = float64(rng.Intn(100) - 50)
			v.SetDue(base.Add(time.Duration(rng.Intn(20)) * time.Second))
			if rising && rng.Intn(10) > 0 {
				v.Rank = float64(step)
				v.SetDue(base.Add(time.Duration(step) * time.Second))
			}
			h.Push(v)
			if v.inRun {
				inRun++
			}
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
			v.Rank = float64(rng.Intn(100) - 50)
			h.Fix(v)
		case op < 9 && len(ref) > 0:
			// SetDue keeps a time heap in order by itself.
			ref[rng.Intn(len(ref))].SetDue(base.Add(time.Duration(rng.Intn(20)) * time.Second))
		case op < 10:
			// An order-preserving renumbering: every rank one more.
			h.Each(func(v *Vertex) { v.Relabel(v.Rank + 1) })
		default:
			sort.Slice(ref, func(i, j int) bool { return less(ref[i], ref[j]) })
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
		if err := h.Check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if rising && inRun < 5000 {
		t.Errorf("only %d of the pushes went to the run", inRun)
	}
}

// TestHeapRunHoles empties a long run from the middle and the back, which
// leaves holes and makes it compact, and checks the order after each step.
func TestHeapRunHoles(t *testing.T) {
	h := NewHeap(ByRankOrder)
	m := &Message{Seq: 1}
	var vs []*Vertex
	for i := range 1000 {
		v := New(m, dest, []Rcpt{{Offset: int64(i)}})
		v.Rank = float64(i)
		h.Push(v)
		vs = append(vs, v)
	}
	rng := rand.New(rand.NewSource(2))
	for _, i := range rng.Perm(len(vs))[:990] {
		h.Remove(vs[i])
		if err := h.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if h.Len() != 10 || len(h.run) >= 1024 {
		t.Fatalf("%d left in a run of %d places", h.Len(), len(h.run))
	}
	prev := -1.0
	for v := h.Pop(); v != nil; v = h.Pop() {
		if v.Rank <= prev {
			t.Fatalf("popped %v after %v", v.Rank, prev)
		}
		prev = v.Rank
	}
}

// TestHeapCheckFindsStaleKey: a rank changed behind the heap's back is
// what Check is there to catch.
func TestHeapCheckFindsStaleKey(t *testing.T) {
	h := NewHeap(ByRankOrder)
	m := &Message{Seq: 1}
	v := New(m, dest, []Rcpt{{Offset: 1}})
	h.Push(v)
	h.Push(New(m, dest, []Rcpt{{Offset: 2}}))
	v.Rank = 7
	if h.Check() == nil {
		t.Fatal("Check accepted a stale key")
	}
	v.Fix()
	if err := h.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestRankKeyOrder(t *testing.T) {
	fs := []float64{-1e300, -3, -1, -0.5, 0, 0.25, 1, 3, 1 << 50, 1e300}
	for i := 1; i < len(fs); i++ {
		if !(rankKey(fs[i-1]) < rankKey(fs[i])) {
			t.Errorf("rankKey(%v) >= rankKey(%v)", fs[i-1], fs[i])
		}
	}
	if negZero := math.Copysign(0, -1); rankKey(negZero) != rankKey(0) {
		t.Error("-0 and 0 have different keys")
	}
}

func TestByTimeThenRank(t *testing.T) {
	m := &Message{Seq: 1}
	at := time.Unix(100, 0)
	a := New(m, dest, []Rcpt{{Offset: 1}})
	b := New(m, dest, []Rcpt{{Offset: 2}})
	a.SetDue(at.Add(time.Second))
	b.SetDue(at)
	if !ByTime(b, a) || ByTime(a, b) {
		t.Fatal("ByTime does not put the earlier retry first")
	}
	b.SetDue(a.Due())
	a.Rank, b.Rank = 2, 1
	if !ByTime(b, a) {
		t.Fatal("equal times are not ordered by rank")
	}
}

func TestDue(t *testing.T) {
	v := New(&Message{}, dest, []Rcpt{{Offset: 1}})
	now := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	if !v.Due().IsZero() || v.DueAfter(now) {
		t.Fatal("a new vertex is not due at once")
	}
	v.SetDue(now.Add(time.Minute))
	if !v.DueAfter(now) || v.DueAfter(now.Add(time.Minute)) {
		t.Fatal("DueAfter is wrong around the retry time")
	}
	if !v.Due().Equal(now.Add(time.Minute)) {
		t.Fatalf("Due() = %v, want %v", v.Due(), now.Add(time.Minute))
	}
	v.SetDue(time.Time{})
	if !v.Due().IsZero() {
		t.Fatal("SetDue(zero) did not clear the time")
	}
}

// TestVertexSize guards the size the memory budget rests on (DESIGN §8):
// 144 bytes, one of the allocator's size classes, with one recipient
// inline (a vertex without it would be 112 plus a 32-byte array).
func TestVertexSize(t *testing.T) {
	var v Vertex
	if n := unsafe.Sizeof(v); n > 144 {
		t.Errorf("Vertex is %d bytes, budget 144", n)
	}
	// What feeding touches stays at the front (see Vertex).
	if end := unsafe.Offsetof(v.Attempts) + unsafe.Sizeof(v.Attempts); end > 72 {
		t.Errorf("the fields feeding touches end at byte %d, budget 72", end)
	}
}

// TestNewCopiesRcpts: the vertex owns its recipients, one inline.
func TestNewCopiesRcpts(t *testing.T) {
	in := []Rcpt{{Offset: 300}, {Offset: 100}}
	v := New(&Message{}, dest, in)
	if in[0].Offset != 300 || v.Rcpts[0].Offset != 100 || v.Rcpts[1].Offset != 300 {
		t.Fatalf("New sorted the caller's slice or not its own: %v, %v", in, v.Rcpts)
	}
	one := []Rcpt{{Offset: 7, User: "u"}}
	w := New(&Message{Pending: 1}, dest, one)
	one[0].Offset = 8
	if w.Rcpts[0].Offset != 7 || &w.Rcpts[0] != &w.one[0] {
		t.Fatal("a single recipient is not held inline")
	}
	if w.Drop(0).User != "u" || len(w.Rcpts) != 0 {
		t.Fatal("Drop of the inline recipient")
	}
}

func TestFindAndDrop(t *testing.T) {
	m := &Message{Pending: 3}
	v := New(m, dest, []Rcpt{{Offset: 300}, {Offset: 100}, {Offset: 200}})
	m.Vertices = []*Vertex{v}
	i, ok := v.Find(200)
	if !ok || i != 1 {
		t.Fatalf("Find(200) = %d, %v", i, ok)
	}
	for _, off := range []int64{50, 150, 250, 350} {
		if _, ok := v.Find(off); ok {
			t.Fatalf("found a recipient at %d that is not there", off)
		}
	}
	if r := v.Drop(i); r.Offset != 200 || m.Pending != 2 || len(v.Rcpts) != 2 {
		t.Fatalf("Drop: %+v, pending %d", r, m.Pending)
	}
	v.Unlink()
	if len(m.Vertices) != 0 {
		t.Fatal("Unlink left the vertex in its message")
	}
}

// TestMessageSize: a message is paid once per control file in core; 128
// bytes is an allocator size class. (112 until issue 17 gave each message
// its queue id, QID: 16 bytes more per message, none per recipient.)
func TestMessageSize(t *testing.T) {
	if n := unsafe.Sizeof(Message{}); n > 128 {
		t.Errorf("Message is %d bytes, budget 128", n)
	}
}

func TestFirstBefore(t *testing.T) {
	m := &Message{Seq: 1}
	a, b := NewHeap(ByRankOrder), NewHeap(ByRankOrder)
	for i, r := range []float64{5, 3, 9} {
		v := New(m, dest, []Rcpt{{Offset: int64(i)}})
		v.Rank = r
		a.Push(v)
	}
	w := New(m, dest, []Rcpt{{Offset: 10}})
	w.Rank = 4
	b.Push(w)
	if FirstBefore(&b, &a) || !FirstBefore(&a, &b) {
		t.Fatal("FirstBefore does not compare the first vertices")
	}
	w.Rank = 3
	w.Fix()
	// Equal ranks: the full order (same message, lower offset first).
	if !FirstBefore(&a, &b) || FirstBefore(&b, &a) {
		t.Fatal("FirstBefore breaks a tie unlike ByRank")
	}
}

package vertex

import (
	"math/rand"
	"strconv"
	"testing"
)

// BenchmarkHeap measures the feed heap's two hot operations at sizes a
// thread sees: a Push of a new or returning vertex and a Pop of the best
// (one feed), the heap kept at its size. Flat costs mean O(log n) holds.
func BenchmarkHeap(b *testing.B) {
	for _, n := range []int{100, 10_000, 1_000_000} {
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			h := NewHeap(ByRank)
			m := &Message{}
			pool := make([]*Vertex, n+1)
			for i := range pool {
				v := New(m, 0, "smtp", "h", []Rcpt{{Offset: int64(i)}})
				v.Rank = rng.Float64()
				pool[i] = v
			}
			for _, v := range pool[:n] {
				h.Push(v)
			}
			spare := pool[n]
			b.ResetTimer()
			for range b.N {
				spare.Rank = rng.Float64()
				h.Push(spare)
				spare = h.Pop()
			}
		})
	}
}

// BenchmarkHeapRemove measures taking a vertex out of the middle (a
// message dropped, a vertex expired) and putting it back.
func BenchmarkHeapRemove(b *testing.B) {
	const n = 100_000
	rng := rand.New(rand.NewSource(1))
	h := NewHeap(ByTime)
	m := &Message{}
	vs := make([]*Vertex, n)
	for i := range vs {
		v := New(m, 0, "smtp", "h", []Rcpt{{Offset: int64(i)}})
		v.Rank = rng.Float64()
		vs[i] = v
		h.Push(v)
	}
	b.ResetTimer()
	for i := range b.N {
		v := vs[i%n]
		h.Remove(v)
		h.Push(v)
	}
}

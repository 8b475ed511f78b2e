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
			h := NewHeap(ByRankOrder)
			m := &Message{}
			pool := make([]*Vertex, n+1)
			for i := range pool {
				v := New(m, dest, []Rcpt{{Offset: int64(i)}})
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
	h := NewHeap(ByTimeOrder)
	m := &Message{}
	vs := make([]*Vertex, n)
	for i := range vs {
		v := New(m, dest, []Rcpt{{Offset: int64(i)}})
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

// BenchmarkHeapFeed is the dispatch benchmark's heap traffic: a thousand
// thread heaps of n/1000 vertices each, fed in FIFO order (every push
// ranks after everything queued) and popped in turn across the threads,
// so that with a million vertices queued every heap touched is cold.
func BenchmarkHeapFeed(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			const threads = 1000
			rng := rand.New(rand.NewSource(1))
			hs := make([]Heap, threads)
			m := &Message{}
			rank := 0.0
			for i := range hs {
				hs[i] = NewHeap(ByRankOrder)
			}
			for i := 0; i < n; i++ {
				v := New(m, dest, []Rcpt{{Offset: int64(i)}})
				rank++
				v.Rank = rank
				hs[rng.Intn(threads)].Push(v)
			}
			b.ResetTimer()
			for i := range b.N {
				h := &hs[(i*7919)%threads]
				v := h.Pop()
				if v == nil {
					continue
				}
				rank++
				v.Rank = rank
				hs[rng.Intn(threads)].Push(v)
			}
		})
	}
}

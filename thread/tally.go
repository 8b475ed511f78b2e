package thread

import (
	"container/heap"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Tally is what the operator views show of a thread's queue without
// walking its vertices: its pending recipients, by the arrival second of
// their message. The core keeps it as vertices join and leave the thread
// and as recipients leave their vertex, so that mailq's R= and QA=, the
// queue gauges and qshape cost a look at each thread, not at each
// recipient (issue 9: mailq answers in milliseconds with a million
// recipients in core). A message without an arrival time counts in
// Recipients only.
//
// Ages is a map from Unix second to recipients; Oldest keeps a min-heap of
// its keys, cleaned lazily, so adding a second not yet seen costs O(log k)
// for k distinct seconds, every other change O(1).
type Tally struct {
	Recipients int

	ages   map[int64]int32
	oldest secondHeap // keys of ages, and stale keys Oldest has not popped yet
}

// Add counts n recipients of a message that arrived at arrival.
func (t *Tally) Add(arrival time.Time, n int) {
	if n <= 0 {
		return
	}
	t.Recipients += n
	if arrival.IsZero() {
		return
	}
	s := arrival.Unix()
	if t.ages == nil {
		t.ages = make(map[int64]int32)
	}
	if t.ages[s] == 0 {
		heap.Push(&t.oldest, s)
	}
	t.ages[s] += int32(n)
}

// Remove un-counts n recipients of a message that arrived at arrival: they
// were delivered, failed, expired or dropped, or their vertex left the
// thread.
func (t *Tally) Remove(arrival time.Time, n int) {
	if n <= 0 {
		return
	}
	t.Recipients -= n
	if arrival.IsZero() {
		return
	}
	s := arrival.Unix()
	if c := t.ages[s] - int32(n); c > 0 {
		t.ages[s] = c
	} else {
		delete(t.ages, s)
	}
	// Stale keys are popped when they reach the top; a heap mostly stale
	// (new seconds that came and went behind an old one) is rebuilt.
	if len(t.oldest) > 2*len(t.ages)+32 {
		t.oldest = slices.AppendSeq(t.oldest[:0], maps.Keys(t.ages))
		heap.Init(&t.oldest)
	}
}

// Oldest returns the arrival second of the oldest message with a pending
// recipient in the thread, zero when none has an arrival time.
func (t *Tally) Oldest() time.Time {
	for len(t.oldest) > 0 {
		if s := t.oldest[0]; t.ages[s] > 0 {
			return time.Unix(s, 0)
		}
		heap.Pop(&t.oldest)
	}
	return time.Time{}
}

// Each calls fn for every arrival second with pending recipients, in no
// particular order.
func (t *Tally) Each(fn func(arrival time.Time, rcpts int)) {
	for s, n := range t.ages {
		fn(time.Unix(s, 0), int(n))
	}
}

// Equal reports how t differs from a recount u of the thread's recipients;
// nil when it does not.
func (t *Tally) Equal(u *Tally) error {
	if t.Recipients != u.Recipients {
		return fmt.Errorf("thread: tally counts %d recipients, the vertices hold %d", t.Recipients, u.Recipients)
	}
	if !maps.Equal(t.ages, u.ages) {
		return fmt.Errorf("thread: tally has %d arrival seconds, the vertices %d, or their counts differ", len(t.ages), len(u.ages))
	}
	if !t.Oldest().Equal(u.Oldest()) {
		return fmt.Errorf("thread: tally's oldest arrival %v, the vertices' %v", t.Oldest(), u.Oldest())
	}
	return nil
}

// secondHeap is a min-heap of Unix seconds (container/heap).
type secondHeap []int64

func (h secondHeap) Len() int           { return len(h) }
func (h secondHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h secondHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *secondHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *secondHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

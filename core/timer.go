package core

import (
	"time"

	"zsched/thread"
)

// timerHeap is a min-heap of threads by Wake: the agenda. A thread is in it
// exactly while it has a future time of interest (back-off end or a waiting
// vertex), so popping due threads is O(log n) each and nothing is scanned.
type timerHeap []*thread.Thread

// set moves t to wake at w; a zero w takes it out.
func (h *timerHeap) set(t *thread.Thread, w time.Time) {
	switch {
	case w.IsZero() && t.WakeIndex >= 0:
		h.remove(t.WakeIndex)
		t.Wake = time.Time{}
	case w.IsZero():
	case t.WakeIndex >= 0:
		if w.Equal(t.Wake) {
			return
		}
		t.Wake = w
		if !h.down(t.WakeIndex) {
			h.up(t.WakeIndex)
		}
	default:
		t.Wake = w
		t.WakeIndex = len(*h)
		*h = append(*h, t)
		h.up(t.WakeIndex)
	}
}

func (h timerHeap) less(i, j int) bool { return h[i].Wake.Before(h[j].Wake) }

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].WakeIndex = i
	h[j].WakeIndex = j
}

func (h timerHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h timerHeap) down(i0 int) bool {
	i, n := i0, len(h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && h.less(k, j) {
			j = k
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

func (h *timerHeap) remove(i int) {
	old := *h
	n := len(old) - 1
	t := old[i]
	if i != n {
		old.swap(i, n)
	}
	old[n] = nil
	*h = old[:n]
	t.WakeIndex = -1
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

package core

// An agent's outstanding lines are a queue: fed at the back (push), answered
// by #hungry at the front (pop). fifo is the queue, a window of the array
// fifoBase starts; pop moves the window's start on, push moves the window
// back to the array's start once it reaches the array's end with half the
// array free before it. Each entry is so copied about once instead of once
// per #hungry, as a shift to the front did (overfeed+1 entries of 88 bytes,
// each pointer with a write barrier while the collector runs: 2 % of the
// loop at overfeed 32), and the array is not given up as a plain reslice at
// the front would (which allocated anew every few jobs).

// push appends e to a's queue.
func (a *agent) push(e entry) {
	if n := len(a.fifo); n == cap(a.fifo) && n <= cap(a.fifoBase)/2 {
		copy(a.fifoBase[:n], a.fifo)
		// What was copied stays behind in the slots after the window:
		// cleared, so that no finished job's vertex is kept alive.
		clear(a.fifoBase[n:cap(a.fifoBase)])
		a.fifo = a.fifoBase[:n]
	}
	c := cap(a.fifo)
	a.fifo = append(a.fifo, e)
	if cap(a.fifo) != c {
		// A new array (full, or the first): the window starts it.
		a.fifoBase = a.fifo[:0]
	}
}

// pop removes and returns the front of a's queue, which is not empty.
func (a *agent) pop() entry {
	e := a.fifo[0]
	a.fifo[0] = entry{}
	a.fifo = a.fifo[1:]
	if len(a.fifo) == 0 {
		a.fifo = a.fifoBase[:0]
	}
	return e
}

// dropFifo forgets a's queue.
func (a *agent) dropFifo() { a.fifo, a.fifoBase = nil, nil }

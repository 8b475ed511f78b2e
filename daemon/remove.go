package daemon

import (
	"errors"
	"path"
	"sync"
	"time"

	"zsched/ctlfile"

	"github.com/hashicorp/go-hclog"
)

// remover unlinks the files of completed messages on goroutines of its
// own. Two unlinks per message (control file and body) were the largest
// single cost left on Run's goroutine, which every agent waits on; here
// they overlap with the loop's work.
//
// A completed message's name is in the intake's removing set until its
// files are gone, so that a scan in between cannot read the finished file
// as a new arrival. Run's goroutine learns of removals through done.
//
// Each worker records the batch it removes in a removal log of its own
// (ctlfile.RemovalLog: two small writes a batch), so that a stop between a
// message's two unlinks leaves no body the next start cannot remove at
// once (Run: ctlfile.Spool.FinishRemovals).
//
// A file that cannot be removed is logged once, then once an hour with
// how many times it failed meanwhile (rateLog): the next scan finds a
// control file that could not be removed and completes it again, and the
// same error would otherwise be logged at every scan.
type remover struct {
	spool *ctlfile.Spool
	log   hclog.Logger
	// rm removes a message's files: spool.Remove; tests inject failures.
	rm    func(ctlfile.Files) error
	now   func() time.Time
	noise *rateLog

	mu      sync.Mutex
	queue   []ctlfile.Files // waiting for a worker
	removed []string        // removed (or failed), not yet taken by Run
	closed  bool

	wake chan struct{} // work to take (capacity 1); closed by close
	done chan struct{} // removals to take (capacity 1)
	exit chan struct{} // closed when the goroutine has returned

	pending int // handed over and not yet taken back; Run's goroutine only
}

func newRemover(spool *ctlfile.Spool, log hclog.Logger, now func() time.Time, noise *rateLog) *remover {
	r := &remover{
		spool: spool,
		log:   log,
		rm:    spool.Remove,
		now:   now,
		noise: noise,
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}, 1),
		exit:  make(chan struct{}),
	}
	go r.run()
	return r
}

// remove queues a completed message's files. Run's goroutine only.
func (r *remover) remove(m ctlfile.Files) {
	r.pending++
	r.mu.Lock()
	r.queue = append(r.queue, m)
	poke(r.wake)
	r.mu.Unlock()
}

// take returns the names removed since the last call. Run's goroutine only.
func (r *remover) take() []string {
	r.mu.Lock()
	out := r.removed
	r.removed = nil
	r.mu.Unlock()
	r.pending -= len(out)
	return out
}

// idle reports whether every queued removal has been taken back.
func (r *remover) idle() bool { return r.pending == 0 }

// close stops the goroutines and waits for them. With all, every queued
// removal is done first (a drain leaves an empty queue); otherwise what is
// still queued stays on disk: the next start reads those files, finds
// nothing pending and removes them then. A big backlog of unlinks must not
// hold up a stop.
func (r *remover) close(all bool) {
	r.mu.Lock()
	r.closed = true
	left := 0
	if !all {
		left = len(r.queue)
		r.queue = nil
	}
	close(r.wake) // under mu: no worker pokes it after this
	r.mu.Unlock()
	<-r.exit
	if left > 0 {
		r.log.Info("completed messages left for the next start to remove", "messages", left)
	}
}

// removeWorkers is how many unlinks run at once. An unlink waits on the
// filesystem's journal; several in flight (in different hash directories)
// share its commits.
const removeWorkers = 4

func (r *remover) run() {
	asHelper()
	defer close(r.exit)
	var wg sync.WaitGroup
	for w := range removeWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			log, err := r.spool.OpenRemovalLog(w)
			if err != nil {
				// Without it a stop between two unlinks leaves a body
				// for the hourly sweep.
				r.log.Warn("removing without a removal log", "error", err)
				log = nil
			} else {
				defer log.Close()
			}
			r.work(log)
		}()
	}
	wg.Wait()
}

// work takes batches of removals until the remover is closed and its
// queue empty, recording each in log (if not nil).
func (r *remover) work(log *ctlfile.RemovalLog) {
	for {
		r.mu.Lock()
		n := min(len(r.queue), removeBatch)
		batch := append([]ctlfile.Files(nil), r.queue[:n]...)
		r.queue = r.queue[n:]
		if len(r.queue) == 0 {
			r.queue = nil
		}
		closed := r.closed
		r.mu.Unlock()
		if n == 0 {
			if closed {
				return
			}
			<-r.wake // closed by close: closed is then already set
			continue
		}
		if log != nil {
			if err := log.Begin(batch); err != nil {
				r.log.Warn("cannot record removals", "error", err)
			}
		}
		names := make([]string, 0, len(batch))
		for _, m := range batch {
			removeLogged(r.log, r.noise, r.now, m, "complete", r.rm(m))
			names = append(names, m.Rel)
		}
		if log != nil {
			if err := log.End(); err != nil {
				r.log.Warn("cannot record removals", "error", err)
			}
		}
		r.mu.Lock()
		r.removed = append(r.removed, names...)
		if len(r.queue) > 0 && !r.closed {
			poke(r.wake) // another worker may be asleep
		}
		r.mu.Unlock()
		poke(r.done)
	}
}

// removeBatch is how many removals a worker takes at once.
const removeBatch = 64

// poke signals c without blocking: one pending signal is enough.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// removeLogged logs the removal of a message: done ("complete",
// "killed") with its queue id, as every line about a message shows it, or
// why a file of it stays — rate-limited per message, since a file that
// cannot be removed fails again each time it is found. The clock is read
// only then: a removal that worked (one a message) needs no time.
func removeLogged(log hclog.Logger, noise *rateLog, now func() time.Time, m ctlfile.Files, done string, err error) {
	rel := m.Rel
	if err == nil {
		log.Info(done, "msg", m.Control.QueueID(path.Base(rel)))
		return
	}
	ok, n := noise.allow("remove:"+rel, now())
	if !ok {
		return
	}
	if errors.Is(err, ctlfile.ErrChanged) {
		log.Warn("a completed message's file is no longer the one read; left alone", "msg", rel, "error", err, "times", n+1)
		return
	}
	log.Error("cannot remove completed message", "msg", rel, "error", err, "times", n+1)
}

package admission

import "time"

// LiveLockDelay is how long a control file with a live agent's lock waits
// before it is read again (ZMailer: 32 s).
const LiveLockDelay = 32 * time.Second

// ReadRetryMin and ReadRetryMax bound the delay before a control file
// whose read failed with a transient error (EMFILE, EIO, EACCES…) is read
// again: it doubles with each failure in a row, from the first to the
// second.
const (
	ReadRetryMin = time.Second
	ReadRetryMax = 5 * time.Minute
)

// ReadRetryDelay is the delay before the next read of a file whose reads
// failed failures times in a row (1 for the first failure).
func ReadRetryDelay(failures int) time.Duration {
	if failures < 1 {
		failures = 1
	}
	if failures >= 20 {
		return ReadRetryMax // the shift would overflow long before
	}
	return min(ReadRetryMin<<(failures-1), ReadRetryMax)
}

// LockRetryAt is when a file whose locks were judged live (v) is read
// again: after LiveLockDelay, or just past the moment its lock turns
// stale, whichever comes first.
func LockRetryAt(now time.Time, v Verdict) time.Time {
	at := now.Add(LiveLockDelay)
	if !v.StaleAt.IsZero() && v.StaleAt.Before(at) {
		at = v.StaleAt.Add(time.Second) // past the rule's bound, not on it
	}
	return at
}

// Lock is a recipient line of a control file locked by a live process.
type Lock struct {
	PID           int
	Channel, Host string    // the recipient's, for its clause's limits
	Started       time.Time // when the process started (from /proc, by the daemon); zero if unknown
	FileOpen      FileOpen  // whether the process has the control file open (by the daemon)
}

// FileOpen says whether a lock's process has the control file open: an agent
// delivering a recipient keeps it open (ZMailer's ctlopen … ctlclose), so
// one that has it open may have written the lock, whatever the clocks say.
type FileOpen uint8

// FileOpen's values; the zero one is the safe side.
const (
	MayHaveOpen FileOpen = iota // not known (its descriptors could not be read): it may
	HasOpen                     // it has the file open
	NotOpen                     // it provably has not
)

// Locks are the live locks of one control file, as a read found them.
type Locks struct {
	Locks []Lock
	// Changed is the file's status-change time: writing a lock sets it,
	// so a lock is never younger than it says, and a later write (another
	// recipient's mark) only makes it look younger.
	Changed time.Time
	// Arrival is the message's arrival time (zero: unknown).
	Arrival time.Time
}

// Verdict is JudgeLocks' answer.
type Verdict struct {
	Stale   bool      // every lock is stale: read again, breaking them
	Reason  string    // why they are stale
	PID     int       // otherwise: the lock the file waits on
	Ours    bool      // ... held by one of our agents (never stale by age)
	StaleAt time.Time // ... when it turns stale (zero if ours)
}

// startSlack is the doubt in comparing a process's start with a file's
// status-change time: the kernel takes the one from a clock that may lag
// by a tick, the other is known to the second (the boot time's).
const startSlack = time.Second

// JudgeLocks judges the live locks of a control file. A lock whose
// process lives is nonetheless stale when the process is not one of our
// agents (ours) — a PID reused, after a reboot or a restart, by another
// program — and
//
//   - the process provably does not have the file open (Lock.FileOpen
//     is NotOpen) and started after the file last changed (Lock.Started
//     after Locks.Changed, by more than startSlack): it cannot have
//     written the lock, its PID was reused. Not the start alone: it is
//     from /proc, which follows today's wall clock, while the change time
//     was stamped by an earlier one, so a clock stepped forward makes an
//     earlier scheduler's agent, still delivering, look started after
//     its lock; but that agent has the file open, and waits; or
//   - the lock is older than the scheduler's start (start), unless the
//     process is known to have started before the lock or has the file
//     open: no agent of this scheduler wrote it, but one of an earlier
//     scheduler's, left running by a SIGKILL, may still be delivering it
//     (reset, it would be delivered twice), and waits for the next rules
//     as any live lock; or
//   - it is older than its clause's jobtimeout: no agent of ours holds a
//     line that long without a word, it would have been killed; or
//   - the message is past its expiry and expiry2, when any recipient
//     expires, attempted or not.
//
// A lock's age is taken from Locks.Changed, so the rule errs towards
// waiting. limits gives the clause's jobtimeout and expiry + expiry2 (0:
// none) for a recipient's channel and host.
func JudgeLocks(now, start time.Time, ls Locks, ours func(pid int) bool,
	limits func(channel, host string) (jobTimeout, expiry time.Duration)) Verdict {
	var wait Verdict // the lock that turns stale last
	reason := ""
	for _, l := range ls.Locks {
		if ours(l.PID) {
			return Verdict{PID: l.PID, Ours: true}
		}
		jobTimeout, expiry := limits(l.Channel, l.Host)
		at, why := ls.Changed.Add(jobTimeout), "older than jobtimeout"
		if expiry > 0 && !ls.Arrival.IsZero() && ls.Arrival.Add(expiry).Before(at) {
			at, why = ls.Arrival.Add(expiry), "the message is past expiry and expiry2"
		}
		switch {
		case l.FileOpen == NotOpen && !l.Started.IsZero() && l.Started.After(ls.Changed.Add(startSlack)):
			at, why = ls.Changed, "its process started after it was written and has not the file open (a PID reused)"
		case ls.Changed.Before(start) && l.Started.IsZero() && l.FileOpen != HasOpen:
			at, why = ls.Changed, "older than the scheduler's start"
		}
		if !now.Before(at) {
			reason = why
			continue
		}
		if wait.StaleAt.IsZero() || at.After(wait.StaleAt) {
			wait.PID, wait.StaleAt = l.PID, at
		}
	}
	if wait.PID != 0 {
		return wait
	}
	return Verdict{Stale: true, Reason: reason}
}

// Package admission owns the decisions of DESIGN §8 that stand between the
// queue on disk and the scheduling core: whether the core has room for
// another message (the active limits, with the recipient count kept beside
// the core and reconciled against it), when a control file that could not
// be read is read again (a live agent's lock, a transient error), whether a
// foreign lock is stale, the startup read (every ring held to
// startup_maxring agents while the queue found at start is read), and
// which recipients are refused at the door (hosts and addresses longer
// than RFC 5321 allows: RefuseOverlong).
//
// It does no I/O and reads no clock: the caller passes now, reports what
// happened (a message admitted, a recipient settled, a message gone, the
// first pass read) and carries out the answers. The daemon does so with
// the queue directory; package sim and package replay with simulated
// queues, so the simulator runs the daemon's policy.
package admission

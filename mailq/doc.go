// Package mailq lays out the scheduler's text views of the queue as
// ZMailer's mailq reads them (zmailer-facts.md §7.3): the thread report
// (SHOW QUEUE THREADS and SHORT), THREADS2, SHOW THREAD's summary, the
// global summary lines (and SHOW SNMP's), QSHAPE's table, WHY's lines,
// SHOW COUNTERS, and the spool listing of `scheduler queue` (SHOW QUEUE
// MESSAGES: Message, also its JSON). It formats the views it is given and
// nothing else: the daemon's control handler gathers them on its loop,
// with what only it knows (agents' process ids, its start time, the
// spool's files), and calls it. No I/O.
package mailq

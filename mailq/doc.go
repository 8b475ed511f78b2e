// Package mailq lays out the scheduler's text views of the queue as
// ZMailer's mailq reads them (zmailer-facts.md §7.3): the thread report
// (SHOW QUEUE THREADS and SHORT), THREADS2, SHOW THREAD's summary, the
// global summary lines (and SHOW SNMP's), QSHAPE's table and WHY's lines.
// It formats the core's views and nothing else: the daemon's control
// handler gathers them on its loop, with what only it knows (agents'
// process ids, its start time), and calls it. No I/O.
package mailq

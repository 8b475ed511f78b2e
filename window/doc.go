// Package window owns the interface between a node's core and the
// concurrency windows of its destinations (DESIGN §6, §13), so that a
// window may live outside the core — shared by a cluster of nodes — while
// the core stays a pure state machine: it asks by requests and learns the
// answers as events, whenever they come.
//
// A Book holds the windows. Three implement it:
//   - Local: the node's own windows, answered at once; what thread.Window
//     in the core does today (a property test holds every decision and
//     every window equal to the core's).
//   - Board with one Node per simulated node: N nodes over one shared
//     state in one process, deterministic (time is an argument, nothing
//     runs by itself), for the simulator and the lab; answered at once.
//   - cluster/redisbook.Book: the shared state in Redis, for real nodes;
//     answered later, on its Events channel.
//
// Every book computes with the same rules: thread.Window's arithmetic
// (Postfix 2.5 feedback, dead-destination cohorts, the learned ceiling),
// and Record's for what lies around it (when a dead destination revives,
// what a session may start against), with the sessions of every node
// sharing the store as the window's busy count.
//
// The caller's contract, step by step (one lease per session; the core's
// session is an agent attached to a thread or a job an agent attached
// elsewhere borrows there with feed = "message", so t.Busy counts leases):
//
//  1. Before a session on a destination, send Acquire with the clause's
//     Params (ParamsOf). Granted gives a Lease: start the session. Denied
//     gives a Reason and a Retry time: start nothing; ask again after a
//     Free event for that destination, or at Retry (when not zero) —
//     Retry is the dead-until time of a dead destination, or when the
//     first live lease would expire if its node stopped renewing.
//  2. When a delivery is judged (DESIGN §6: a job line, when its last
//     recipient is reported), send Report: Failed for a site failure,
//     with the DeadUntil the destination should wait if this failure
//     kills it (the agent's retryat, else the clause's retry schedule).
//     Changed answers every report, with the window before (From) and
//     after (State), Died and Revived as they happened.
//  3. When the session ends (the agent detaches), send Release.
//  4. Every event carries the destination's State: the window, dead-until,
//     ceiling, live sessions (every node's and this node's) and live
//     nodes. It is the core's view for mailq, WHY and metrics.
//
// Answers to one book come in the order of the requests; Free events may
// come at any time, and may be stale (another node took the session
// first): asking again is always safe.
//
// # How it is wired
//
// The core keeps one Book (core/book.go): none without [cluster], and
// then its own thread.Window decides exactly as Local does; with
// [cluster], an Outbox whose requests the daemon takes after each event
// and hands to redisbook.Book.Do (daemon/cluster.go), feeding the answers
// from its Events back to the core as one more event (core.Window). The
// core attaches an agent, or feeds a borrowed job, only with a lease
// granted for its thread (one Acquire outstanding a thread), releases it
// when the agent leaves or the borrowed job ends, reports each judged
// delivery, mirrors every answer's State into the thread's Window for
// mailq, WHY, metrics and the state file, and feeds no
// new job on a destination while a site failure reported on it is
// unanswered. The state file's windows seed the Redis book's fallback
// (Book.Restore). mailq and metrics read the book's Status.
//
// Flush and hold stay per node: the Book is only asked for sessions.
//
// The lab's cluster experiment (lab/cluster.go) runs N real cores in
// simulation over one Board (sim.Cluster: each core's book is the Board's
// Node, answered at once, and the Free events others leave are handed to
// it after every step).
package window

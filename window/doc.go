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
// session is an agent attached to a thread, so t.Busy counts leases):
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
// # Wiring plan (after the core's rework lands)
//
// The core keeps one Book (Local unless [cluster]; an Outbox with
// [cluster], whose requests the daemon takes after each event with the
// other actions and hands to redisbook.Book.Do, feeding the batches from
// Events back to the core as one more event: core.Window(now, evs)).
//   - core/agents.go attach: instead of checking t.Busy < t.Window.Limit()
//     and attaching at once, send Acquire and mark the thread asking (one
//     outstanding Acquire per thread at a time); on Granted attach an idle
//     or new agent of the ring and keep the lease with the agent; if the
//     ring has none any more, Release at once. On Denied, keep the thread
//     out of its ring's wanting heap until Free or Retry (a timer entry,
//     like BackoffUntil). With Local every answer comes inside the same
//     call, so scheduling decisions are the same as today's.
//   - core/agents.go detach: Release the agent's lease.
//   - core/feedback.go feedback: send Report with Failed and DeadUntil
//     (retryAt, else the schedule's next time — computed on a copy of
//     t.Retry, advanced only when Changed says Died). On Changed: mirror
//     State.Window into t.Window (Restore) for the views and the state
//     file, set t.BackoffUntil from State.DeadUntil when dead, clear it
//     and t.Retry when Revived; log destination_concurrency_feedback from
//     From and State exactly as logWindow does now.
//   - core/feedback.go reviveDue: nothing — a book revives a dead
//     destination at the first Acquire at or after its DeadUntil (Granted
//     with Revived); the timer only needs to fire then and ask.
//   - core/agents.go feed's "t.Busy <= t.Window.Limit()": compare with the
//     last State instead (State.Leases against State.Limit(): an agent
//     takes no new job while the cluster runs more sessions than the
//     shared window allows).
//   - core/destinations.go: Destinations/Learn keep thread.WindowState;
//     with Local, Learn calls Local.Restore; with [cluster] the store is
//     the memory (the state file stays as the fallback's starting point).
//   - config: a Cluster *cluster.Config field, filled by
//     cluster.FromTable from a [cluster] table (see its comment for the
//     one case to add); nil = Local, nothing changes.
//   - daemon: with Cluster set, redisbook.New(cfg, Options{Log}) at start,
//     Close at exit; select on its Events beside the agents' channels;
//     mailq and metrics read Book.Status() (mailq prints Status.String(),
//     e.g. "cluster: fallback since …"; a gauge per cluster.Mode and
//     counters Fallbacks, Reconnects). cmd/scheduler's main may route
//     go-redis's own process-wide logger (redis.SetLogger) into hclog.
//   - sim/lab: N sim cores over one Board, the Board's nodes' Do called by
//     the simulator with the cores' Ready requests, replacing the model in
//     lab/cluster.go.
//   - flush and hold stay per node (the Book is only asked for sessions).
package window

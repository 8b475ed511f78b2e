// Package core owns the scheduler's decisions: which thread runs when, on
// which transport agent, what each agent is fed next, what a report means
// for a recipient, a vertex and its destination, retry and expiry. It is a
// state machine in the manner of etcd's raft: it reads no clock, performs
// no I/O and holds no lock. Time arrives as an argument and randomness as
// an injected *rand.Rand; effects leave as data.
//
// The caller's contract, step by step:
//
//  1. New(cfg, logger, rng) builds an empty scheduler.
//  2. Feed it events as they happen, each with the current time: Arrive for
//     a control file read from the queue; AgentLine for each line an agent
//     writes; AgentStderr for each line of its own stderr stream (pipes);
//     AgentTooLong when an agent's line overflows; AgentLingers when an
//     agent's own process exited while others of its group run; AgentExited
//     once no process of the agent's group is left and all its output was
//     delivered, or when it could not be started; Reread with the result of
//     re-reading a control file the core asked for; Tick when the time from
//     NextWakeup has come. Before Tick, hand the core everything the agents
//     Silent names have written: the sweep judges them silent otherwise.
//  3. After each event call Ready and carry out its actions in the order of
//     its fields: spawn agents, write lines, stop agents, append d lines, log
//     outcomes, complete messages, re-read files (feeding each result back
//     through Reread before the next event), send the DSNs asked for, log
//     the transport throttles (with the failed agent's last words). The
//     batch's slices are reused by the next call of Ready: copy what must
//     outlive it.
//  4. Sleep until NextWakeup or the next event, whichever is first.
//
// What the core learns about destinations (concurrency windows, dead-until
// times) is not in the queue files: Destinations exports it for the caller
// to save, and Learn, called after New, restores it.
//
// Operator commands (ops.go: HoldThread, HoldMessage, Turn for ETRN, Flush,
// Kill, Reconfigure for a reload, Quiesce at shutdown; queue.go:
// FlushMessage, ReleaseThread by pattern) are events like the others: call
// them with now and carry out Ready afterwards. The views (Rings, Message
// for WHY, Shape, Gauges, AgentViews; queue.go: Find by queue id,
// MessageOf, UnroutedViews, Holds, Oldest) change nothing.
//
// What operators set and what retries learned outlive the process
// (queue.go): the caller restores destination holds with HoldThread before
// the first Arrive, and gives each Arrival its queue id (QID), its message
// hold (Held) and its groups' kept retry state (Attempts, Retry, Next): a
// group whose Next is ahead waits for it. Destination patterns (ParseDest)
// mean the same in hold, release, flush and ETRN.
//
// Agents are named by ids the core chooses (Spawn.Agent); the caller maps
// them to processes.
package core

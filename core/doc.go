// Package core owns the scheduler's decisions: which thread runs when, on
// which transport agent, what each agent is fed next, what a report means
// for a recipient, a vertex and its destination, retry and expiry. It is a
// state machine in the manner of etcd's raft: it reads no clock, performs
// no I/O and holds no lock. Time arrives as an argument and randomness as
// an injected *rand.Rand; effects leave as data.
//
// The caller's contract, step by step (etcd raft's Ready and Advance):
//
//  1. New(cfg, logger, rng) builds an empty Core; Learn gives it what an
//     earlier run learned about destinations.
//  2. Feed it events as they happen, each with the current time: Arrive for
//     a control file read from the queue; AgentLine for each line an agent
//     writes; AgentStderr for each line of its own stderr stream (pipes);
//     AgentTooLong when an agent's line overflows; AgentLingers when an
//     agent's own process exited while others of its group run; AgentExited
//     once no process of the agent's group is left and all its output was
//     delivered, or when it could not be started; Tick when the time from
//     NextWakeup has come; the operator commands below. Before Tick, hand
//     the core everything the agents Silent names have written: the sweep
//     judges them silent otherwise.
//  3. While HasReady, take the batch of effects with Ready and carry out its
//     actions in the order of its fields: spawn agents, write lines, stop
//     agents, append d lines, log outcomes, complete messages, re-read
//     files, send the DSNs asked for, log the transport throttles (with the
//     failed agent's last words), then log, count or measure the
//     Observations (observation.go: feedback with the window, destinations
//     dead and revived, learned ceilings, a reload's changes, a transport
//     working again, ETRN). Answer each re-read through Reread before
//     any other event. Events fed while a batch is in hand are allowed (a
//     failed spawn is an AgentExited); their effects make the next batch.
//  4. Call Advance when the batch is carried out. Its slices are the
//     caller's until then and the core's after (the next batch reuses
//     them): copy what must outlive it. Ready twice without Advance,
//     Advance without Ready, or an event or Advance before the batch's
//     re-reads were answered is a broken invariant: the core panics.
//  5. Sleep until NextWakeup or the next event, whichever is first.
//
// The same events in the same order with the same seed give the same
// batches, byte for byte (TestReplayIsByteIdentical): nothing the core
// decides depends on the order of a map.
//
// What the core learns about destinations (concurrency windows, dead-until
// times) is not in the queue files: Destinations exports it for the caller
// to save (it changes nothing; Tick forgets what is too old to keep), and
// Learn, called after New, restores it.
//
// Operator commands (commands.go: HoldMessage, ETRN, Flush, Kill,
// Quiesce at shutdown; queue.go: HoldThread and ReleaseThread by pattern,
// FlushMessage; reload.go: Reconfigure; ringcap.go: SetRingCap, the
// caller's startup read) are events like the others: call them with now
// and take the batch afterwards. The views
// (views.go: Rings, Thread, Gauges, Shape, AgentViews; why.go: Message for
// WHY, ThreadVertices; queue.go: Find by queue id, MessageOf,
// UnroutedViews, Holds, Oldest) change nothing.
//
// The files, by concern: scheduler.go (the Core, placement, the agenda),
// action.go (the batch and its steps), agents.go (feeding agents, their
// lines and exits; fifo.go an agent's queue of lines outstanding),
// report.go (what a report means), order.go (the rings' feed order),
// feedback.go, retry.go (retry, expiry, delay warnings),
// destinations.go (learned state), queue.go (queue ids, holds and retry
// state that outlive the process, destination patterns), observation.go (what the batch reports
// besides effects), check.go (invariants, for tests).
//
// What operators set and what retries learned outlive the process
// (queue.go): the caller restores destination holds with HoldThread before
// the first Arrive, and gives each Arrival its queue id (QID), its message
// hold (Held) and its groups' kept retry state (Attempts, Retry, Next): a
// group whose Next is ahead waits for it. Destination patterns (ParseDest)
// mean the same in hold, release, flush and ETRN.
//
// What others need from the core is data in the batch or a view; the
// core's logger is for diagnostics only, and nothing parses its lines.
//
// Agents are named by ids the core chooses (Spawn.Agent); the caller maps
// them to processes.
package core

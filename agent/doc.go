// Package agent owns transport-agent processes: it starts them (argv, exact
// environment, working directory, user/group, nice, and stdio as a socketpair,
// pipes or a pseudo-terminal), splits their output into lines of at most
// MaxLine bytes, queues their input in a backlog that never blocks the caller,
// ends their work (empty line, then half-close), terminates them with their
// whole process group (SIGTERM, then SIGKILL after a grace period) and reaps
// them once no process of the group is left. It knows nothing about
// scheduling: the daemon turns its events into core events.
//
// The caller's contract:
//
//  1. Start an agent with an id of the caller's choosing and a channel shared
//     by all agents. The caller must keep draining that channel: each agent's
//     goroutines block on it.
//  2. Per agent, events arrive in this order: Line, TooLong and Synced events
//     in the order of the output they stand for (Stderr events, from a
//     stream of their own, interleave with them; a Lingering event may come
//     between them), then exactly one Exited event, sent after the process
//     has been reaped, no process of its group is left and all of its output
//     has been read. After Exited the agent holds no goroutine, no file
//     descriptor and no process.
//  3. Write, Backlog, End, Kill and Sync may be called from any goroutine at
//     any time, before or after Exited; none of them blocks.
//
// Process groups. Every agent leads a process group of its own (socketpair,
// pipes) or a session (pty), so a Ctrl-C aimed at a foreground scheduler does
// not reach it, and so that what it forks can be found: an agent whose child
// delivers (ZMailer's sm style) has work in flight while that child runs.
// Kill signals the whole group, and Exited waits until the group is empty,
// so the caller resets the agent's locks only when nothing of it can still
// deliver. When the agent itself exits first, a Lingering event says so and
// its input is closed; its children's output is still read. A process that
// leaves the group (setsid) is not followed. While the group lives the
// agent's own process is left unreaped: the zombie holds the pid, which is
// the group id, so a signal can never reach a recycled one.
//
// Why not exec.CommandContext with Cancel and WaitDelay: the grace period is
// chosen per Kill call, and exec only lets Cancel and WaitDelay be set before
// Start. Proc implements the same contract itself: Kill closes the agent's
// input and sends SIGTERM, a timer sends SIGKILL after the grace period, and
// once the group is gone its output is read only until it has been idle for
// Spec.Drain (a process that left the group may still hold it open,
// go.dev/issue/23019).
//
// Sync is for the caller's watchdog: before it judges an agent silent it
// asks the reader for everything the agent has written, so that a stall of
// the caller itself (SIGSTOP, a long turn) is never taken for the agent's.
package agent

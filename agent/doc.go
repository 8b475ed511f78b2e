// Package agent owns transport-agent processes: it starts them (argv, exact
// environment, working directory, user/group, nice, and stdio as a socketpair,
// pipes or a pseudo-terminal), splits their output into lines of at most
// MaxLine bytes, queues their input in a backlog that never blocks the caller,
// ends their work (empty line, then half-close), terminates them (SIGTERM, then
// SIGKILL after a grace period) and reaps them. It knows nothing about
// scheduling: the daemon turns its events into core events.
//
// The caller's contract:
//
//  1. Start an agent with an id of the caller's choosing and a channel shared
//     by all agents. The caller must keep draining that channel: each agent's
//     goroutines block on it.
//  2. Per agent, events arrive in order: Line and TooLong events, then exactly
//     one Exited event, sent after the process has been reaped and all of its
//     output has been read. After Exited the agent holds no goroutine, no file
//     descriptor and no process.
//  3. Write, Backlog, End and Kill may be called from any goroutine at any
//     time, before or after Exited; none of them blocks.
//
// Why not exec.CommandContext with Cancel and WaitDelay: the grace period is
// chosen per Kill call, and exec only lets Cancel and WaitDelay be set before
// Start. Proc implements the same contract itself: Kill closes the agent's
// input and sends SIGTERM, a timer sends SIGKILL after the grace period, and
// once the process has exited its output is read only until it has been idle
// for Spec.Drain (a descendant may still hold it open, go.dev/issue/23019).
// Signals go through os.Process, which uses a pidfd on Linux, so a late
// SIGKILL can never hit a recycled pid.
//
// Agents are started in their own process group (socketpair, pipes) or their
// own session (pty), so a Ctrl-C aimed at a foreground scheduler does not
// reach them: their shutdown is the scheduler's decision.
package agent

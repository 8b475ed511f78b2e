// Package tacheck owns the conformance kit for transport agents: it checks
// that an agent program speaks zsched's TA protocol (docs/ta-protocol.md,
// version Version) as the scheduler relies on it.
//
// For every case and every stdio mode it builds a throw-away postoffice
// (ctlfile.Spool.Enqueue, plus hand-edited bytes for the odd cases), starts
// the agent there with package agent exactly as the daemon would (argv and
// NAME=value environment words from the command, $channel and $host
// substituted, working directory postoffice/transport), plays a scripted
// scheduler against it, and judges one behaviour from what the agent wrote
// and what it did to the control file. Each case yields a Result with a
// transcript of both directions, timed, in the notation of
// reference/zmailer-ta-observed.md.
//
// What the kit expects of the agent: it is started as given; it delivers the
// recipients of channel Config.Channel at host Config.Host (all test
// recipients are there, except the ones a case places elsewhere on purpose)
// to wherever its command line sends them, and any outcome is acceptable as
// long as the report, the mark and the d line agree. Locking is observed by
// making the message body a FIFO: an agent that locks before it reads the
// body is caught holding its locks; one that never opens the body cannot be
// observed, and the case is skipped, not failed.
package tacheck

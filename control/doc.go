// Package control owns the scheduler's control socket: the line protocol of
// ZMailer's MAILQ v2 (zmailer-facts.md §7.2) with zsched's own verbs, its
// server and its client.
//
// The commands are one table, Verbs (verbs.go): each verb's words (the
// Verb* constants, which the scheduler's loop and the scheduler command use
// too), the right it needs, its arity, its help, and the scheduler command
// that sends it. The loop has a handler for each.
//
// The server accepts many clients at once, each on its own goroutine, each
// bounded in line length, idle time and session time. It parses a command,
// checks the client's right to it, and hands it to the scheduler's loop as a
// *Request on the channel Requests returns; the loop answers with Respond
// and the server writes the reply. The server holds no scheduling state and
// takes no lock on any: everything a command touches is touched by the loop.
//
// Who may talk:
//   - On the Unix socket (mode 0600, or 0660 with ControlGroup), the peer's
//     credentials (SO_PEERCRED) decide: root, the scheduler's own uid, or a
//     member of ControlGroup get every right; anyone else gets
//     "550 NO ACCESS FOR YOU" and the connection is closed.
//   - On the optional TCP listener, MAILQ v2 AUTH against an auth file
//     (user:password:ATTRS:addresses, as ZMailer's scheduler.auth) decides,
//     per user and client address.
//
// Session, as MAILQ v2: the server greets with "version zmailer 2.0" and a
// line "220 MAILQ-V2-CHALLENGE: <challenge>" (or "550 …" and close). Each
// command is one LF-terminated line; the reply is one line starting with
// "+" (success) or "-" (failure), or, for listings, "+OK until LF.LF" and
// dot-stuffed lines ended by a line ".". QUIT or EXIT ends the session.
package control

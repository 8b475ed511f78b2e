package control

// The verbs: the words a command line starts with, as operators and MAILQ
// v2 clients type them. The server's parser, the scheduler's loop (which
// has a handler for each) and the scheduler command (which sends them) all
// name them by these constants and read their rights, arity and help from
// Verbs, so that adding a verb is one line here and a handler.
const (
	VerbShowThreads   = "SHOW QUEUE THREADS"
	VerbShowThreads2  = "SHOW QUEUE THREADS2"
	VerbShowShort     = "SHOW QUEUE SHORT"
	VerbShowJSON      = "SHOW QUEUE JSON"
	VerbShowThread    = "SHOW THREAD"
	VerbShowCounters  = "SHOW COUNTERS"
	VerbShowQshape    = "SHOW QSHAPE"
	VerbShowSNMP      = "SHOW SNMP"
	VerbETRN          = "ETRN"
	VerbKillMsg       = "KILL MSG"
	VerbFlush         = "FLUSH"
	VerbHoldThread    = "HOLD THREAD"
	VerbHoldMsg       = "HOLD MSG"
	VerbReleaseThread = "RELEASE THREAD"
	VerbReleaseMsg    = "RELEASE MSG"
	VerbWhy           = "WHY"
	VerbReload        = "RELOAD"
	// Issue 17: the whole spool, bulk operations and postcat.
	VerbShowMessages = "SHOW QUEUE MESSAGES"
	VerbShowMsg      = "SHOW MSG"
	VerbKillMsgs     = "KILL MSGS"
	VerbHoldMsgs     = "HOLD MSGS"
	VerbReleaseMsgs  = "RELEASE MSGS"
	VerbFlushMsgs    = "FLUSH MSGS"
)

// The session's own words, which the server answers itself: they never
// reach the loop and need no right.
const (
	VerbAuth = "AUTH"
	VerbHelp = "HELP"
	VerbQuit = "QUIT"
	VerbExit = "EXIT" // QUIT's other name
)

// Verb is a command the protocol knows: its words, the right it needs, how
// many arguments it takes, and the scheduler command that sends it.
type Verb struct {
	Name    string // canonical words, one of the Verb* constants
	Need    Perm   // 0: any client that got in
	MinArgs int
	MaxArgs int    // -1: any
	Help    string // "SYNOPSIS: what it does", as HELP and a usage error say it
	// Command is how `scheduler` sends it ("mailq -QQ": the subcommand,
	// then the flag that chooses the verb); "" for a verb only MAILQ v2
	// clients use. HELP names it after Help.
	Command string
}

// Verbs are every command that reaches the loop; parse takes the one with
// the longest name that a line starts with.
var Verbs = []Verb{
	{VerbShowThreads2, PermTT, 0, 0, "SHOW QUEUE THREADS2: one tab-separated line per thread", ""},
	{VerbShowThreads, PermTT, 0, 0, "SHOW QUEUE THREADS: the thread report", "mailq"},
	{VerbShowShort, PermQQ, 0, 0, "SHOW QUEUE SHORT: ring headers and summaries", "mailq -QQ"},
	{VerbShowJSON, PermTT, 0, 0, "SHOW QUEUE JSON: rings, threads and agents as one JSON document", "mailq -json"},
	{VerbShowThread, PermTT, 2, 2, "SHOW THREAD channel host: one destination's recipients", "mailq -dest channel/host"},
	{VerbShowCounters, 0, 0, 0, "SHOW COUNTERS: running totals and gauges", "mailq -counters"},
	{VerbShowQshape, PermQQ, 0, 1, "SHOW QSHAPE [N]: recipients by host and age, top N hosts", "qshape"},
	{VerbShowSNMP, PermSNMP, 0, 0, "SHOW SNMP: the two global summary lines", "mailq -QQQ"},
	{VerbETRN, PermETRN, 1, -1, "ETRN host|@domain [info]: start queueonly threads for it", "etrn"},
	{VerbKillMsg, PermKill, 1, 1, "KILL MSG id: remove a message and its files", "kill"},
	{VerbFlush, PermFlush, 0, 1, "FLUSH [channel/host]: retry now, ending back-offs; globs allowed", "flush"},
	{VerbHoldThread, PermHold, 1, 1, "HOLD THREAD channel/host: feed nothing to a destination", "hold"},
	{VerbHoldMsg, PermHold, 1, 1, "HOLD MSG id: feed nothing of a message", "hold"},
	{VerbReleaseThread, PermHold, 1, 1, "RELEASE THREAD channel/host: end a destination hold", "release"},
	{VerbReleaseMsg, PermHold, 1, 1, "RELEASE MSG id: end a message hold", "release"},
	{VerbWhy, PermTT, 1, 1, "WHY id: why each recipient of a message is waiting", "why"},
	{VerbReload, PermReload, 0, 0, "RELOAD: re-read the configuration", "reload"},
	{VerbShowMessages, PermTT, 0, -1, "SHOW QUEUE MESSAGES [json] [held] [deferred] [dest=GLOB] [from=ADDR]: every message in the spool", "queue"},
	{VerbShowMsg, PermTT, 1, 2, "SHOW MSG id [body]: the control file decoded, headers, body", "cat"},
	{VerbKillMsgs, PermKill, 1, -1, "KILL MSGS [dry] [all] [dest=GLOB] [from=ADDR] [id...]: kill many", "kill"},
	{VerbHoldMsgs, PermHold, 1, -1, "HOLD MSGS [dry] [dest=GLOB] [from=ADDR] [id...]: hold many messages", "hold"},
	{VerbReleaseMsgs, PermHold, 1, -1, "RELEASE MSGS [dry] [all] [dest=GLOB] [from=ADDR] [id...]: release many", "release"},
	{VerbFlushMsgs, PermFlush, 1, -1, "FLUSH MSGS [dry] [dest=GLOB] [from=ADDR] [id...]: retry many now", "flush"},
}

// HelpLine is v's line in HELP's listing and in a usage error.
func (v Verb) HelpLine() string {
	if v.Command == "" {
		return v.Help
	}
	return v.Help + " (" + v.Command + ")"
}

// sessionHelp is HELP's text for the words every session takes.
var sessionHelp = []string{
	VerbAuth + " user authenticator: log in (TCP listener; MD5 of the challenge line and the password)",
	VerbHelp + ": this list",
	VerbQuit + ": end the session (" + VerbExit + " too)",
}

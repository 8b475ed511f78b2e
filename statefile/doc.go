// Package statefile owns the format of the learned destination state
// (DESIGN §3, §11): the core's windows, feedback cycles, ceilings,
// dead-until times and whether a window is still in its slow start as
// text, one destination per line, which the daemon keeps under
// postoffice/state/destinations so that a restart does not learn them
// again. Versions 1 to 4 are read, version 4 written.
//
// Since version 3 the file is a journal: a save appends a line for each
// destination whose state changed and a tombstone ("- channel host") for
// each the core forgot; a later line supersedes an earlier one. When superseded lines
// outnumber live ones (and at the first save after a start on an older or
// damaged file) the file is rewritten whole. So a save costs what changed,
// not what is known (240 000 destinations made a 12 MB file rewritten
// every 30 s), and an idle scheduler writes nothing. Journal decides what
// each save writes; the caller writes it (appending, or replacing the
// file atomically) and reports how that went.
//
// The package does no I/O.
package statefile

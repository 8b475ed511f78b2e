package admission

import (
	"fmt"
	"strings"

	"zsched/core"
)

// RFC 5321 §4.5.3.1's limits, in octets: what any server must accept and
// need accept no more of. A longer host cannot be fed to an agent (its
// job line), and no server would take the address.
const (
	maxLocalPart = 64
	maxDomain    = 255
	maxPath      = 256
)

// RefuseOverlong moves the recipients of a whose host or address break
// RFC 5321's limits from its groups to a.Refused: they fail at once, with
// a d line and a DSN, instead of being fed to an agent on every retry
// until expiry (a 1 MB host kills an agent that reads 64 KiB lines).
func RefuseOverlong(a *core.Arrival) {
	keep := a.Groups[:0]
	for _, g := range a.Groups {
		rs := g.Rcpts[:0]
		for _, r := range g.Rcpts {
			status, why := Overlong(g.Host, r.User)
			if status == "" {
				rs = append(rs, r)
				continue
			}
			a.Refused = append(a.Refused, core.Refusal{Offset: r.Offset, User: r.User, Channel: g.Channel,
				Host: g.Host, Notify: r.Notify, Status: status, Text: why})
		}
		if len(rs) > 0 {
			g.Rcpts = rs
			keep = append(keep, g)
		}
	}
	clear(a.Groups[len(keep):])
	a.Groups = keep
}

// Overlong returns the RFC 3463 status and the reason when host or user
// break RFC 5321's limits, "" otherwise.
func Overlong(host, user string) (status, why string) {
	const badSystem = "5.1.2 (bad destination system address)"
	const badMailbox = "5.1.3 (bad destination mailbox address syntax)"
	switch {
	case len(host) > maxDomain:
		return badSystem, fmt.Sprintf("host is %d octets long, more than the %d RFC 5321 allows", len(host), maxDomain)
	case len(user) > maxPath:
		return badMailbox, fmt.Sprintf("address is %d octets long, more than the %d RFC 5321 allows", len(user), maxPath)
	}
	if at := strings.LastIndexByte(user, '@'); at >= 0 {
		if at > maxLocalPart {
			return badMailbox, fmt.Sprintf("local part is %d octets long, more than the %d RFC 5321 allows", at, maxLocalPart)
		}
		if n := len(user) - at - 1; n > maxDomain {
			return badSystem, fmt.Sprintf("domain is %d octets long, more than the %d RFC 5321 allows", n, maxDomain)
		}
	}
	return "", ""
}

package sim

// Agents in trouble, and an operator acting on borrowed jobs: the pieces
// that the core's and the cluster's property tests of feed = "message"
// share.

import (
	"math/rand"
	"slices"
	"strings"
	"time"

	"zsched/report"
)

// Odds are a troubled agent's, in jobs of a hundred: a recipient deferred,
// the site failed (every recipient deferred), a crash (exit with the job
// outstanding), a hang (until jobtimeout kills it); the rest deliver.
type Odds struct{ Defer, SiteFail, Crash, Hang int }

// TroubleOdds are the odds of the borrowed leases' property tests.
func TroubleOdds() Odds { return Odds{Defer: 10, SiteFail: 5, Crash: 4, Hang: 3} }

// Troubled answers jobs as agents under trouble do, by rng and odds, each
// after up to 3 s. The rng is drawn from in the same order whatever the
// odds.
func Troubled(rng *rand.Rand, odds Odds) Behavior {
	return func(j Job) Response {
		st := make([]report.Status, len(j.Rcpts))
		r := Response{Status: st, Delay: time.Duration(rng.Intn(3000)) * time.Millisecond}
		for i := range st {
			st[i] = report.OK3
		}
		switch p := rng.Intn(100); {
		case p < odds.Defer:
			st[0] = report.Deferred
		case p < odds.Defer+odds.SiteFail:
			for i := range st {
				st[i] = report.DeferAll
			}
		case p < odds.Defer+odds.SiteFail+odds.Crash:
			r.Crash, r.Status = true, nil
		case p < odds.Defer+odds.SiteFail+odds.Crash+odds.Hang:
			r.Hang = true
		}
		return r
	}
}

// TroubledClause is the clause of the borrowed leases' property tests:
// three agents fed by message, two sessions a destination, quick retries.
const TroubledClause = `
[[clause]]
select = "smtp/*"
command = "sink -c smtp"
feed = "message"
maxring = 3
overfeed = 2
maxthr = 2
slow_start = false
interval = "1m"
retries = [1, 2]
jobtimeout = "2m"
`

// KillBorrowed kills (the operator's KILL) the first message, by inode
// number, one of whose recipients is being delivered on a borrowed
// session, and notes its path in killed: the job ends when its agent
// answers, the message gone. It reports whether there was one.
func (s *Sim) KillBorrowed(killed map[string]bool) (bool, error) {
	inums := make([]int64, 0, len(s.Msgs))
	for inum := range s.Msgs {
		inums = append(inums, inum)
	}
	slices.Sort(inums)
	for _, inum := range inums {
		path := s.Msgs[inum].Path
		mv, err := s.Core.Message(s.Now, path)
		if err != nil {
			continue
		}
		for _, v := range mv.Vertices {
			if v.Why.Via == "" {
				continue
			}
			var kerr error
			s.Do(func(now time.Time) { kerr = s.Core.Kill(now, path) })
			if kerr != nil {
				return false, kerr
			}
			killed[path] = true
			return true, nil
		}
	}
	return false, nil
}

// PendingExcept is Pending without the recipients of the messages in
// killed.
func (s *Sim) PendingExcept(killed map[string]bool) []string {
	var p []string
	for _, r := range s.Pending() {
		if path, _, _ := strings.Cut(r, ":"); !killed[path] {
			p = append(p, r)
		}
	}
	return p
}

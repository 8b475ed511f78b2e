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

// Troubled answers jobs as agents under trouble do, by rng: most deliver
// after up to 3 s, one job in ten defers a recipient, one in twenty fails
// the site, one in twenty-five crashes (exits with the job outstanding)
// and three in a hundred hang (until jobtimeout kills them).
func Troubled(rng *rand.Rand) Behavior {
	return func(j Job) Response {
		st := make([]report.Status, len(j.Rcpts))
		r := Response{Status: st, Delay: time.Duration(rng.Intn(3000)) * time.Millisecond}
		for i := range st {
			st[i] = report.OK3
		}
		switch p := rng.Intn(100); {
		case p < 10:
			st[0] = report.Deferred
		case p < 15:
			for i := range st {
				st[i] = report.DeferAll
			}
		case p < 19:
			r.Crash, r.Status = true, nil
		case p < 22:
			r.Hang = true
		}
		return r
	}
}

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

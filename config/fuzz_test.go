package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary text to Parse. Parse must not panic; every error it
// returns names the file and a line inside it; and whatever it accepts holds the
// invariants the core relies on without checking.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../scheduler.toml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(head + "[[clause]]\nselect = \"smtp/*.{se,dk}\"\ncommand = \"A=1 smtp $host\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("f.toml", data)
		if err != nil {
			checkErrors(t, err, strings.Count(string(data), "\n")+1)
			if _, err2 := Parse("f.toml", data); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("Parse is not deterministic: %v then %v", err, err2)
			}
			return
		}
		checkClause(t, c.Defaults)
		for _, cl := range c.Clauses {
			checkClause(t, cl)
			if cl.Command.IsZero() {
				t.Fatalf("clause %q accepted without a command", cl.Select)
			}
			if err := checkSelect(cl.Select); err != nil {
				t.Fatalf("clause accepted with %v", err)
			}
			if cl.Line < 1 {
				t.Fatalf("clause %q has line %d", cl.Select, cl.Line)
			}
		}
		s := c.Scheduler
		if s.Postoffice == "" || s.ControlSocket == "" || s.NotifySocket == "" || s.Hash < 0 || s.Hash > 2 ||
			s.ScanInterval <= 0 || s.MaxTA < 1 || s.ForkRate < 1 || s.MessageActiveLimit < 1 || s.RecipientActiveLimit < 1 {
			t.Fatalf("accepted scheduler %+v", s)
		}
		if s.MetricsListen != "" && !s.MetricsPublic {
			if lb, err := checkListen(s.MetricsListen); err != nil || !lb {
				t.Fatalf("accepted metrics_listen %q", s.MetricsListen)
			}
		}
	})
}

func checkErrors(t *testing.T, err error, lines int) {
	t.Helper()
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		var ce *Error
		if !errors.As(e, &ce) {
			t.Fatalf("error %v is not an *Error", e)
		}
		if ce.File != "f.toml" || ce.Line < 0 || ce.Line > lines || ce.Msg == "" {
			t.Fatalf("bad error %+v (file has %d lines)", ce, lines)
		}
	}
}

func checkClause(t *testing.T, c Clause) {
	t.Helper()
	ok := c.Interval > 0 && c.JobTimeout > 0 && c.IdleMax >= 0 && c.Expiry >= 0 && c.Expiry2 >= 0 &&
		len(c.Retries) >= 1 && len(c.Retries) <= maxRetries &&
		c.Skew >= 1 && c.MaxChannel >= 1 && c.MaxRing >= 1 && c.MaxThr >= 1 && c.Overfeed >= 0 &&
		c.Nice >= -20 && c.Nice <= 19 &&
		c.InitialConcurrency >= 1 && c.InitialConcurrency <= c.MaxThr &&
		c.PositiveFeedback.check() == nil && c.NegativeFeedback.check() == nil &&
		c.DeliverySlotCost != 1 && c.DeliverySlotCost >= 0 && c.DeliverySlotLoan >= 0 &&
		c.DeliverySlotDiscount >= 0 && c.DeliverySlotDiscount <= 100 && c.MinimumDeliverySlots >= 0 &&
		c.Order <= OrderAge && c.Stdio <= StdioPTY && c.AgeOrder == (c.Order == OrderAge) &&
		!(c.Order == OrderPreemptive && c.DeliverySlotCost == 0)
	for _, r := range c.Retries {
		ok = ok && r >= 0
	}
	if !ok {
		t.Fatalf("accepted clause %+v", c)
	}
}

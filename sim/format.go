package sim

import (
	"fmt"
	"strings"
	"time"

	"zsched/core"
)

// Format returns a batch of the core's actions as text, one action a line
// in the batch's order, every field shown and times given from Epoch: the
// form the scenario scripts print and the replay test compares byte for
// byte.
func Format(r *core.Ready) string {
	var b strings.Builder
	for _, sp := range r.Spawns {
		fmt.Fprintf(&b, "spawn a%d clause=%d %s", sp.Agent, sp.Clause, sp.Channel)
		if sp.Host != "" {
			b.WriteString("/" + sp.Host)
		}
		b.WriteByte('\n')
	}
	for _, w := range r.Writes {
		fmt.Fprintf(&b, "write a%d %q", w.Agent, w.Line)
		if !w.Due.IsZero() {
			b.WriteString(" due=" + At(w.Due))
		}
		b.WriteByte('\n')
	}
	for _, st := range r.Stops {
		verb := "end"
		if st.Kill {
			verb = "kill"
		}
		fmt.Fprintf(&b, "%s a%d: %s\n", verb, st.Agent, st.Reason)
	}
	for _, d := range r.Diags {
		fmt.Fprintf(&b, "diag %s @%d %q: %s\n", d.Path, d.Offset, d.Notary.String(), d.Text)
	}
	for _, o := range r.Outcomes {
		fmt.Fprintf(&b, "outcome %s @%d %s %s/%s", o.Path, o.Offset, o.User, o.Channel, o.Host)
		if o.Agent != 0 {
			fmt.Fprintf(&b, " a%d", o.Agent)
		}
		fmt.Fprintf(&b, " %s attempts=%d delay=%s", o.Status, o.Attempts, o.Delay)
		if !o.Next.IsZero() {
			b.WriteString(" next=" + At(o.Next))
		}
		if o.Text != "" {
			fmt.Fprintf(&b, " %q", o.Text)
		}
		b.WriteByte('\n')
	}
	for _, c := range r.Completes {
		b.WriteString("complete " + c.Path)
		for _, f := range []struct {
			on   bool
			name string
		}{{c.Diags, "diags"}, {c.Bounce, "bounce"}, {c.Killed, "killed"}} {
			if f.on {
				b.WriteString(" " + f.name)
			}
		}
		b.WriteByte('\n')
	}
	for _, rr := range r.Rereads {
		b.WriteString("reread " + rr.Path + "\n")
	}
	for _, d := range r.DSNs {
		b.WriteString("dsn " + d.Path + "\n")
	}
	for _, th := range r.Throttles {
		fmt.Fprintf(&b, "throttle a%d clause=%d %s/%s", th.Agent, th.Clause, th.Channel, th.Host)
		if th.Ring != "" {
			b.WriteString(" ring=" + th.Ring)
		}
		fmt.Fprintf(&b, " until=%s backoff=%s failures=%d: %s\n", At(th.Until), th.Backoff, th.Failures, th.Reason)
	}
	for i := range r.Observations {
		formatObservation(&b, &r.Observations[i])
	}
	return b.String()
}

// formatObservation writes one line (a reload: one a change, then one).
func formatObservation(b *strings.Builder, o *core.Observation) {
	dest := o.Channel + "/" + o.Host
	switch o.Kind {
	case core.ObservedFeedback:
		f := &o.Feedback
		sign := "+"
		if f.Negative {
			sign = "-"
		}
		fmt.Fprintf(b, "feedback %s %s window %d→%d busy=%d", dest, sign, f.From, f.Window, f.Busy)
		if f.Ceiling > 0 {
			fmt.Fprintf(b, " ceiling=%d", f.Ceiling)
			if f.CeilingConfirmed {
				b.WriteString(" confirmed")
			}
		}
		b.WriteByte('\n')
	case core.ObservedDead:
		fmt.Fprintf(b, "dead %s until=%s site_failures=%d: %s\n", dest, At(o.Until), o.SiteFailures, o.Text)
	case core.ObservedRevived, core.ObservedRetryDue:
		fmt.Fprintf(b, "%s %s window=%d\n", strings.ReplaceAll(o.Kind.String(), "_", " "), dest, o.Window)
	case core.ObservedCeilingLearned, core.ObservedCeilingConfirmed, core.ObservedCeilingForgotten:
		fmt.Fprintf(b, "%s %s %d window=%d\n", strings.ReplaceAll(o.Kind.String(), "_", " "), dest, o.Ceiling, o.Window)
	case core.ObservedTransportWorks:
		fmt.Fprintf(b, "transport works %s a%d clause=%s failures=%d\n", dest, o.Agent, o.Clause, o.Failures)
	case core.ObservedETRN:
		fmt.Fprintf(b, "etrn %s threads=%d started=%d\n", o.Host, o.Threads, o.Started)
	case core.ObservedReloaded:
		r := o.Reload
		for _, c := range r.Changes {
			b.WriteString("reload: " + c.What)
			if c.Select != "" {
				b.WriteString(" " + c.Select)
			}
			if c.Key != "" {
				fmt.Fprintf(b, " %s %s → %s", c.Key, c.From, c.To)
			}
			b.WriteByte('\n')
		}
		fmt.Fprintf(b, "reloaded clauses=%d threads=%d moved=%d clamped=%d retired=%d routed=%d unrouted=%d\n",
			r.Clauses, r.Threads, r.ThreadsMoved, r.WindowsClamped, r.AgentsRetired, r.RcptsRouted, r.Unrouted)
	}
}

// At returns t as the time since Epoch ("+1h30m0s"), "-" for the zero time.
func At(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(Epoch)
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}

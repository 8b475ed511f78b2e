package daemon

import "zsched/core"

// observed logs what the core observed, the lines the core once logged
// itself, under its logger's name, and counts each in the metrics.
func (d *Daemon) observed(os []core.Observation) {
	log := d.coreLog
	for i := range os {
		o := &os[i]
		d.operator.metrics.observation(o.Kind)
		switch o.Kind {
		case core.ObservedFeedback:
			f := &o.Feedback
			if f.Window == f.From && !log.IsTrace() {
				continue
			}
			kv := []any{"channel", o.Channel, "host", o.Host, "negative", f.Negative,
				"from", f.From, "window", f.Window, "busy", f.Busy,
				"success", f.Success, "failure", f.Failure, "fail_cohorts", f.FailCohorts,
				"ceiling", f.Ceiling, "ceiling_confirmed", f.CeilingConfirmed}
			if f.Window != f.From {
				log.Debug("destination_concurrency_feedback", kv...)
			} else {
				log.Trace("destination_concurrency_feedback", kv...)
			}
		case core.ObservedDead:
			log.Info("destination is dead", "channel", o.Channel, "host", o.Host,
				"until", o.Until, "site_failures", o.SiteFailures, "text", o.Text)
		case core.ObservedRevived:
			log.Info("destination revived by a delivery", "channel", o.Channel, "host", o.Host, "window", o.Window)
		case core.ObservedRetryDue:
			log.Info("dead destination's retry time has come", "channel", o.Channel, "host", o.Host, "window", o.Window)
		case core.ObservedCeilingLearned:
			log.Debug("concurrency ceiling learned", "channel", o.Channel, "host", o.Host, "ceiling", o.Ceiling, "window", o.Window)
		case core.ObservedCeilingConfirmed:
			log.Debug("concurrency ceiling confirmed", "channel", o.Channel, "host", o.Host, "ceiling", o.Ceiling, "window", o.Window)
		case core.ObservedCeilingForgotten:
			log.Debug("concurrency ceiling forgotten", "channel", o.Channel, "host", o.Host, "ceiling", o.Ceiling, "window", o.Window)
		case core.ObservedTransportWorks:
			log.Info("transport works again", "clause", o.Clause, "channel", o.Channel,
				"host", o.Host, "agent", o.Agent, "failures", o.Failures)
		case core.ObservedETRN:
			log.Debug("etrn", "name", o.Host, "threads", o.Threads, "started", o.Started)
		case core.ObservedReloaded:
			d.logReload(o.Reload)
		}
	}
}

// logReload logs a reload's changes, then what it did.
func (d *Daemon) logReload(r *core.Reload) {
	log := d.coreLog
	for _, c := range r.Changes {
		switch c.What {
		case "scheduler setting changed":
			log.Info("reload: scheduler setting changed", "key", c.Key, "from", c.From, "to", c.To)
		case "clause added":
			log.Info("reload: clause added", "select", c.Select, "index", c.Index, "line", c.Line)
		case "clause changed":
			log.Info("reload: clause changed", "select", c.Select, "key", c.Key, "from", c.From, "to", c.To)
		default:
			log.Info("reload: "+c.What, "select", c.Select)
		}
	}
	log.Info("configuration reloaded", "file", r.File, "clauses", r.Clauses,
		"threads", r.Threads, "threads_moved_ring", r.ThreadsMoved, "windows_clamped", r.WindowsClamped,
		"agents_retired", r.AgentsRetired, "rcpts_routed", r.RcptsRouted, "unrouted_vertices", r.Unrouted)
}

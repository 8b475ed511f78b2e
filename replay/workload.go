package replay

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"zsched/model"
	"zsched/trace"
)

// Workload is a trace's traffic: its messages, with their arrival times and
// each recipient's destination, in arrival order.
type Workload struct {
	Start, End time.Time // first arrival; last record of the trace
	Dests      []Dest    // by index
	Msgs       []Msg     // by arrival
	Recipients int
}

// Dest is one destination of a workload.
type Dest struct {
	Channel, Host string
	Recipients    int
}

// Name is the destination as printed: channel/host.
func (d Dest) Name() string { return model.Name(d.Channel, d.Host) }

// Msg is one message of a workload.
type Msg struct {
	Arrival time.Time
	Rcpts   []int32 // each recipient's destination (an index of Workload.Dests)
}

// Loaded is what one pass over a trace gives: the workload to replay, the
// destination model, and what really happened, as a Result.
type Loaded struct {
	Workload *Workload
	Model    *model.Model
	Observed Result
	Stats    trace.Stats
	Format   trace.Format
}

// Load reads a trace to its end in one pass.
func Load(r *trace.Reader, mo model.Options, top int) (*Loaded, error) {
	b := newLoader(r.Format().ArrivalSlack())
	mb := model.NewBuilder(mo)
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("replay: reading the trace: %w", err)
		}
		b.add(rec)
		mb.Add(rec)
	}
	w := b.workload()
	if len(w.Msgs) == 0 {
		return nil, fmt.Errorf("replay: the trace holds no outcome (%d lines read, %d malformed)", r.Stats().Lines, r.Stats().Malformed)
	}
	m := mb.Model()
	obs := b.observed(w, m, top)
	return &Loaded{Workload: w, Model: m, Observed: obs, Stats: r.Stats(), Format: r.Format()}, nil
}

// loader condenses records into a workload and tallies what happened.
type loader struct {
	slack   time.Duration
	dests   map[[2]string]int32
	w       Workload
	msgs    map[string]int32 // message id → its latest instance in w.Msgs
	pending map[string]bool  // "msg\x00rcpt" of recipients whose last outcome was not final
	end     time.Time

	res      Result
	delays   []time.Duration
	refused  map[uint64]bool // sessions already counted as refused
	agents   map[string]*span
	agentSeq []string
}

// span is an agent's life as the trace shows it: first to last outcome.
type span struct{ first, last time.Time }

func newLoader(slack time.Duration) *loader {
	return &loader{
		slack: slack, dests: make(map[[2]string]int32), msgs: make(map[string]int32),
		pending: make(map[string]bool), refused: make(map[uint64]bool), agents: make(map[string]*span),
	}
}

func (b *loader) dest(channel, host string) int32 {
	k := [2]string{channel, host}
	if i, ok := b.dests[k]; ok {
		return i
	}
	i := int32(len(b.w.Dests))
	channel, host = strings.Clone(channel), strings.Clone(host)
	b.dests[[2]string{channel, host}] = i
	b.w.Dests = append(b.w.Dests, Dest{Channel: channel, Host: host})
	return i
}

func (b *loader) add(r trace.Record) {
	if r.At.After(b.end) {
		b.end = r.At
	}
	// The message instance: ids are reused (zsched's are inode numbers),
	// so an id whose arrival moved is another message.
	mi, ok := b.msgs[r.Msg]
	if ok {
		if d := r.Arrival.Sub(b.w.Msgs[mi].Arrival); d > b.slack || d < -b.slack {
			ok = false
		}
	}
	if !ok {
		mi = int32(len(b.w.Msgs))
		// The record's strings share its log line: the key is copied.
		b.msgs[strings.Clone(r.Msg)] = mi
		b.w.Msgs = append(b.w.Msgs, Msg{Arrival: r.Arrival})
		// Recipients of the id's former instance can no longer come.
		// (They stay in pending until then: a rare leak, bounded by
		// the recipients an id reuse cut off.)
	}
	// A first attempt (or an expiry without one) is a recipient not seen
	// before; a later one was seen if its earlier outcome is in the
	// trace. Only recipients not yet final are remembered.
	var key string
	seen := false
	if r.Attempt > 1 || !r.Status.Final() {
		key = r.Msg + "\x00" + r.Rcpt
		seen = r.Attempt > 1 && b.pending[key]
	}
	if !seen {
		d := b.dest(r.Channel, r.Host)
		b.w.Msgs[mi].Rcpts = append(b.w.Msgs[mi].Rcpts, d)
		b.w.Dests[d].Recipients++
		b.w.Recipients++
	}
	switch {
	case key == "":
	case r.Status.Final():
		delete(b.pending, key)
	default:
		b.pending[key] = true
	}
	b.tally(r)
}

// tally counts what the record says happened, as Result counts a
// simulation.
func (b *loader) tally(r trace.Record) {
	res := &b.res
	if r.Attempt == 1 && r.Status != trace.Gone {
		res.FirstAttempts++
		if !r.Status.Final() {
			res.FirstDeferred++
		}
	}
	switch r.Status {
	case trace.Delivered:
		res.Delivered++
		b.delays = append(b.delays, r.At.Sub(r.Arrival))
	case trace.Failed:
		res.Failed++
	case trace.Expired:
		res.Expired++
	case trace.Refused:
		if !b.refused[r.Job] {
			b.refused[r.Job] = true
			res.Refusals++
		}
	}
	if r.Agent != "" && r.Agent != "0" && r.Status != trace.Suspended && r.Status != trace.Expired {
		s := b.agents[r.Agent]
		if s == nil {
			a := strings.Clone(r.Agent)
			s = &span{first: r.At}
			b.agents[a] = s
			b.agentSeq = append(b.agentSeq, a)
		}
		s.last = r.At
	}
}

// workload sorts the messages by arrival and returns the workload.
func (b *loader) workload() *Workload {
	w := &b.w
	sort.SliceStable(w.Msgs, func(i, j int) bool { return w.Msgs[i].Arrival.Before(w.Msgs[j].Arrival) })
	// Messages whose every outcome was a reused id's are empty.
	w.Msgs = slices.DeleteFunc(w.Msgs, func(m Msg) bool { return len(m.Rcpts) == 0 })
	if len(w.Msgs) > 0 {
		w.Start = w.Msgs[0].Arrival
	}
	w.End = b.end
	b.msgs, b.pending = nil, nil
	return w
}

// observed completes the trace's own Result.
func (b *loader) observed(w *Workload, m *model.Model, top int) Result {
	res := b.res
	res.Name = "trace"
	res.Recipients = w.Recipients
	res.Pending = w.Recipients - res.Delivered - res.Failed - res.Expired
	res.Until = w.End
	res.setDelays(b.delays)
	res.AgentsStarted = len(b.agents)
	var edges []edge
	for _, a := range b.agentSeq {
		s := b.agents[a]
		edges = append(edges, edge{s.first, 1}, edge{s.last, -1})
	}
	res.PeakAgents = peak(edges)
	for _, i := range TopDests(w, top) {
		d := w.Dests[i]
		dr := DestResult{Name: d.Name(), Recipients: d.Recipients, PeakWindow: -1, AvgWindow: -1}
		if md := m.Lookup(d.Channel, d.Host); md != nil && !md.Shared {
			dr.PeakSessions = md.PeakOpen
		} else {
			dr.PeakSessions = -1
		}
		res.Top = append(res.Top, dr)
	}
	return res
}

type edge struct {
	at time.Time
	d  int
}

// peak is the most intervals open at once; an interval that ends when
// another begins does not overlap it.
func peak(es []edge) int {
	sort.SliceStable(es, func(i, j int) bool {
		if !es[i].at.Equal(es[j].at) {
			return es[i].at.Before(es[j].at)
		}
		return es[i].d < es[j].d
	})
	n, top := 0, 0
	for _, e := range es {
		n += e.d
		top = max(top, n)
	}
	return top
}

// TopDests returns the indexes of the n destinations with the most
// recipients (ties by name).
func TopDests(w *Workload, n int) []int {
	idx := make([]int, len(w.Dests))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		da, db := w.Dests[idx[a]], w.Dests[idx[b]]
		if da.Recipients != db.Recipients {
			return da.Recipients > db.Recipients
		}
		return strings.Compare(da.Name(), db.Name()) < 0
	})
	return idx[:min(n, len(idx))]
}

package daemon

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"zsched/core"
	"zsched/mailq"
)

// The census (issue 17): what waits on disk beyond the active limits,
// counted, so that mailq's totals, qshape and the metrics cover the whole
// spool and say which part is in core. The core counts what it holds,
// exactly and at once; what is only on disk is counted by a walk over the
// spool (the listing's walk: read-only, off the loop, a batch at a time)
// at most every censusEvery (longer on a large spool), and only while the core is at one of its
// limits — otherwise every message of the spool is in core (or on its way
// there) and there is nothing to count. Its figures are as old as the
// walk; the views say how old.

// censusEvery is the least time between two walks; and a walk is followed
// by at least censusIdle times its own duration without one, so that on a
// large spool the census takes a tenth of the time at most (a walk over
// 200 000 files takes a minute on a busy machine).
const (
	censusEvery = 30 * time.Second
	censusIdle  = 9
)

// censusResult is the part of the spool a walk found outside the core.
type censusResult struct {
	at         time.Time // when the walk ended; zero: never walked
	messages   int
	recipients int
	held       int       // messages on disk with a hold kept for them
	oldest     time.Time // the oldest arrival on disk only
	// hosts are the recipients by host and qshape's age buckets (ages at
	// the walk's time).
	hosts map[string][]int
	// peeked is how many control files the walk read (tests: files in
	// core, being removed, or already read by the intake are not read).
	peeked int
}

// censusState is the daemon's census; only Run's goroutine touches it.
type censusState struct {
	last    censusResult
	running bool
	next    time.Time
	walks   int // walks started (tests)
}

// censusStart holds the first walk back until censusEvery after the
// start (Run). A start on a backlog is when the core fills at once and the
// intake reads the files beyond it as fast as room frees: a walk then read
// most of them a second time, beside the intake and on the same cores —
// 8 % of the scheduler's CPU in a drain of 20 000 messages (cmd/bench),
// for a count that mailq's "files on their way into core" covers
// meanwhile. The intake reads each of those files once anyway.
func (d *Daemon) censusStart(now time.Time) {
	d.census.next = now.Add(censusEvery)
}

// censusCheck starts a walk when the core is full, files wait beyond it
// and the last walk is old enough; with room in core, or nothing beyond
// it, the last result is dropped. On the loop.
func (d *Daemon) censusCheck(now time.Time) {
	c := &d.census
	if !d.in.gate.Full(d.core) {
		if d.in.pending() == 0 && len(d.in.ready) == 0 {
			c.last = censusResult{}
		}
		return
	}
	if !d.in.beyond() {
		// A full core with every known file in it (the limits fit the
		// queue exactly, or the rest is done): a walk would read each file
		// of the core only to find it there.
		if !c.running {
			c.last = censusResult{}
		}
		return
	}
	if c.running || now.Before(c.next) {
		return
	}
	c.running = true
	c.walks++
	// The files read and waiting for room (or being read) are counted
	// from memory at the walk's end, not read again.
	read := make(map[string]bool, len(d.in.ready))
	for _, r := range d.in.ready {
		read[r.rel] = true
	}
	if j := d.in.inflight; j != nil {
		for _, r := range j.out {
			read[r.rel] = true
		}
	}
	go d.walkCensus(read)
}

// walkCensus counts the spool's messages that are not in core (its own
// goroutine) and hands the result to the loop. It reads only what the
// daemon does not know already: the names are sorted on the loop, a batch
// at a time, and a file in core (by its inode number, the name), being
// removed, or read by the intake (read: the names at the walk's start) is
// not read; the last of these are counted from the intake's memory at the
// end.
func (d *Daemon) walkCensus(read map[string]bool) {
	asHelper()
	r := censusResult{hosts: make(map[string][]int)}
	start := time.Now()
	err := d.censusWalk(&r, start, read)
	d.inLoop(func() {
		c := &d.census
		c.running = false
		c.next = d.now().Add(max(censusEvery, censusIdle*time.Since(start)))
		if err != nil {
			d.log.Warn("counting the spool", "error", err)
			return
		}
		// The files still waiting for room; those admitted meanwhile are
		// in core, those not read at the start were read by the walk.
		now := d.now()
		for _, o := range d.in.ready {
			if read[o.rel] && o.err == nil && (len(o.f.ETRNs) == 0 || o.f.ID != "") {
				q := d.describe(now, onDisk{rel: o.rel, f: o.f, qid: o.f.QueueID()})
				r.add(&q, start)
			}
		}
		r.at = now
		c.last = r
	}, loopWait)
}

// censusWalk is walkCensus's pass over the spool: r gets the files that
// are neither in core, nor being removed, nor in read.
func (d *Daemon) censusWalk(r *censusResult, start time.Time, read map[string]bool) error {
	sc := d.spool.NewScanner()
	defer sc.Close()
	names := make([]string, 0, walkBatch)
	batch := make([]onDisk, 0, walkBatch)
	for {
		var done bool
		var err error
		names, done, err = sc.Next(names[:0], walkBatch)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			var n int
			if !d.inLoop(func() { n = d.censusUnknown(names, read) }, loopWait) {
				return errLoop
			}
			names = names[:n]
		}
		batch = batch[:0]
		for _, rel := range names {
			f, data, err := d.spool.Peek(rel)
			r.peeked++
			if err != nil || len(f.ETRNs) > 0 && f.ID == "" {
				continue // vanished, unreadable (the listing says so), an ETRN request
			}
			batch = append(batch, onDisk{rel: rel, f: f, data: data, qid: f.QueueID()})
		}
		if len(batch) > 0 {
			if !d.inLoop(func() {
				now := d.now()
				for _, o := range batch {
					q := d.describe(now, o)
					if !q.InCore {
						r.add(&q, start)
					}
				}
			}, loopWait) {
				return errLoop
			}
		}
		clear(batch)
		if done {
			return nil
		}
	}
}

// censusUnknown moves to the front of names those the census must read:
// not in core, not being removed, not read by the intake. It returns how
// many. On the loop.
func (d *Daemon) censusUnknown(names []string, read map[string]bool) int {
	n := 0
	for _, rel := range names {
		if inum, ok := inumOf(rel); ok && d.core.Has(inum) {
			continue
		}
		if _, ok := d.in.removing[rel]; ok || read[rel] {
			continue
		}
		names[n] = rel
		n++
	}
	return n
}

// add counts a message that is on disk only.
func (r *censusResult) add(q *mailq.Message, start time.Time) {
	r.messages++
	r.recipients += len(q.Recipients)
	if q.Held {
		r.held++
	}
	if !q.Arrival.IsZero() && (r.oldest.IsZero() || q.Arrival.Before(r.oldest)) {
		r.oldest = q.Arrival
	}
	b := ageBucket(start.Sub(q.Arrival))
	for _, rc := range q.Recipients {
		h := r.hosts[rc.Host]
		if h == nil {
			h = make([]int, len(qshapeBuckets)+1)
			r.hosts[rc.Host] = h
		}
		h[b]++
	}
}

// ageBucket is the qshape column of a message of age a.
func ageBucket(a time.Duration) int {
	return sort.Search(len(qshapeBuckets), func(i int) bool { return a < time.Duration(qshapeBuckets[i])*time.Minute })
}

// spoolLines are mailq's last lines: the whole spool, which part of it is
// in core, and what no clause routes (its mail is in no thread above).
func (d *Daemon) spoolLines(now time.Time) []string {
	g := d.core.Gauges(now, 0)
	c := d.census.last
	var out []string
	for _, u := range d.core.UnroutedViews() {
		out = append(out, fmt.Sprintf("Unrouted: %s/%s msgs %d rcpts %d QA=%s (no clause selects it)",
			u.Channel, u.Host, u.Messages, u.Recipients, age(now.Sub(u.Oldest))))
	}
	line := fmt.Sprintf("Spool: Msgs %d Rcpnts %d; in core Msgs %d Rcpnts %d",
		g.Messages+c.messages, g.Recipients+c.recipients, g.Messages, g.Recipients)
	if !c.at.IsZero() {
		line += fmt.Sprintf("; on disk only Msgs %d Rcpnts %d (counted %s ago; scheduler queue lists them)",
			c.messages, c.recipients, age(now.Sub(c.at)))
	} else if pend := d.in.pending() + len(d.in.ready); pend > 0 {
		line += fmt.Sprintf("; %d files on their way into core", pend)
	}
	return append(out, line)
}

// shapeSpool adds the census's disk-only recipients to qshape's rows.
func (d *Daemon) shapeSpool(rows []core.ShapeRow, top int) []core.ShapeRow {
	c := d.census.last
	if len(rows) == 0 {
		return rows
	}
	by := make(map[string]*core.ShapeRow)
	total := rows[0]
	total.Counts = append([]int(nil), total.Counts...)
	var list []core.ShapeRow
	for _, r := range rows[1:] {
		r.Counts = append([]int(nil), r.Counts...)
		list = append(list, r)
	}
	for i := range list {
		by[list[i].Host] = &list[i]
	}
	hosts := make([]string, 0, len(c.hosts))
	for h := range c.hosts {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		counts := c.hosts[h]
		r := by[h]
		if r == nil {
			list = append(list, core.ShapeRow{Host: h, Counts: make([]int, len(counts))})
			r = &list[len(list)-1]
			for i := range list {
				by[list[i].Host] = &list[i]
			}
		}
		for i, n := range counts {
			r.Counts[i] += n
			r.Total += n
			total.Counts[i] += n
			total.Total += n
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Total != list[j].Total {
			return list[i].Total > list[j].Total
		}
		return list[i].Host < list[j].Host
	})
	if top > 0 && len(list) > top {
		list = list[:top]
	}
	return append([]core.ShapeRow{total}, list...)
}

// qshapeNote says which part of qshape's counts is in core.
func (d *Daemon) qshapeNote(now time.Time) string {
	g := d.core.Gauges(now, 0)
	c := d.census.last
	if c.at.IsZero() {
		return "# recipients in core: " + strconv.Itoa(g.Recipients) + " (the whole spool)"
	}
	return fmt.Sprintf("# recipients in core: %d; on disk only: %d (counted %s ago)", g.Recipients, c.recipients, age(now.Sub(c.at)))
}

// The spool's metrics.
var (
	descSpoolMessages   = prometheus.NewDesc("zsched_spool_messages", "Messages in the spool, in core or on disk only.", []string{"where"}, nil)
	descSpoolRecipients = prometheus.NewDesc("zsched_spool_recipients", "Pending recipients in the spool, in core or on disk only.", []string{"where"}, nil)
	descOldest          = prometheus.NewDesc("zsched_oldest_message_age_seconds", "Age of the oldest message in the spool.", nil, nil)
	descHeld            = prometheus.NewDesc("zsched_held", "Operator holds: messages held (in core and on disk) and destination holds.", []string{"kind"}, nil)
)

// spoolCollector reads the spool's figures on the loop at scrape time.
type spoolCollector struct{ d *Daemon }

func (c *spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSpoolMessages, descSpoolRecipients, descOldest, descHeld} {
		ch <- d
	}
}

func (c *spoolCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	var g core.Gauges
	var cs censusResult
	var oldest time.Time
	var heldMsgs, heldDests int
	var now time.Time
	if !d.inLoop(func() {
		now = d.now()
		g, cs = d.core.Gauges(now, 0), d.census.last
		oldest = d.core.Oldest()
		heldMsgs, heldDests = len(d.holds.msgs), len(d.holds.dests)
	}, scrapeWait) {
		return
	}
	if !cs.oldest.IsZero() && (oldest.IsZero() || cs.oldest.Before(oldest)) {
		oldest = cs.oldest
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	gauge(descSpoolMessages, float64(g.Messages), "core")
	gauge(descSpoolMessages, float64(cs.messages), "disk")
	gauge(descSpoolRecipients, float64(g.Recipients), "core")
	gauge(descSpoolRecipients, float64(cs.recipients), "disk")
	age := 0.0
	if !oldest.IsZero() {
		age = now.Sub(oldest).Seconds()
	}
	gauge(descOldest, age)
	gauge(descHeld, float64(heldMsgs), "message")
	gauge(descHeld, float64(heldDests), "destination")
}

// QueueSpool is the whole spool in mailq's JSON: in core, and on disk only
// as last counted (CountedAt; null when all of it is in core).
type QueueSpool struct {
	Messages         int        `json:"messages"`
	Recipients       int        `json:"recipients"`
	CoreMessages     int        `json:"core_messages"`
	CoreRecipients   int        `json:"core_recipients"`
	DiskOnlyMessages int        `json:"disk_only_messages"`
	DiskOnlyRcpts    int        `json:"disk_only_recipients"`
	CountedAt        *time.Time `json:"counted_at"`
}

func (d *Daemon) spoolTotals(now time.Time) QueueSpool {
	g := d.core.Gauges(now, 0)
	c := d.census.last
	return QueueSpool{Messages: g.Messages + c.messages, Recipients: g.Recipients + c.recipients,
		CoreMessages: g.Messages, CoreRecipients: g.Recipients, DiskOnlyMessages: c.messages,
		DiskOnlyRcpts: c.recipients, CountedAt: timePtr(c.at)}
}

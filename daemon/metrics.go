package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"zsched/core"
)

// windowTop is how many of the busiest destinations export their window:
// a per-destination series for every host of a big queue would swamp
// Prometheus.
const windowTop = 20

// scrapeWait bounds how long a scrape waits for the loop to read the core.
const scrapeWait = 5 * time.Second

// metrics are the daemon's Prometheus metrics, in a registry of its own.
// Counters and the histogram are updated on the loop as outcomes are logged
// and job lines written; gauges are read from the core on the loop at
// scrape time, so they are exact and need no lock on scheduling state.
type metrics struct {
	reg      *prometheus.Registry
	outcomes *prometheus.CounterVec
	// byStatus caches outcomes' counter per status word: a few words,
	// counted once per recipient, where WithLabelValues hashes the label
	// every time.
	byStatus map[string]prometheus.Counter
	latency  prometheus.Histogram
	// observed counts the core's observations by kind, indexed by it.
	observed []prometheus.Counter
	srv      *http.Server
	ln       *capListener
	addr     net.Addr
}

func (d *Daemon) startMetrics() (*metrics, error) {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "zsched_outcomes_total",
		Help: "Recipient outcomes by status word (ok ok2 ok3 error error2 deferred deferback retryat deferall, expired, gone).",
	}, []string{"status"})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "zsched_dispatch_latency_seconds",
		Help:    "Time from a vertex becoming due (arrival, retry time, end of back-off, release) to its job line being written to an agent.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 22),
	})
	obs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "zsched_observations_total",
		Help: "What the core observed, by kind: feedback (deliveries judged), dead, revived, retry_due, ceiling_learned, ceiling_confirmed, ceiling_forgotten, transport_works, reloaded, etrn.",
	}, []string{"kind"})
	kinds := core.ObservedKinds()
	m.observed = make([]prometheus.Counter, len(kinds)+1)
	for _, k := range kinds {
		m.observed[k] = obs.WithLabelValues(k.String())
	}
	m.reg.MustRegister(m.outcomes, m.latency, obs, &gaugeCollector{d: d}, &spoolCollector{d: d}) // census.go
	if d.cfg.Cluster != nil {
		m.reg.MustRegister(&clusterCollector{d: d}) // cluster.go
	}
	listen := d.cfg.Scheduler.MetricsListen
	if listen == "" {
		return m, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("daemon: metrics_listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Timeout: 2 * scrapeWait}))
	m.srv, m.ln = serveMetrics(ln, mux, d.log.Named("metrics"), metricsLimits())
	m.addr = ln.Addr()
	d.log.Info("metrics", "listen", m.addr.String(), "max_conns", m.ln.max)
	return m, nil
}

// listenLimits bound what the metrics listener's clients can hold: a
// client that connects and says nothing, trickles a request, never reads
// the answer or keeps an idle connection open holds a descriptor, and
// descriptors run out for the spool and the agents (issue 16: idle metrics
// connections exhausted them and good mail was quarantined).
type listenLimits struct {
	maxConns   int           // connections open at once; one more is closed at once
	readHeader time.Duration // from accepting a connection (or the next request's first byte) to the end of its header
	read       time.Duration // the whole request, body included
	write      time.Duration // from the end of the request header to the end of the answer
	idle       time.Duration // a kept-alive connection between requests
}

// metricsLimits are the metrics listener's limits: a scrape waits for
// the loop at most 2×scrapeWait (promhttp's Timeout) before it writes.
func metricsLimits() listenLimits {
	return listenLimits{
		maxConns:   16,
		readHeader: 5 * time.Second,
		read:       10 * time.Second,
		write:      2*scrapeWait + 5*time.Second,
		idle:       time.Minute,
	}
}

// serveMetrics serves h on ln within lim until the server is shut down. An
// accept error such as EMFILE or ENFILE does not end it: net/http's Serve
// backs off (5 ms doubling to 1 s) and accepts again, logging each retry
// through log.
func serveMetrics(ln net.Listener, h http.Handler, log hclog.Logger, lim listenLimits) (*http.Server, *capListener) {
	cl := &capListener{Listener: ln, max: lim.maxConns, log: log}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
	}
	go func() {
		asHelper()
		if err := srv.Serve(cl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "error", err)
		}
	}()
	return srv, cl
}

// capListener hands out at most max connections at once. A connection
// beyond that is closed as soon as it is accepted, so it holds a
// descriptor for an instant only (a listener that stopped accepting would
// leave scrapers hanging in the backlog instead of failing). Refusals are
// logged once per minute at most, with their count.
type capListener struct {
	net.Listener
	max int
	log hclog.Logger

	open         atomic.Int64
	acceptErrors atomic.Int64 // accept calls that failed (EMFILE…), for tests

	mu        sync.Mutex
	refused   int // since the last log line
	lastLog   time.Time
	totalRefd int
}

// refuseLogEvery is how often refused connections are logged at most.
const refuseLogEvery = time.Minute

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.acceptErrors.Add(1)
			return nil, err
		}
		if l.open.Add(1) <= int64(l.max) {
			return &capConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		c.Close()
		l.refuse(c.RemoteAddr())
	}
}

func (l *capListener) refuse(peer net.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused++
	l.totalRefd++
	if now := time.Now(); now.Sub(l.lastLog) >= refuseLogEvery {
		l.log.Warn("metrics connection refused: too many open", "max_conns", l.max, "peer", peer.String(),
			"refused", l.refused, "refused_total", l.totalRefd)
		l.lastLog, l.refused = now, 0
	}
}

// capConn gives its slot back when it is closed, once.
type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// MetricsAddr returns the metrics listener's address, or "".
func (d *Daemon) MetricsAddr() string {
	if d.operator.metrics == nil || d.operator.metrics.addr == nil {
		return ""
	}
	return d.operator.metrics.addr.String()
}

func (m *metrics) close() {
	if m == nil || m.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	m.srv.Shutdown(ctx)
}

func (m *metrics) outcome(status string) {
	if m == nil {
		return
	}
	c, ok := m.byStatus[status]
	if !ok {
		c = m.outcomes.WithLabelValues(status)
		if m.byStatus == nil {
			m.byStatus = make(map[string]prometheus.Counter)
		}
		m.byStatus[status] = c
	}
	c.Inc()
}

func (m *metrics) observation(k core.Observed) {
	if m != nil && int(k) < len(m.observed) && m.observed[k] != nil {
		m.observed[k].Inc()
	}
}

func (m *metrics) dispatched(latency time.Duration) {
	if m != nil {
		m.latency.Observe(latency.Seconds())
	}
}

var (
	descMessages   = prometheus.NewDesc("zsched_queue_messages", "Messages in core.", nil, nil)
	descVertices   = prometheus.NewDesc("zsched_queue_vertices", "Vertices (message × destination) in core.", nil, nil)
	descRecipients = prometheus.NewDesc("zsched_queue_recipients", "Pending recipients in core.", nil, nil)
	descThreads    = prometheus.NewDesc("zsched_threads", "Destinations (threads) by state.", []string{"state"}, nil)
	descAgents     = prometheus.NewDesc("zsched_agents", "Transport agents by state.", []string{"state"}, nil)
	descWindow     = prometheus.NewDesc("zsched_destination_window",
		fmt.Sprintf("Concurrency window of the %d busiest destinations (0 = dead).", windowTop), []string{"channel", "host"}, nil)
	descCeiling = prometheus.NewDesc("zsched_destination_ceiling",
		fmt.Sprintf("Learned concurrency ceiling of the %d busiest destinations (0 = none).", windowTop), []string{"channel", "host"}, nil)
	descBusy = prometheus.NewDesc("zsched_destination_busy",
		fmt.Sprintf("Sessions on each of the %d busiest destinations: agents attached and jobs borrowed by agents of other destinations (feed = \"message\").", windowTop), []string{"channel", "host"}, nil)
	descDestBorrowed = prometheus.NewDesc("zsched_destination_borrowed",
		fmt.Sprintf("Of zsched_destination_busy, the jobs borrowed by agents attached to other destinations (feed = \"message\"), for the %d busiest destinations.", windowTop), []string{"channel", "host"}, nil)
	descBorrowed = prometheus.NewDesc("zsched_sessions_borrowed",
		"Sessions held by jobs fed to agents attached to another destination than the job's (feed = \"message\"), every destination's.", nil, nil)
	descArrived = prometheus.NewDesc("zsched_messages_arrived_total", "Messages read into core.", nil, nil)
	descSpawned = prometheus.NewDesc("zsched_agents_started_total", "Transport agents started.", nil, nil)
	descKilled  = prometheus.NewDesc("zsched_agents_killed_total", "Transport agents killed (job timeout, garbage, overlong lines).", nil, nil)
	descUnavail = prometheus.NewDesc("zsched_transports_throttled",
		"Rings whose transport may not start an agent now: its agents failed at start (transport_retry_time back-off or waiting for a probe).", nil, nil)
	descThrottles = prometheus.NewDesc("zsched_transport_throttles_total",
		"Transport throttles: a ring's agent exited before its first #hungry, died with jobs outstanding or could not be started.", nil, nil)
)

// gaugeCollector reads the core's gauges on the loop at scrape time.
type gaugeCollector struct{ d *Daemon }

func (c *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMessages, descVertices, descRecipients, descThreads,
		descAgents, descWindow, descCeiling, descBusy, descDestBorrowed, descBorrowed, descArrived, descSpawned, descKilled,
		descUnavail, descThrottles} {
		ch <- d
	}
}

func (c *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	var g core.Gauges
	var n core.Counters
	d := c.d
	if !d.inLoop(func() { g, n = d.core.Gauges(d.now(), windowTop), d.core.Counters() }, scrapeWait) {
		return
	}
	gauge := func(desc *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v))
	}
	gauge(descMessages, g.Messages)
	gauge(descVertices, g.Vertices)
	gauge(descRecipients, g.Recipients)
	for _, st := range core.ThreadStates() {
		gauge(descThreads, g.Threads[st], st.String())
	}
	for state, k := range g.Agents {
		gauge(descAgents, k, state)
	}
	for _, w := range g.Busiest {
		gauge(descWindow, w.Window, w.Channel, w.Host)
		gauge(descCeiling, w.Ceiling, w.Channel, w.Host)
		gauge(descBusy, w.Busy, w.Channel, w.Host)
		gauge(descDestBorrowed, w.Borrowed, w.Channel, w.Host)
	}
	gauge(descBorrowed, g.Borrowed)
	counter(descArrived, n.Arrived)
	counter(descSpawned, n.Spawned)
	counter(descKilled, n.Killed)
	gauge(descUnavail, g.Throttled)
	counter(descThrottles, n.Throttles)
}

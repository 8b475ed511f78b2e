package daemon

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"zsched/cluster"
	"zsched/cluster/redisbook"
	"zsched/window"
)

// clusterLink is a node's link to the store its destinations' windows
// live in ([cluster], DESIGN §13): the core holds an Outbox whose requests
// go to the Redis book after each batch, and the book's answers come back
// to the core as Window events on the loop. Without [cluster] there is
// none and the core keeps its own windows.
type clusterLink struct {
	book *redisbook.Book
	out  *window.Outbox
}

// startCluster connects the core to the store of cfg.Cluster, if any. It
// does not wait for Redis: until the store answers, the book's fallback
// windows do.
func (d *Daemon) startCluster() error {
	cc := d.cfg.Cluster
	if cc == nil {
		return nil
	}
	b, err := redisbook.New(*cc, redisbook.Options{Log: d.log.Named("cluster"), Clock: d.now})
	if err != nil {
		return fmt.Errorf("daemon: cluster: %w", err)
	}
	// go-redis logs through one process-wide logger: its lines become
	// this daemon's events (redisbook.RouteLogs).
	redisbook.RouteLogs(d.log.Named("cluster").Named("redis"))
	d.cluster = &clusterLink{book: b, out: &window.Outbox{}}
	d.core.UseBook(d.cluster.out)
	d.log.Info("cluster", "node", cc.Node, "store", cc.Redacted(), "lease", cc.Lease.String())
	return nil
}

// seedCluster gives the book what the state file remembered (loadState
// gave it to the core first): the last shared windows this node saw, from
// which its fallback windows start while the store cannot be reached.
func (d *Daemon) seedCluster() {
	if d.cluster == nil {
		return
	}
	ds := d.core.Destinations(d.now())
	rs := make([]redisbook.Remembered, 0, len(ds))
	for _, x := range ds {
		rs = append(rs, redisbook.Remembered{Dest: window.Dest{Channel: x.Channel, Host: x.Host}, Window: x.Window,
			DeadUntil: x.DeadUntil})
	}
	d.cluster.book.Restore(rs)
}

// pushBook hands the book what the core asked of it since the last time.
func (d *Daemon) pushBook() {
	if d.cluster == nil {
		return
	}
	if reqs := d.cluster.out.Take(); len(reqs) > 0 {
		d.cluster.book.Do(d.now(), reqs)
	}
}

// bookEvents is the book's answers; nil (never ready) without [cluster].
func (d *Daemon) bookEvents() <-chan []window.Event {
	if d.cluster == nil {
		return nil
	}
	return d.cluster.book.Events()
}

// stopCluster ends the link: the store drops this node's leases and its
// place among the live nodes (or they expire if it cannot be reached).
func (d *Daemon) stopCluster() {
	if d.cluster == nil {
		return
	}
	d.pushBook() // the releases of the last sessions
	if err := d.cluster.book.Close(); err != nil {
		d.log.Warn("cluster: closing the link to the store", "error", err)
	}
	d.cluster = nil
}

// ClusterStatus returns the node's view of its cluster, and false
// without [cluster].
func (d *Daemon) ClusterStatus() (cluster.Status, bool) {
	if d.cluster == nil {
		return cluster.Status{}, false
	}
	return d.cluster.book.Status(), true
}

var (
	descClusterMode = prometheus.NewDesc("zsched_cluster_mode",
		"The node's link to the shared store: 1 for the mode it is in (connecting, shared, fallback), 0 for the others.", []string{"mode"}, nil)
	descClusterNodes      = prometheus.NewDesc("zsched_cluster_nodes", "Live nodes sharing the store, at its last answer.", nil, nil)
	descClusterLeases     = prometheus.NewDesc("zsched_cluster_leases", "Sessions this node holds leases for.", nil, nil)
	descClusterFallbacks  = prometheus.NewDesc("zsched_cluster_fallbacks_total", "Times the node fell back to local windows because the store was unreachable.", nil, nil)
	descClusterReconnects = prometheus.NewDesc("zsched_cluster_reconnects_total", "Times the node came back to the store.", nil, nil)
)

// clusterCollector exports the cluster Status; it reads the book's own
// lock, not the loop.
type clusterCollector struct{ d *Daemon }

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClusterMode, descClusterNodes, descClusterLeases,
		descClusterFallbacks, descClusterReconnects} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	var st cluster.Status
	var ok bool
	if !c.d.inLoop(func() { st, ok = c.d.ClusterStatus() }, scrapeWait) || !ok {
		return
	}
	for _, m := range []cluster.Mode{cluster.Connecting, cluster.Shared, cluster.Fallback} {
		v := 0.0
		if st.Mode == m {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descClusterMode, prometheus.GaugeValue, v, m.String())
	}
	ch <- prometheus.MustNewConstMetric(descClusterNodes, prometheus.GaugeValue, float64(st.Nodes))
	ch <- prometheus.MustNewConstMetric(descClusterLeases, prometheus.GaugeValue, float64(st.Leases))
	ch <- prometheus.MustNewConstMetric(descClusterFallbacks, prometheus.CounterValue, float64(st.Fallbacks))
	ch <- prometheus.MustNewConstMetric(descClusterReconnects, prometheus.CounterValue, float64(st.Reconnects))
}

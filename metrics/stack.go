package metrics

import (
	"reflect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/stack"
)

// StackCollector exports every counter of a stack as Prometheus metrics,
// read fresh on each scrape: gVisor's counters, each NIC's link and qdisc
// counters, the qdisc contention profile and WritePacket latency, and busy
// polling. It is safe for concurrent use.
type StackCollector struct {
	st *stack.Stack
}

var _ Collector = (*StackCollector)(nil)

// NewStack returns a collector for st.
func NewStack(st *stack.Stack) *StackCollector { return &StackCollector{st: st} }

var (
	gvisorDesc = prometheus.NewDesc("ustack_gvisor_total", "A counter of gVisor's tcpip.Stats, by field path.", []string{"counter"}, nil)
	nicDesc    = prometheus.NewDesc("ustack_nic_gvisor_total", "A counter of gVisor's per-NIC stats, by field path.", []string{"nic", "counter"}, nil)
	linkDesc   = prometheus.NewDesc("ustack_link_total", "A counter of the NIC's link endpoint (link.Stats field).", []string{"nic", "counter"}, nil)
	qdiscDesc  = prometheus.NewDesc("ustack_qdisc_total", "A counter of the NIC's queueing discipline.", []string{"nic", "qdisc", "counter"}, nil)
	backlog    = prometheus.NewDesc("ustack_qdisc_backlog_packets", "Packets queued in the NIC's qdisc.", []string{"nic", "qdisc"}, nil)
	lockCont   = prometheus.NewDesc("ustack_qdisc_lock_contended_total", "Contended acquisitions of a qdisc lock.", []string{"nic", "qdisc", "lock"}, nil)
	lockAcq    = prometheus.NewDesc("ustack_qdisc_lock_acquired_total", "Acquisitions of a qdisc lock.", []string{"nic", "qdisc", "lock"}, nil)
	lockWait   = prometheus.NewDesc("ustack_qdisc_lock_wait_seconds_total", "Time waited for a qdisc lock (estimated from sampled waits).", []string{"nic", "qdisc", "lock"}, nil)
	latency    = prometheus.NewDesc("ustack_qdisc_writepacket_seconds", "WritePacket duration, sampled one call in 16.", []string{"nic", "qdisc"}, nil)
	pollDesc   = prometheus.NewDesc("ustack_busypoll_total", "A counter of busy-polling readers (poll.Stats field).", []string{"counter"}, nil)
	pollSpin   = prometheus.NewDesc("ustack_busypoll_spin_seconds_total", "CPU time readers spent busy polling.", nil, nil)
	pollBudget = prometheus.NewDesc("ustack_busypoll_budget_seconds", "The budget a busy-polling wait gets now.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *StackCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gvisorDesc, nicDesc, linkDesc, qdiscDesc, backlog, lockCont, lockAcq, lockWait, latency, pollDesc, pollSpin, pollBudget} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StackCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, k := range stack.CounterNames(st.GVisor) {
		counter(gvisorDesc, st.GVisor[k], k)
	}
	for _, n := range st.NICs {
		for _, k := range stack.CounterNames(n.GVisor) {
			counter(nicDesc, n.GVisor[k], n.Name, k)
		}
		if n.HasLink {
			for name, v := range fields(n.Link) {
				counter(linkDesc, v, n.Name, name)
			}
		}
		if !n.HasQdiscStats {
			continue
		}
		q := n.QdiscStats
		for name, v := range map[string]uint64{
			"offered": q.Offered, "enqueued": q.Enqueued, "bypassed": q.Bypassed, "handed_off": q.HandedOff, "sent": q.Sent, "bytes": q.Bytes,
			"batches": q.Batches, "requeued": q.Requeued, "quota_handoffs": q.QuotaHandoffs, "link_full": q.LinkFull,
			"writable_wakeups": q.WritableWakeups, "timer_retries": q.TimerRetries,
			"refused_overlimit": q.Refused.Overlimit, "refused_burst": q.Refused.Burst, "refused_closed": q.Refused.Closed, "refused_link": q.Refused.Link,
			"dropped_overlimit": q.Dropped.Overlimit, "dropped_burst": q.Dropped.Burst, "dropped_closed": q.Dropped.Closed, "dropped_link": q.Dropped.Link,
		} {
			counter(qdiscDesc, v, n.Name, n.Qdisc, name)
		}
		ch <- prometheus.MustNewConstMetric(backlog, prometheus.GaugeValue, float64(q.Backlog), n.Name, n.Qdisc)
		for _, l := range q.Locks {
			counter(lockCont, l.Contended, n.Name, n.Qdisc, l.Name)
			counter(lockAcq, l.Acquisitions, n.Name, n.Qdisc, l.Name)
			ch <- prometheus.MustNewConstMetric(lockWait, prometheus.CounterValue, l.TotalWait.Seconds(), n.Name, n.Qdisc, l.Name)
		}
		buckets := map[float64]uint64{}
		var cum uint64
		var sum float64
		for i, v := range q.Latency {
			cum += v
			upper := 1.0
			if i > 0 {
				upper = float64(uint64(1) << i)
				sum += float64(v) * upper * 0.75 // the bucket's middle
			}
			buckets[upper/1e9] = cum
		}
		ch <- prometheus.MustNewConstHistogram(latency, cum, sum/1e9, buckets, n.Name, n.Qdisc)
	}
	if p := st.BusyPoll; p.Mode != "off" {
		for name, v := range map[string]uint64{
			"waits": p.Waits, "polls": p.Polls, "polls_found": p.PollsFound, "hits": p.Hits, "runnable_exits": p.RunnableExits,
			"budget_exhausted": p.BudgetExhausted, "parks": p.Parks, "probes": p.Probes, "watchdog_rearms": p.WatchdogRearms,
		} {
			counter(pollDesc, v, name)
		}
		ch <- prometheus.MustNewConstMetric(pollSpin, prometheus.CounterValue, p.SpinTime.Seconds())
		ch <- prometheus.MustNewConstMetric(pollBudget, prometheus.GaugeValue, p.Budget.Seconds())
	}
}

// fields lists the uint64 fields of a link.Stats by name.
func fields(s link.Stats) map[string]uint64 {
	out := map[string]uint64{}
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			out[v.Type().Field(i).Name] = f.Uint()
		}
	}
	return out
}

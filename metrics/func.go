package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Family describes one metric family that a package reports through
// NewFunc without importing Prometheus.
type Family struct {
	// Name is the metric's name, such as "ustack_serve_total".
	Name string
	// Help says what it counts.
	Help string
	// Labels name the label values each Emit of it passes, in order.
	Labels []string
	// Gauge marks a value that goes up and down; otherwise it is a counter.
	Gauge bool
}

// Emit reports one value of f, with one label value per f.Labels.
type Emit func(f *Family, v float64, labels ...string)

// funcCollector is a Collector of fixed families whose values a function
// reports, read fresh on each scrape.
type funcCollector struct {
	descs   map[*Family]*prometheus.Desc
	collect func(Emit)
}

// NewFunc returns a Collector of fams whose values collect reports, on
// each scrape, by calling emit once per value. collect must emit only the
// families in fams; it may run concurrently with itself.
func NewFunc(fams []*Family, collect func(emit Emit)) Collector {
	c := &funcCollector{descs: make(map[*Family]*prometheus.Desc, len(fams)), collect: collect}
	for _, f := range fams {
		c.descs[f] = prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *funcCollector) Collect(ch chan<- prometheus.Metric) {
	c.collect(func(f *Family, v float64, labels ...string) {
		d, ok := c.descs[f]
		if !ok {
			// A programming error in the reporting package: say which.
			panic(fmt.Sprintf("metrics: family %q emitted but not declared to NewFunc", f.Name))
		}
		t := prometheus.CounterValue
		if f.Gauge {
			t = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	})
}

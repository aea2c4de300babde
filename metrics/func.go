package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ustack-dev/ustack/metrics/family"
)

// funcCollector is a Collector of fixed families whose values a function
// reports, read fresh on each scrape.
type funcCollector struct {
	descs   map[*family.Family]*prometheus.Desc
	collect func(family.Emit)
}

// NewFunc returns a Collector of src's families, whose values src.Collect
// reports on each scrape.
func NewFunc(src family.Source) Collector {
	c := &funcCollector{descs: make(map[*family.Family]*prometheus.Desc, len(src.Families)), collect: src.Collect}
	for _, f := range src.Families {
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
	c.collect(func(f *family.Family, v float64, labels ...string) {
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

// Package family describes counters for export without importing any
// exporter: a library package (sandbox, for one) lists its metric families
// and reports their values through an Emit function, and package metrics
// turns that into Prometheus collectors for the commands. It keeps the
// Prometheus client out of an embedder's build.
package family

// Family describes one metric family.
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

// Source is a fixed set of families and the function that reports their
// current values, called once per export (a Prometheus scrape). Collect
// must emit only the families in Families; it may run concurrently with
// itself.
type Source struct {
	Families []*Family
	Collect  func(emit Emit)
}

package serve

import (
	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/metrics/family"
)

// The services' metric families; the host's stack is exported by
// metrics.NewStack.
var (
	svcFamily    = &family.Family{Name: "ustack_serve_total", Help: "A counter of the serve command's services.", Labels: []string{"counter"}}
	activeFamily = &family.Family{Name: "ustack_serve_active_connections", Help: "TCP connections the services hold open.", Gauge: true}
)

// NewCollector returns a collector of svc's counters, read fresh on each
// scrape, for metrics.Serve.
func NewCollector(svc *Services) metrics.Collector {
	return metrics.NewFunc(family.Source{Families: []*family.Family{svcFamily, activeFamily}, Collect: func(emit family.Emit) {
		for name, v := range map[string]uint64{
			"accepted": svc.Accepted.Load(), "echoed_bytes": svc.EchoedBytes.Load(), "discarded_bytes": svc.DiscardedBytes.Load(),
			"udp_echoed": svc.UDPEchoed.Load(), "udp_discarded": svc.UDPDiscarded.Load(), "http_requests": svc.HTTPRequests.Load(), "http_bytes": svc.HTTPBytes.Load(),
		} {
			emit(svcFamily, float64(v), name)
		}
		emit(activeFamily, float64(svc.Active.Load()))
	}})
}

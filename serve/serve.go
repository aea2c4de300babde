package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// Config describes a host to serve.
type Config struct {
	// Endpoint is the link the host runs on. The host owns it from New on
	// and closes it in Close, also when New fails.
	Endpoint gstack.LinkEndpoint
	// Name names the NIC (in stats and metrics); "" means "eth0".
	Name string
	// Addrs are the host's addresses with their prefix lengths.
	Addrs []netip.Prefix
	// Gateways are default gateways, at most one per IP version.
	Gateways []netip.Addr
	// Qdisc names the NIC's queueing discipline; "" means sched.None.
	Qdisc string
	// Stack tunes the stack; nil means the defaults.
	Stack *stack.Options
	// Ports says which services run.
	Ports Ports
	// Metrics is a host (kernel) address to serve Prometheus metrics on,
	// such as "127.0.0.1:9100"; "" turns metrics off.
	Metrics string
}

// Host is a running server: a stack on a link with its services.
type Host struct {
	st      *stack.Stack
	svc     *Services
	metrics *MetricsServer
}

// New builds the stack, starts the services and the metrics endpoint.
func New(cfg Config) (*Host, error) {
	if cfg.Endpoint == nil {
		return nil, errors.New("serve: no link endpoint")
	}
	if len(cfg.Addrs) == 0 {
		cfg.Endpoint.Close()
		return nil, errors.New("serve: no address: give the host at least one CIDR")
	}
	if cfg.Name == "" {
		cfg.Name = "eth0"
	}
	st, err := stack.New(cfg.Stack)
	if err != nil {
		cfg.Endpoint.Close()
		return nil, err
	}
	h := &Host{st: st}
	fail := func(err error) (*Host, error) {
		h.Close()
		return nil, err
	}
	id, err := st.AddNIC(cfg.Endpoint, &stack.NICOptions{Name: cfg.Name, Qdisc: cfg.Qdisc})
	if err != nil {
		cfg.Endpoint.Close()
		return fail(err)
	}
	// One listener per service: on [::] if the host has IPv6 (gVisor's
	// IPv6 sockets are dual-stack, so it takes IPv4 too), else 0.0.0.0.
	families := []netip.Addr{netip.IPv4Unspecified()}
	for _, p := range cfg.Addrs {
		if err := st.AddAddress(id, p); err != nil {
			return fail(err)
		}
		if p.Addr().Unmap().Is6() {
			families[0] = netip.IPv6Unspecified()
		}
	}
	for _, gw := range cfg.Gateways {
		if err := st.SetDefaultGateway(gw, id); err != nil {
			return fail(err)
		}
	}
	if h.svc, err = Start(st, families, cfg.Ports, nil); err != nil {
		return fail(err)
	}
	if cfg.Metrics != "" {
		if h.metrics, err = ServeMetrics(cfg.Metrics, NewCollector(st, h.svc)); err != nil {
			return fail(fmt.Errorf("serve: %w", err))
		}
	}
	return h, nil
}

// Stack returns the host's stack.
func (h *Host) Stack() *stack.Stack { return h.st }

// Services returns the host's services.
func (h *Host) Services() *Services { return h.svc }

// MetricsAddr returns where metrics are served, or "" if they are off.
func (h *Host) MetricsAddr() string {
	if h.metrics == nil {
		return ""
	}
	return h.metrics.Addr()
}

// Close stops the metrics endpoint and the services, then the stack (which
// closes the link). Idempotent.
func (h *Host) Close() error {
	if h.metrics != nil {
		h.metrics.Close()
		h.metrics = nil
	}
	if h.svc != nil {
		h.svc.Close()
	}
	return h.st.Close()
}

// Run serves until ctx ends, then shuts down cleanly, logging what it
// serves to log.
func Run(ctx context.Context, cfg Config, log io.Writer) error {
	h, err := New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "ustack serve: %v on %s (qdisc %s)", cfg.Addrs, cfg.Name, qdiscName(cfg.Qdisc))
	if cfg.Ports.Echo != 0 {
		fmt.Fprintf(log, ", echo %d", cfg.Ports.Echo)
	}
	if cfg.Ports.Discard != 0 {
		fmt.Fprintf(log, ", discard %d", cfg.Ports.Discard)
	}
	if cfg.Ports.HTTP != 0 {
		fmt.Fprintf(log, ", http %d", cfg.Ports.HTTP)
	}
	if a := h.MetricsAddr(); a != "" {
		fmt.Fprintf(log, ", metrics http://%s/metrics", a)
	}
	fmt.Fprintln(log)
	<-ctx.Done()
	fmt.Fprintln(log, "ustack serve: shutting down")
	return h.Close()
}

func qdiscName(q string) string {
	if q == "" {
		return sched.None
	}
	return q
}

// MetricsServer serves Prometheus metrics over HTTP at /metrics.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed when Serve has returned
}

// ServeMetrics serves the given collectors, and the Go runtime's and the
// process's (goroutines, heap, resident memory, open descriptors, which a
// soak or a leak hunt watches), on addr, a host (kernel) address such as
// 127.0.0.1:9100.
func ServeMetrics(addr string, cs ...prometheus.Collector) (*MetricsServer, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &MetricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		m.srv.Serve(ln)
	}()
	return m, nil
}

// Addr returns the address metrics are served on.
func (m *MetricsServer) Addr() string { return m.ln.Addr().String() }

// Close stops the server, waiting up to 5 s for scrapes in progress.
func (m *MetricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	<-m.done
	return err
}

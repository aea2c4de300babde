package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/metrics"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// Config describes a host to serve.
type Config struct {
	// Kernel serves on the host kernel's sockets (Kernel) instead of a
	// ustack stack: the same services and handler, to measure ustack
	// against. The kernel's interfaces must already have their
	// addresses; Addrs, if any, are the addresses to listen on (their
	// prefix lengths ignored), none meaning all of the kernel's. The
	// fields Endpoint, Name, Gateways, Qdisc and Stack are ustack's and
	// must be unset.
	Kernel bool
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

// Host is a running server: a stack on a link with its services, or the
// services on the kernel's sockets.
type Host struct {
	st      *stack.Stack // nil on the kernel's sockets
	svc     *Services
	metrics *metrics.Server
}

// New builds the stack, starts the services and the metrics endpoint.
// cfg must name an endpoint and at least one address (or be Kernel); New
// does not keep cfg.
func New(c *Config) (*Host, error) {
	if c != nil && c.Kernel {
		return newKernel(c)
	}
	if c == nil || c.Endpoint == nil {
		return nil, errors.New("serve: no link endpoint: open one (linkspec.Open) and set Config.Endpoint")
	}
	cfg := *c
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
		if h.metrics, err = metrics.Serve(cfg.Metrics, metrics.NewStack(st), NewCollector(h.svc)); err != nil {
			return fail(fmt.Errorf("serve: %w", err))
		}
	}
	return h, nil
}

// newKernel starts the services of a Kernel config.
func newKernel(cfg *Config) (*Host, error) {
	if cfg.Endpoint != nil {
		cfg.Endpoint.Close()
		return nil, errors.New("serve: a link endpoint with Kernel: the kernel's sockets use the kernel's own interfaces; set one or the other")
	}
	if cfg.Name != "" || len(cfg.Gateways) > 0 || cfg.Qdisc != "" || cfg.Stack != nil {
		return nil, errors.New("serve: Kernel with ustack's settings (Name, Gateways, Qdisc, Stack): configure the kernel's interfaces with ip(8) instead")
	}
	addrs := []netip.Addr{{}} // Kernel's "every address"
	if len(cfg.Addrs) > 0 {
		addrs = addrs[:0]
		for _, p := range cfg.Addrs {
			addrs = append(addrs, p.Addr())
		}
	}
	h := &Host{}
	var err error
	if h.svc, err = Start(Kernel{}, addrs, cfg.Ports, nil); err != nil {
		return nil, err
	}
	if cfg.Metrics != "" {
		if h.metrics, err = metrics.Serve(cfg.Metrics, NewCollector(h.svc)); err != nil {
			h.Close()
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	return h, nil
}

// Stack returns the host's stack, nil on the kernel's sockets.
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
	if h.st == nil {
		return nil
	}
	return h.st.Close()
}

// Run serves until ctx ends, then shuts down cleanly, logging what it
// serves to log.
func Run(ctx context.Context, cfg *Config, log io.Writer) error {
	h, err := New(cfg)
	if err != nil {
		return err
	}
	switch {
	case !cfg.Kernel:
		fmt.Fprintf(log, "ustack serve: %v on %s (qdisc %s)", cfg.Addrs, cfg.Name, qdiscName(cfg.Qdisc))
	case len(cfg.Addrs) > 0:
		fmt.Fprintf(log, "ustack serve: kernel sockets on %v", cfg.Addrs)
	default:
		fmt.Fprintf(log, "ustack serve: kernel sockets on all addresses")
	}
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

package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/stack"
)

// initEnv carries, to the re-executed helper (Init), the file to bind over
// /etc/resolv.conf.
const initEnv = "USTACK_SANDBOX_RESOLV"

const resolvConf = "/etc/resolv.conf"

// Sandbox serves one network namespace. Its methods are safe for
// concurrent use.
type Sandbox struct {
	cfg Config
	pol policy
	ns  *namespace
	ep  *tun.Endpoint
	st  *stack.Stack
	nic tcpip.NICID
	c   counters

	ctx    context.Context // cancelled by Close: ends host-side connects
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	tcp      map[*tcpRelay]struct{}
	udp      map[netip.AddrPort]*udpFlow // by the sandbox's source
	closers  []io.Closer                 // port-forward listeners
	fwdAddrs []netip.AddrPort            // where they listen
	wg       sync.WaitGroup              // every goroutine of ours
	closeErr error

	echo echoRelay

	halfMu    sync.Mutex
	halfByDst map[netip.AddrPort]int // host-side connects in progress
	once      sync.Once
}

// New builds the sandbox's network: it creates (or attaches to) the
// namespace, creates the TUN device in it and starts relaying. It needs
// root (CAP_NET_ADMIN, and CAP_SYS_ADMIN to create a namespace).
func New(cfg Config) (*Sandbox, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	s := &Sandbox{cfg: cfg, tcp: map[*tcpRelay]struct{}{}, udp: map[netip.AddrPort]*udpFlow{}, halfByDst: map[netip.AddrPort]int{}}
	s.pol.cfg = cfg
	s.echo.init(s)
	if !cfg.NoDNS {
		s.pol.dns = upstreams(cfg.DNSUpstream)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if s.ns, err = openNamespace(cfg.NetNS); err != nil {
		return nil, err
	}
	if s.ep, err = s.ns.openDevice(&cfg); err != nil {
		return nil, err
	}
	if err := s.buildStack(); err != nil {
		return nil, err
	}
	for _, f := range cfg.Forwards {
		if err := s.startForward(f); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// buildStack makes ustack the far end of the device: it owns the gateway
// and DNS addresses, takes every other destination (promiscuous, and
// spoofing to answer from it) and hands new flows to the relays.
func (s *Sandbox) buildStack() error {
	c := &s.cfg
	tcpOpts := stack.DefaultTCPOptions()
	tcpOpts.SendBuffer.Max = c.TCPBuffer
	tcpOpts.ReceiveBuffer.Max = c.TCPBuffer
	tcpOpts.SendBuffer.Default = min(tcpOpts.SendBuffer.Default, c.TCPBuffer)
	tcpOpts.ReceiveBuffer.Default = min(tcpOpts.ReceiveBuffer.Default, c.TCPBuffer)
	st, err := stack.New(&stack.Options{TCP: &tcpOpts, BusyPoll: c.BusyPoll, Relay: true})
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	s.st = st
	// The handlers before the NIC: gVisor reads them unsynchronised from
	// the receive path, which starts with AddNIC.
	gs := st.GVisor()
	// A window of 0 means gVisor's default; gVisor counts SYNs beyond
	// MaxHalfOpen in ForwardMaxInFlightDrop, which Stats reports as
	// HalfOpen refusals.
	fwd := tcp.NewForwarder(gs, 0, c.MaxHalfOpen, s.handleTCP)
	gs.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	gs.SetTransportProtocolHandler(udp.ProtocolNumber, s.handleUDP)
	id, err := st.AddNIC(&icmpTap{Endpoint: s.ep, s: s}, &stack.NICOptions{Name: s.ep.Name(), Qdisc: c.Qdisc})
	if err != nil {
		s.ep.Close()
		return fmt.Errorf("sandbox: %w", err)
	}
	s.nic = id
	// The gateway first: it is the primary address, the source of
	// port-forwarded connections.
	addrs := []netip.Prefix{netip.PrefixFrom(c.Gateway4, c.Addr4.Bits()), netip.PrefixFrom(c.DNS4, c.Addr4.Bits())}
	if !c.NoIPv6 {
		addrs = append(addrs, netip.PrefixFrom(c.Gateway6, c.Addr6.Bits()), netip.PrefixFrom(c.DNS6, c.Addr6.Bits()))
	}
	for _, a := range addrs {
		if err := st.AddAddress(id, a); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	if terr := gs.SetPromiscuousMode(id, true); terr != nil {
		return fmt.Errorf("sandbox: promiscuous mode: %s", terr)
	}
	if terr := gs.SetSpoofing(id, true); terr != nil {
		return fmt.Errorf("sandbox: spoofing: %s", terr)
	}
	return nil
}

// Stack returns the ustack stack serving the sandbox (for stats and
// metrics); the Sandbox owns it.
func (s *Sandbox) Stack() *stack.Stack { return s.st }

// Device names the TUN device inside the namespace.
func (s *Sandbox) Device() string { return s.ep.Name() }

// Config returns the sandbox's configuration with its defaults filled in.
func (s *Sandbox) Config() Config { return s.cfg }

// DNSUpstream returns where DNS queries go, per IP version of the query.
func (s *Sandbox) DNSUpstream() (v4, v6 netip.AddrPort) { return s.pol.dns[0], s.pol.dns[1] }

// Stats returns the sandbox's counters.
func (s *Sandbox) Stats() Stats {
	st := s.c.snapshot()
	if s.st != nil {
		st.Refused[HalfOpen] += s.st.GVisor().Stats().TCP.ForwardMaxInFlightDrop.Value()
	}
	return st
}

// refuse counts a refusal.
func (s *Sandbox) refuse(r Reason) { s.c.refused[r].Add(1) }

// begin registers a goroutine of ours, or reports that the sandbox is
// closing.
func (s *Sandbox) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// Close stops relaying, ends every flow (resetting open TCP connections),
// removes the TUN device and, if New created it, lets the namespace go
// once no process is left in it. It waits for every goroutine it started.
// Idempotent.
func (s *Sandbox) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		closers := s.closers
		relays := make([]*tcpRelay, 0, len(s.tcp))
		for r := range s.tcp {
			relays = append(relays, r)
		}
		flows := make([]*udpFlow, 0, len(s.udp))
		for _, f := range s.udp {
			flows = append(flows, f)
		}
		s.mu.Unlock()
		s.cancel()
		var errs []error
		for _, c := range closers {
			if err := c.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		for _, r := range relays {
			r.abort(false)
		}
		for _, f := range flows {
			f.close()
		}
		s.echo.close()
		s.wg.Wait()
		if s.st != nil {
			if err := s.st.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if s.ns != nil {
			s.ns.close()
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// upstreams picks the resolvers for DNS queries over IPv4 and IPv6: the
// given one, or the host's first nameserver of each family (the other
// family's if there is only one).
func upstreams(given netip.AddrPort) [2]netip.AddrPort {
	if given.IsValid() {
		return [2]netip.AddrPort{given, given}
	}
	var v4, v6 netip.AddrPort
	f, err := os.Open(resolvConf)
	if err != nil {
		return [2]netip.AddrPort{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(fields[1])
		if err != nil || a.Zone() != "" {
			continue
		}
		a = a.Unmap()
		switch {
		case a.Is4() && !v4.IsValid():
			v4 = netip.AddrPortFrom(a, 53)
		case a.Is6() && !v6.IsValid():
			v6 = netip.AddrPortFrom(a, 53)
		}
	}
	if !v4.IsValid() {
		v4 = v6
	}
	if !v6.IsValid() {
		v6 = v4
	}
	return [2]netip.AddrPort{v4, v6}
}

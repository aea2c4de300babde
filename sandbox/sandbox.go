package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/link/pcap"
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
	dns [2]netip.AddrPort // DNS upstreams for DNS4 and DNS6; invalid if none
	nsp *Namespace        // New's; nil for Serve's
	ep  *tun.Endpoint
	st  *stack.Stack
	nic tcpip.NICID
	fw  *forward.Forwarder // the relay
	pf  *PortForwarder     // the port forwards, through the relay
	// adv sends a TAP sandbox's router advertisements (nil: none);
	// capture is Config.Capture's (nil: none).
	adv     atomic.Pointer[advertiser]
	capture *pcap.Endpoint
	tap     *tapLink // a TAP sandbox's NIC link (nil for TUN)
	// warnings say what the sandbox cannot do here (Warnings).
	warnings []string

	closeErr error
	once     sync.Once
}

// New builds the sandbox's network: it creates (or attaches to) the
// namespace, creates the device in it and starts relaying: OpenNamespace
// and Serve in this process. As root it does so itself; otherwise it goes
// through a user namespace and a helper process (see the package doc). A
// nil cfg means the documented defaults; New does not keep cfg.
func New(c *Config) (*Sandbox, error) {
	n, err := OpenNamespace(c)
	if err != nil {
		return nil, err
	}
	d, err := n.TakeDevice()
	if err == nil {
		var s *Sandbox
		if s, err = Serve(&n.cfg, d); err == nil {
			s.nsp = n
			s.warnings = append(n.Warnings(), s.warnings...)
			return s, nil
		}
	}
	n.Close()
	return nil, err
}

// Serve serves a device its namespace side made (Namespace.TakeDevice),
// in this process or, its descriptors passed on, in another: the stack,
// the relay and the port forwards, everything New does but the namespace.
// Serve takes d's descriptors over, whatever it returns. c must be the
// Namespace's configuration (Namespace.Config), or one with the same
// addresses; a nil c means the documented defaults. The Sandbox it
// returns has no namespace to Run commands in.
func Serve(c *Config, d Device) (*Sandbox, error) {
	cfg, err := checked(c)
	if err != nil {
		closeFDs(d.FDs)
		return nil, err
	}
	s := &Sandbox{cfg: cfg}
	if !cfg.NoDNS {
		s.dns = DNSUpstreams(cfg.DNSUpstream)
	}
	if s.ep, err = tun.OpenFDs(d.FDs, &tun.Options{TAP: d.TAP, MTU: d.MTU, NoOffload: cfg.NoOffload}); err != nil {
		closeFDs(d.FDs)
		s.Close()
		return nil, fmt.Errorf("sandbox: serve %s: %w", d.Name, err)
	}
	if err := s.buildStack(); err != nil {
		s.Close()
		return nil, err
	}
	// The ping relay's sockets are opened now, and the user told at
	// start if pings cannot be relayed here.
	if err := s.fw.OpenPing(); err != nil {
		// One sentence: the reasons of both IP versions on one line.
		s.warnings = append(s.warnings, "sandbox: pings to relayed destinations are refused, and counted: "+strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	for _, f := range cfg.PortForwards {
		if err := s.startForward(f); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// checked is c with its defaults filled in (nil: the defaults), if it
// is valid and this process may bind its port forwards' host ports.
func checked(c *Config) (Config, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	cfg, err := cfg.normalize()
	if err == nil {
		err = checkForwardPrivilege(cfg.PortForwards)
	}
	return cfg, err
}

// buildStack makes ustack the far end of the device: it owns the gateway
// and DNS addresses, and a Forwarder takes every other destination and
// relays it to host sockets.
func (s *Sandbox) buildStack() error {
	c := &s.cfg
	// The relay's per-flow buffer cap is the stack's maximum, so gVisor
	// keeps auto-tuning each flow's buffers up to it.
	tcpOpts := stack.DefaultTCPOptions()
	tcpOpts.SendBuffer.Max = c.TCPBuffer
	tcpOpts.ReceiveBuffer.Max = c.TCPBuffer
	tcpOpts.SendBuffer.Default = min(tcpOpts.SendBuffer.Default, c.TCPBuffer)
	tcpOpts.ReceiveBuffer.Default = min(tcpOpts.ReceiveBuffer.Default, c.TCPBuffer)
	st, err := stack.New(&stack.Options{TCP: &tcpOpts, BusyPoll: c.BusyPoll, Transparent: true})
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	s.st = st
	l, err := s.nicLink()
	if err != nil {
		s.ep.Close()
		return err
	}
	id, err := st.AddNIC(l, &stack.NICOptions{Name: s.ep.Name(), Qdisc: c.Qdisc})
	if err != nil {
		l.Close()
		return fmt.Errorf("sandbox: %w", err)
	}
	s.nic = id
	if s.tap != nil {
		s.tap.nic.Store(&nicRef{st: st.GVisor(), id: id})
	}
	for _, a := range c.owned() {
		if err := st.AddAddress(id, a); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	// The sandbox's prefixes are on-link, whatever ustack's addresses
	// in them (a link-local IPv6 gateway gives no route to Addr6's).
	onLink := []netip.Prefix{c.Addr4.Masked()}
	if !c.NoIPv6 {
		onLink = append(onLink, c.Addr6.Masked())
	}
	for _, p := range onLink {
		if err := st.AddRoute(p, netip.Addr{}, id); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	if err := s.startAdvertising(); err != nil {
		return err
	}
	d, err := dialer(c)
	if err != nil {
		return err
	}
	relay := withGuestAliases(forward.Relay(d, policy(c, s.dns)), d, c)
	s.fw, err = forward.New(st, relay, &c.Options)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	s.pf, err = NewPortForwarder(&PortForwarderOptions{Forwarder: s.fw, ConnectTimeout: c.ConnectTimeout, UDPIdleTimeout: c.UDPIdleTimeout})
	if err != nil {
		return err
	}
	return nil
}

// Warnings says what the sandbox cannot do with this process's
// privileges (such as relaying pings), one sentence each, for the user.
func (s *Sandbox) Warnings() []string { return append([]string(nil), s.warnings...) }

// Stack returns the ustack stack serving the sandbox (for stats and
// metrics); the Sandbox owns it.
func (s *Sandbox) Stack() *stack.Stack { return s.st }

// Forwarder returns the relay (for Flows); the Sandbox owns it.
func (s *Sandbox) Forwarder() *forward.Forwarder { return s.fw }

// Device names the TUN device inside the namespace.
func (s *Sandbox) Device() string { return s.ep.Name() }

// Config returns the sandbox's configuration with its defaults filled in.
func (s *Sandbox) Config() Config { return s.cfg }

// DNSUpstream returns where DNS queries go, per IP version of the query.
func (s *Sandbox) DNSUpstream() (v4, v6 netip.AddrPort) { return s.dns[0], s.dns[1] }

// Close stops relaying, ends every flow (resetting open TCP connections),
// removes the TUN device and, if New created it, lets the namespace go
// once no process is left in it. It waits for every goroutine it started.
// Idempotent.
func (s *Sandbox) Close() error {
	s.once.Do(func() {
		var errs []error
		if s.fw != nil {
			// Aborts every flow, port forwards' included, so that the
			// forwards' goroutines end.
			s.fw.Close()
		}
		if s.pf != nil {
			if err := s.pf.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if a := s.adv.Load(); a != nil {
			a.close()
		}
		if s.st != nil {
			if err := s.st.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if s.nsp != nil {
			if err := s.nsp.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// DNSUpstreams picks the resolvers a DNS relay sends the queries it gets
// over IPv4 and IPv6 to: the given one, or the host's first nameserver of
// each family in /etc/resolv.conf (the other family's if there is only
// one). An invalid address means none was found.
func DNSUpstreams(given netip.AddrPort) [2]netip.AddrPort {
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

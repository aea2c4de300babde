package main

// The slirp4netns front end's run: a parsed command line (slirpOptions)
// mapped onto a sandboxRun, which serves the namespace until the
// process is killed, told to stop (SIGTERM, SIGINT, SIGHUP) or its exit
// descriptor fires.

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
)

// slirpGuest6 is the sandbox's IPv6 address with -6: -c configures it
// next to the address the guest takes from ustack's router
// advertisements (slirp4netns leaves IPv6 to those alone), so that a
// port forward of an IPv6 client has an address to reach.
var slirpGuest6 = netip.MustParsePrefix("fd00::100/64")

// sandboxRun maps o onto a run named prog (the name messages start
// with): the sandbox of slirp4netns's layout on a TAP device, configured
// with -c or attached to as its creator left it without, served until
// stopped. ifAddrs finds the addresses of an interface --outbound-addr
// names (interfaceAddrs in the command). It checks the sandbox's
// configuration as ustack tun does, so that what it returns runs.
func (o *slirpOptions) sandboxRun(prog string, ifAddrs func(name string) ([]net.Addr, error)) (sandboxRun, error) {
	r := sandboxRun{
		name: prog, readyFD: o.ReadyFD, exitFD: o.ExitFD, apiSocket: o.APISocket,
		// Either switch asks for ustack's whole confinement: the relay
		// process, isolated, as nobody where it can be, and filtered.
		confine:    o.EnableSandbox || o.EnableSeccomp,
		confineOff: "leave out --enable-sandbox and --enable-seccomp",
		// One CPU, as slirp4netns's one thread, and the runtime's
		// monitor on its slow tick: ustack tun's defaults.
		procs: 1, sysmonTick: true,
	}
	c := &r.cfg
	c.NetNS, c.UserNS = o.NetNS(), o.UserNS()
	c.TAP, c.Device, c.MAC = true, o.TapName, o.MAC
	// Without -c the device is its creator's (RootlessKit's tap0, which
	// it configures once ready): attached to and left as it is, the MTU
	// taken on trust from --mtu, as the creator sets it.
	c.NoConfigure, c.MTU = !o.Configure, uint32(o.MTU)
	c.Addr4, c.Gateway4, c.DNS4 = o.Guest4(), o.Gateway4(), o.DNS4()
	c.NoIPv6 = !o.IPv6
	if o.IPv6 {
		c.Addr6, c.Gateway6, c.DNS6 = slirpGuest6, slirpGateway6, slirpDNS6
	}
	c.AllowHostLoopback, c.NoDNS = !o.DisableHostLoopback, o.DisableDNS
	var err error
	if c.OutboundAddr4, err = outboundAddr(o.OutboundAddr, o.OutboundIf, false, ifAddrs); err != nil {
		return r, err
	}
	if c.OutboundAddr6, err = outboundAddr(o.OutboundAddr6, o.OutboundIf6, true, ifAddrs); err != nil {
		return r, err
	}
	return r, c.Check()
}

// outboundAddr is --outbound-addr's (v6: --outbound-addr6's) address:
// the one given, or the first of its family on the interface named, as
// slirp4netns looks it up once at start (a link-local IPv6 address,
// which needs a scope, is passed over).
func outboundAddr(a netip.Addr, ifname string, v6 bool, ifAddrs func(string) ([]net.Addr, error)) (netip.Addr, error) {
	if ifname == "" {
		return a, nil
	}
	option, family := "--outbound-addr", "IPv4"
	if v6 {
		option, family = "--outbound-addr6", "IPv6"
	}
	addrs, err := ifAddrs(ifname)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s=%s: neither an %s address nor an interface with one: %w", option, ifname, family, err)
	}
	for _, ad := range addrs {
		n, ok := ad.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if ip = ip.Unmap(); ok && ip.Is6() == v6 && !ip.IsLinkLocalUnicast() {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s=%s: the interface has no %s address", option, ifname, family)
}

// slirp4netnsMain is ustack's slirp4netns on argv (argv[0] is the name
// its messages start with): it settles what the command line settles by
// itself (help, version, a refusal), and otherwise serves the namespace
// until stopped.
func slirp4netnsMain(argv []string, stdout, stderr io.Writer) int {
	o, status, settled := slirp4netnsParse(argv, stdout, stderr)
	if settled {
		return status
	}
	prog, _ := slirp4netnsFrontEnd.progArgs(argv)
	r, err := o.sandboxRun(prog, interfaceAddrs)
	if err != nil {
		printLines(stderr, fmt.Sprintf("%s: %v", prog, err))
		return frontEndStatus
	}
	return r.run(os.Stdin, stdout, stderr)
}

// interfaceAddrs lists the addresses of the host's interface name.
func interfaceAddrs(name string) ([]net.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	return ifi.Addrs()
}

package main

// The pasta front end's run: a parsed command line (pastaOptions) mapped
// onto a sandboxRun. pasta gives the namespace a TAP device with the
// host's addressing (its address, prefix and default gateway, and the
// name of its interface) unless told otherwise, always serves from a
// process of its own, isolated, and forks into the background once the
// namespace is configured, the foreground process exiting 0 (Podman and
// RootlessKit wait for that); it exits once the namespace is gone. ustack
// does all of that with a detached relay (relayOptions.detach).

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/sandbox"
)

// pastaMaxPorts bounds the ports one command line forwards: ustack
// listens on a socket per port, with a goroutine (2 to 8 KiB of stack)
// accepting on each, where pasta polls them all in one thread; 4096
// ports cost a few tens of MiB at most. A range beyond it is refused.
const pastaMaxPorts = 4096

// hostIface is what pasta copies from a host interface for one IP
// version: its name, its first address with its prefix length, and the
// default gateway through it.
type hostIface struct {
	Name    string
	Addr    netip.Prefix
	Gateway netip.Addr
}

// pastaRefused are options pastaOptions holds that ustack does not take
// when running, and why: what to do instead.
func (o *pastaOptions) refused() error {
	var why []string
	add := func(cond bool, msg string) {
		if cond {
			why = append(why, msg)
		}
	}
	add(o.IPv6Only, "-6/--ipv6-only: ustack's namespace always has IPv4 next to IPv6: leave the option out")
	add(o.NoTCP || o.NoUDP || o.NoICMP, "--no-tcp, --no-udp, --no-icmp: ustack always relays TCP, UDP and ICMP echo: leave the option out")
	add(o.FreeBind, "--freebind: ustack binds forwarded ports to addresses the host has: give one of them, or none for every address")
	add(o.OutboundIf4 != "" || o.OutboundIf6 != "", "--outbound-if4, --outbound-if6: ustack binds outbound sockets to addresses, not interfaces: give -o with the interface's address")
	add(len(o.DNS) > 0, "-D/--dns ADDR: ustack announces no name servers to the namespace (it runs no DHCP, DHCPv6 or NDP server): write them in the namespace's resolv.conf, or give --dns-forward")
	add(len(o.Search) > 0, "-S/--search: ustack announces no search domains (it runs no DHCP or NDP server): write them in the namespace's resolv.conf")
	for _, d := range []struct {
		name string
		f    *portForwards
		out  bool
	}{{"-t", &o.TCPIn, false}, {"-u", &o.UDPIn, false}, {"-T", &o.TCPOut, true}, {"-U", &o.UDPOut, true}} {
		switch {
		case d.f.Mode == portsAuto:
			add(true, d.name+" auto: ustack does not follow the ports bound on the far side: list them (-t PORTS, -u PORTS)")
		case d.out && d.f.Mode == portsSpec:
			add(true, d.name+" "+d.f.Specs[0].String()+": ustack forwards no ports from the namespace to the host: connect to the gateway address instead, which leads to the host's loopback unless --no-map-gw")
		case d.f.Mode == portsSpec:
			for _, s := range d.f.Specs {
				add(s.Interface != "", d.name+" "+s.String()+": ustack binds forwarded ports to addresses, not interfaces: give the interface's address")
			}
		}
	}
	if len(why) == 0 {
		return nil
	}
	return &frontEndError{msg: why[0]}
}

// sandboxRun maps o onto a run named prog (the name messages start
// with). host finds the host's addressing (hostAddressing in the
// command) for what the command line leaves to it; ephemeral is the
// host's range of ephemeral ports, which a port specification of
// exclusions alone leaves out. notes say what pasta would do that ustack
// does not, but which the caller did not ask for explicitly.
func (o *pastaOptions) sandboxRun(prog string, host func(ifname string) (v4, v6 *hostIface, err error), ephemeral portRange) (r sandboxRun, notes []string, err error) {
	if err := o.refused(); err != nil {
		return r, nil, err
	}
	r = sandboxRun{
		name: prog, pcap: o.PcapFile, pidFile: o.PIDFile, quiet: o.Quiet,
		// pasta always isolates itself, and runs on one thread; ustack
		// tun's default runtime monitor tick.
		confine: true, confineOff: "pasta's isolation cannot be turned off",
		procs: 1, sysmonTick: true, readyFD: -1, exitFD: -1,
	}
	c := &r.cfg
	c.TAP, c.NoConfigure, c.MAC = true, !o.ConfigNet, o.NSMAC
	c.AllowHostLoopback, c.NoRA = true, o.NoRA || o.ConfigNet

	h4, h6, herr := host(o.Interface)
	if herr != nil && o.Interface != "" {
		return r, nil, fmt.Errorf("-i %s: %w", o.Interface, herr)
	}
	// IPv4, always: the address and gateway given, or the host's; the
	// prefix given, the host's, or the address's class's (RFC 4632),
	// widened until it holds the gateway, as pasta widens it.
	a4, bits, gw4 := o.Addr4, o.PrefixLen4, o.Gateway4
	if h4 != nil {
		if !a4.IsValid() {
			a4 = h4.Addr.Addr()
			if bits < 0 {
				bits = h4.Addr.Bits()
			}
		}
		if !gw4.IsValid() {
			gw4 = h4.Gateway
		}
	}
	v6 := !o.IPv4Only
	a6, bits6, gw6 := o.Addr6, 64, o.Gateway6
	if h6 != nil && v6 {
		if !a6.IsValid() {
			a6, bits6 = h6.Addr.Addr(), h6.Addr.Bits()
		}
		if !gw6.IsValid() {
			gw6 = h6.Gateway
		}
	}
	v6 = v6 && a6.IsValid() && gw6.IsValid()
	if !a4.IsValid() || !gw4.IsValid() {
		if !v6 {
			return r, nil, pastaErr("External interface not usable") // pasta's wording
		}
		return r, nil, errors.New("no IPv4 address or gateway: the host has no IPv4 default route: ustack's namespace always has IPv4: give -a and -g")
	}
	if bits < 0 {
		bits = classfulBits(a4)
	}
	for b := bits; b > 0; b-- {
		if netip.PrefixFrom(a4, b).Contains(gw4) {
			bits = b
			break
		}
	}
	c.Addr4, c.Gateway4 = netip.PrefixFrom(a4, bits), gw4
	c.NoIPv6 = !v6
	if v6 {
		c.Addr6, c.Gateway6 = netip.PrefixFrom(a6, bits6), gw6
	}
	// The interface: named, or the host's of IPv4 (of IPv6 if not), or
	// tap0.
	switch {
	case o.NSIfname != "":
		c.Device = o.NSIfname
	case h4 != nil:
		c.Device = h4.Name
	case h6 != nil && v6:
		c.Device = h6.Name
	default:
		c.Device = sandbox.DefaultTAPDevice
	}
	c.MTU = uint32(o.MTU)
	if o.MTU == 0 && o.ConfigNet {
		c.MTU = tun.DefaultMTU // -m 0: as the kernel creates the device
	}

	// DNS only at --dns-forward's addresses, to --dns-host or the host's
	// first resolver.
	c.DNS4, c.DNS6 = netip.IPv4Unspecified(), netip.IPv6Unspecified()
	if o.DNSForward4.IsValid() {
		c.DNS4 = o.DNSForward4
	}
	if o.DNSForward6.IsValid() {
		c.DNS6 = o.DNSForward6
	}
	for _, a := range []netip.Addr{o.DNSHost4, o.DNSHost6} {
		if a.IsValid() && !c.DNSUpstream.IsValid() {
			c.DNSUpstream = netip.AddrPortFrom(a, 53)
		}
	}
	// The host's loopback: --map-host-loopback's address, else the
	// gateway's unless --no-map-gw.
	c.HostLoopback4, c.HostLoopback6 = o.MapHostLoopback4, o.MapHostLoopback6
	if o.NoMapGW {
		if !c.HostLoopback4.IsValid() {
			c.HostLoopback4 = netip.IPv4Unspecified()
		}
		if !c.HostLoopback6.IsValid() {
			c.HostLoopback6 = netip.IPv6Unspecified()
		}
	}
	c.MapGuestAddr4, c.MapGuestAddr6 = o.MapGuestAddr4, o.MapGuestAddr6
	c.OutboundAddr4, c.OutboundAddr6 = o.Outbound4, o.Outbound6

	if c.PortForwards, err = pastaPortForwards(o, ephemeral); err != nil {
		return r, nil, err
	}
	if o.TCPIn.Mode == portsUnset || o.UDPIn.Mode == portsUnset || o.TCPOut.Mode == portsUnset || o.UDPOut.Mode == portsUnset {
		notes = append(notes, "ports not given (-t, -u, -T, -U) are not forwarded: pasta's default, auto, follows the ports bound on the far side, which ustack does not")
	}

	// The namespace: pasta's target, joined with its user namespace
	// (the owner's unless --userns), and watched unless --no-netns-quit;
	// or a command in namespaces of its own, in the foreground.
	switch {
	case o.NetNS != "":
		c.NetNS = o.NetNS
		if !o.NetNSOnly {
			c.UserNS = o.UserNS
		}
		if !o.NoNetNSQuit {
			r.quitNetNS = o.NetNS
			r.quitPID = max(o.PID, 0)
		}
		r.detach = !o.Foreground
	default:
		r.args = o.Command
		if len(r.args) == 0 {
			shell := os.Getenv("SHELL")
			if shell == "" {
				shell = "/bin/sh"
			}
			r.args = []string{shell, "-l"}
		}
		notes = append(notes, "the command runs in new user, network and mount namespaces; pasta also gives it PID, UTS and IPC namespaces, which ustack does not")
	}
	return r, notes, c.Check()
}

// classfulBits is the prefix length of a's class (RFC 4632): what pasta
// takes for an address given without -n and not the host's.
func classfulBits(a netip.Addr) int {
	switch b := a.As4()[0]; {
	case b < 128:
		return 8
	case b < 192:
		return 16
	case b < 224:
		return 24
	}
	return 32
}

// pastaPortForwards maps -t and -u onto the sandbox's port forwards:
// every port of each specification not excluded (every port from 1 up
// but the excluded and the ephemeral ones, for a specification of
// exclusions alone), listening on its address or, as pasta does, on
// every address of the host; a later specification of a port replaces
// an earlier one.
func pastaPortForwards(o *pastaOptions, ephemeral portRange) ([]sandbox.PortForward, error) {
	type key struct {
		udp  bool
		host netip.AddrPort
	}
	var out []sandbox.PortForward
	at := map[key]int{}
	for _, d := range []struct {
		name string
		udp  bool
		f    *portForwards
	}{{"-t", false, &o.TCPIn}, {"-u", true, &o.UDPIn}} {
		if d.f.Mode != portsSpec {
			continue
		}
		for _, s := range d.f.Specs {
			addr := s.Addr
			if !addr.IsValid() {
				addr = netip.IPv4Unspecified() // both versions, as Go listens on it
			}
			ranges := s.Ranges
			if len(ranges) == 0 {
				ranges = []portRange{{First: 1, Last: ephemeral.First - 1, To: 1}}
				if ephemeral.Last < 65535 {
					ranges = append(ranges, portRange{First: ephemeral.Last + 1, Last: 65535, To: ephemeral.Last + 1})
				}
			}
			for _, pr := range ranges {
				for p := int(pr.First); p <= int(pr.Last); p++ {
					if excluded(s.Excluded, uint16(p)) {
						continue
					}
					to := int(pr.To) + p - int(pr.First)
					if p == 0 || to == 0 {
						return nil, &frontEndError{msg: fmt.Sprintf("%s %s: port 0: ustack forwards ports from 1 up", d.name, s)}
					}
					f := sandbox.PortForward{UDP: d.udp, Host: netip.AddrPortFrom(addr, uint16(p)), Port: uint16(to)}
					k := key{d.udp, f.Host}
					if i, dup := at[k]; dup {
						out[i] = f
						continue
					}
					if len(out) == pastaMaxPorts {
						return nil, &frontEndError{msg: fmt.Sprintf("%s %s: more than %d ports forwarded: ustack listens on a socket per port: forward fewer", d.name, s, pastaMaxPorts)}
					}
					at[k] = len(out)
					out = append(out, f)
				}
			}
		}
	}
	return out, nil
}

// excluded reports whether port is in one of ranges.
func excluded(ranges []portRange, port uint16) bool {
	for _, r := range ranges {
		if port >= r.First && port <= r.Last {
			return true
		}
	}
	return false
}

// ephemeralPorts is the host's range of ephemeral ports
// (net.ipv4.ip_local_port_range), or Linux's default where it cannot be
// read.
func ephemeralPorts() portRange {
	r := portRange{First: 32768, Last: 60999}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return r
	}
	var lo, hi int
	if n, _ := fmt.Sscanf(string(b), "%d %d", &lo, &hi); n == 2 && lo > 0 && lo <= hi && hi <= 65535 {
		r.First, r.Last = uint16(lo), uint16(hi)
	}
	r.To = r.First
	return r
}

// pastaMain is ustack's pasta on argv (argv[0] is the name its messages
// start with): it settles what the command line settles by itself (help,
// version, a refusal), and otherwise serves the namespace: in the
// background once ready, unless in the foreground or with a command.
func pastaMain(argv []string, stdout, stderr io.Writer) int {
	o, status, settled := pastaParse(argv, stdout, stderr)
	if settled {
		return status
	}
	prog, _ := pastaFrontEnd.progArgs(argv)
	r, notes, err := o.sandboxRun(prog, hostAddressing, ephemeralPorts())
	if err != nil {
		msg, _ := refusal(err)
		printLines(stderr, msg)
		return frontEndStatus
	}
	if !o.Quiet {
		for _, n := range notes {
			fmt.Fprintf(stderr, "%s: %s\n", prog, n)
		}
	}
	return r.run(os.Stdin, stdout, stderr)
}

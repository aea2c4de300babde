package main

// The pasta front end: ustack started as `pasta ARGS` (a symlink) or
// `ustack pasta ARGS` takes the command line of pasta (passt
// 2024_12_11.09478d5, conf.c), as Podman 4.4 to 5.x (containers/common
// libnetwork/pasta) and RootlessKit 2 (pkg/network/pasta) run it, and
// refuses a bad one with pasta's wording and exit status 1. Podman
// retries without --map-guest-addr when pasta exits 1 saying
// "unrecognized option '--map-guest-addr", and RootlessKit passes
// --host-lo-to-ns-lo only when `pasta --host-lo-to-ns-lo --version`
// succeeds, so the getopt wording and status are a contract.
//
// Refused, although pasta takes them:
//   - as getopt's "unrecognized option" (as a pasta older than the
//     option says it, which its callers handle by leaving it out):
//     --host-lo-to-ns-lo (deprecated in pasta: forwarded connections
//     from the host's loopback appear on the namespace's loopback; ustack
//     delivers them through its device, where the kernel drops loopback
//     sources);
//   - with a sentence saying why (exit status 1): -l/--log-file and
//     --log-size (ustack logs to standard error), --runas, -F/--fd,
//     -M/--mac-addr (ustack's side of the TAP device has a random
//     locally administered MAC address), --dhcp-dns and --dhcp-search (ustack runs no
//     DHCP, DHCPv6 or NDP server: the namespace is configured
//     directly), -s/--socket/--socket-path and --print-capabilities
//     (passt's, meaningless for pasta), and an MTU outside 1280..65520
//     other than 0 (pasta takes 68..65535): see checkFrontEndMTU;
//   - as pasta itself refuses them: --one-off, --no-dhcp-dns,
//     --no-dhcp-search, --vhost-user (passt's), and 'all' ports.
//
// Everything else is parsed into pastaOptions, port specifications into
// portForwards: what ustack cannot do of those (auto forwarding,
// forwarding from the namespace to the host with -T and -U, interface
// bindings, and the rest pastaOptions.refused lists) the step that maps
// the options onto sandbox.Config (pasta_run.go) refuses, with the
// option named.

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ustack-dev/ustack/link/tun"
)

// pastaCompat is the passt release whose pasta command line the front
// end takes, printed by --version.
const pastaCompat = "2024_12_11.09478d5"

// pasta's limits and defaults (passt's conf.c, util.h).
const (
	// pastaDefaultMTU is the MTU pasta assigns without -m: 65535 less a
	// 14-byte Ethernet header, rounded down to a multiple of 4 bytes.
	pastaDefaultMTU = 65520
	pastaMinMTU     = 68    // ETH_MIN_MTU
	pastaMaxMTU     = 65535 // ETH_MAX_MTU
	ifNameSize      = 16    // IFNAMSIZ: interface names are shorter
	pathMax         = 4096  // PATH_MAX: paths are shorter
	// pastaMaxSearch and pastaMaxDomain bound -S: MAXDNSRCH domains of
	// fewer than NS_MAXDNAME bytes.
	pastaMaxSearch = 6
	pastaMaxDomain = 1025
	// netnsRunDir is where a --netns NAME is, as ip-netns(8) keeps them.
	netnsRunDir = "/run/netns"
)

// portMode is how one direction of port forwarding was given, in
// pasta's order (FWD_UNSET < FWD_SPEC < FWD_NONE < FWD_AUTO).
type portMode uint8

const (
	// portsUnset: the option was not given; pasta's default is auto.
	portsUnset portMode = iota
	// portsSpec: the ports of Specs.
	portsSpec
	// portsNone: "none", no ports.
	portsNone
	// portsAuto: "auto", every port bound on the far side, rescanned
	// every second (/proc/net/tcp, tcp6, udp, udp6).
	portsAuto
)

// portForwards is one of pasta's four port forwarding directions: -t
// (TCP, host to namespace), -u (UDP, host to namespace), -T (TCP,
// namespace to host) or -U (UDP, namespace to host). A forwarded port
// listens on the near side (the host for -t and -u, the namespace's
// loopback for -T and -U) and connects to the same or mapped port on
// the far side. UDP in auto mode also forwards the UDP ports whose
// numbers are TCP ports listening on the far side (iperf3 and the like
// pair them).
type portForwards struct {
	Mode portMode
	// Specs holds one entry per option given, in order, with Mode
	// portsSpec; a later mapping of a port replaces an earlier one.
	Specs []portSpec
}

// portSpec is one port specification other than none and auto:
// [ADDR][%IF]/PORTS, PORTS being a comma-separated list of ranges and
// ~exclusions.
type portSpec struct {
	// Addr is the address the host listens on (ADDR/), IPv4 or IPv6;
	// invalid for every address. Only -t and -u take one.
	Addr netip.Addr
	// Interface is the host interface the listener is bound to (%IF/),
	// "" for none. Only -t and -u take one.
	Interface string
	// Ranges are the forwarded ports. Empty when the specification is
	// only exclusions: then every port but the excluded ones and the
	// ephemeral ones (net.ipv4.ip_local_port_range) is forwarded.
	Ranges []portRange
	// Excluded ports (~PORT, ~FIRST-LAST) are not forwarded, although in
	// Ranges. Excluded ranges never overlap.
	Excluded []portRange
}

// portRange is the ports First to Last, each forwarded to the port
// To - First above it: to itself when To is First. Port 0 may appear:
// pasta binds it as given.
type portRange struct {
	First, Last, To uint16
}

// pastaOptions is a pasta command line, parsed. With Help or Version
// set, nothing else is meaningful: print and exit 0. Where an option
// may be given more than once, the last one counts unless said.
type pastaOptions struct {
	// Help (-h, --help) and Version (--version) end the parse, as pasta
	// exits at the first of them.
	Help, Version bool

	// Debug (-d) and Trace (--trace, implies Debug) log more; Quiet (-q)
	// logs warnings and errors only. The last of them wins.
	Debug, Trace, Quiet bool
	// Foreground (-f): stay in the foreground. Otherwise pasta forks
	// once ready and the parent exits 0 (Podman and RootlessKit wait for
	// that exit); with a command to run it stays in the foreground anyway.
	Foreground bool
	// Stderr (-e, --stderr) has no effect: pasta keeps it for
	// compatibility (RootlessKit passes it).
	Stderr bool

	// NSIfname (-I) names the interface pasta creates in the namespace;
	// "" for pasta's default: the name of the host interface addresses
	// are taken from, or tap0 when there is none.
	NSIfname string
	// PcapFile (-p) receives the namespace-side packets in pcap format;
	// "" for none.
	PcapFile string
	// PIDFile (-P) receives pasta's PID once it is ready, before it
	// forks into the background; "" for none. Podman's rootless
	// network namespace reads it.
	PIDFile string
	// MTU (-m) of the namespace's interface in bytes, 65520 without -m;
	// 0 (-m 0) leaves the interface's MTU as the kernel creates it.
	MTU int

	// Addr4 and Addr6 (-a, one per family) are the namespace's
	// addresses; invalid: the host's (the address of the interface with
	// the default route).
	Addr4, Addr6 netip.Addr
	// PrefixLen4 (-n, dot-decimal or a length) is Addr4's prefix length;
	// -1: the host's for that address, else its class's (RFC 4632).
	PrefixLen4 int
	// Gateway4 and Gateway6 (-g, one per family) are the namespace's
	// default gateways; invalid: the host's.
	Gateway4, Gateway6 netip.Addr
	// Interface (-i) is the host interface addresses and routes are
	// taken from; "" for the one with the default route. Not checked
	// while parsing (pasta looks it up on the host).
	Interface string
	// Outbound4 and Outbound6 (-o, one per family) are the source
	// addresses outbound sockets bind to; invalid: routing chooses.
	Outbound4, Outbound6 netip.Addr
	// OutboundIf4 and OutboundIf6 name the host interfaces outbound
	// sockets bind to (SO_BINDTODEVICE); "" for none. They are also
	// where addresses and routes come from unless Interface.
	OutboundIf4, OutboundIf6 string

	// DNS (-D, repeatable) lists name servers pasta would announce by
	// DHCP, DHCPv6 and NDP; pasta announces them only with --dhcp-dns,
	// which ustack refuses, so they have no effect but the list.
	// NoDNS (-D none) empties it and, as pasta does whatever the order,
	// turns off DNSForward and DNSHost.
	DNS   []netip.Addr
	NoDNS bool
	// Search (-S) lists search domains for DHCP and NDP, announced only
	// with --dhcp-search (refused): no effect. NoSearch (-S none)
	// empties it.
	Search   []string
	NoSearch bool
	// DNSForward4 and DNSForward6 (--dns-forward, one per family) are
	// addresses in the namespace whose DNS traffic (UDP and TCP to ports
	// 53 and 853) goes to DNSHost; invalid for none.
	DNSForward4, DNSForward6 netip.Addr
	// DNSHost4 and DNSHost6 (--dns-host) are the resolvers DNSForward
	// leads to; invalid: the first name server of the host's
	// /etc/resolv.conf.
	DNSHost4, DNSHost6 netip.Addr

	// NoTCP, NoUDP and NoICMP turn off a protocol: its traffic from the
	// namespace is dropped and nothing of it is forwarded.
	NoTCP, NoUDP, NoICMP bool
	// NoDHCP, NoNDP, NoDHCPv6 and NoSplice turn off pasta's DHCP, NDP
	// and DHCPv6 servers and its socket splicing of local traffic. ustack
	// has none of them, so they always hold; recorded as given. NoRA
	// turns off router advertisements, which ustack sends on its TAP
	// device as pasta does (but with --config-net, which configures
	// IPv6 itself).
	NoDHCP, NoNDP, NoDHCPv6, NoRA, NoSplice bool
	// NSMAC (--ns-mac-addr) is the MAC address of the namespace's
	// interface, set with ConfigNet; nil leaves the kernel's.
	NSMAC net.HardwareAddr
	// FreeBind (--freebind): -t and -u may bind addresses the host does
	// not have (IP_FREEBIND).
	FreeBind bool
	// MapHostLoopback4 and MapHostLoopback6 (--map-host-loopback, one
	// per family) are the addresses in the namespace that lead to the
	// host's loopback; invalid: the gateway's, unless NoMapGW.
	MapHostLoopback4, MapHostLoopback6 netip.Addr
	// NoMapGW (--no-map-gw, or --map-host-loopback none): the gateway
	// does not lead to the host's loopback.
	NoMapGW bool
	// MapGuestAddr4 and MapGuestAddr6 (--map-guest-addr, one per family)
	// are addresses in the namespace that lead to the namespace's own
	// address as the host has it (the host's address with --config-net):
	// Podman's host.containers.internal. Invalid for none.
	MapGuestAddr4, MapGuestAddr6 netip.Addr
	// IPv4Only (-4) and IPv6Only (-6): one family only; the last wins.
	IPv4Only, IPv6Only bool

	// TCPIn (-t), UDPIn (-u), TCPOut (-T) and UDPOut (-U) are the port
	// forwards; see portForwards.
	TCPIn, UDPIn, TCPOut, UDPOut portForwards

	// PID is the process whose namespaces are joined (the positional
	// PID), -1 for none; NetNS and UserNS are then its.
	PID int
	// NetNS (--netns PATH|NAME, or /proc/PID/ns/net) is the network
	// namespace served; a NAME stands for /run/netns/NAME. "" with
	// neither: pasta runs Command in new user, network, mount, IPC, UTS
	// and PID namespaces.
	NetNS string
	// UserNS (--userns, or /proc/PID/ns/user) is the user namespace
	// joined before NetNS, unless NetNSOnly.
	UserNS string
	// NetNSOnly (--netns-only, implied by --netns without --userns):
	// join the network namespace only.
	NetNSOnly bool
	// NoNetNSQuit (--no-netns-quit): keep serving when NetNS's file, or
	// the PID's process, goes away. By default pasta then exits (Podman
	// relies on it to stop pasta).
	NoNetNSQuit bool
	// ConfigNet (--config-net): configure the namespace's interface
	// (addresses, routes, MTU, up). Without it only the interface is
	// created and the namespace configures itself.
	ConfigNet bool
	// NoCopyRoutes and NoCopyAddrs (deprecated, only with ConfigNet):
	// set up the default route alone, and one address alone, instead of
	// copying all of the host interface's.
	NoCopyRoutes, NoCopyAddrs bool
	// Command (the positionals, without PID or NetNS) runs in the new
	// namespaces; nil for a login shell, $SHELL or /bin/sh.
	Command []string
}

// Long-only options of pasta, numbered after the short ones. The
// --no-* switches are separate options in pasta (each sets its own
// flag), so a prefix of two of them is ambiguous.
const (
	pastaNoTCP = firstLongOnly + iota
	pastaNoUDP
	pastaNoICMP
	pastaNoDHCP
	pastaNoDHCPv6
	pastaNoNDP
	pastaNoRA
	pastaNoSplice
	pastaFreeBind
	pastaNoMapGW
	pastaOneOff
	pastaUserNS
	pastaNetNS
	pastaNSMACAddr
	pastaDHCPDNS
	pastaNoDHCPDNS
	pastaDHCPSearch
	pastaNoDHCPSearch
	pastaDNSForward
	pastaNoNetNSQuit
	pastaTrace
	pastaRunAs
	pastaLogSize
	pastaVersion
	pastaOutboundIf4
	pastaOutboundIf6
	pastaConfigNet
	pastaNoCopyRoutes
	pastaNoCopyAddrs
	pastaNetNSOnly
	pastaMapHostLoopback
	pastaMapGuestAddr
	pastaDNSHost
	pastaVhostUser
	pastaPrintCapabilities
)

// pastaTable is pasta's getopt_long table, in its order, less
// --host-lo-to-ns-lo. Options end at the first positional: the rest is
// a PID or a command with its own options.
var pastaTable = &optionTable{
	short:   "dqfel:hF:I:p:P:m:a:n:M:g:i:o:D:S:46t:u:T:U:",
	inOrder: true,
	long: []longOpt{
		{"debug", noArg, 'd'},
		{"quiet", noArg, 'q'},
		{"foreground", noArg, 'f'},
		{"stderr", noArg, 'e'},
		{"log-file", requiredArg, 'l'},
		{"help", noArg, 'h'},
		{"socket", requiredArg, 's'},
		{"fd", requiredArg, 'F'},
		{"ns-ifname", requiredArg, 'I'},
		{"pcap", requiredArg, 'p'},
		{"pid", requiredArg, 'P'},
		{"mtu", requiredArg, 'm'},
		{"address", requiredArg, 'a'},
		{"netmask", requiredArg, 'n'},
		{"mac-addr", requiredArg, 'M'},
		{"gateway", requiredArg, 'g'},
		{"interface", requiredArg, 'i'},
		{"outbound", requiredArg, 'o'},
		{"dns", requiredArg, 'D'},
		{"search", requiredArg, 'S'},
		{"no-tcp", noArg, pastaNoTCP},
		{"no-udp", noArg, pastaNoUDP},
		{"no-icmp", noArg, pastaNoICMP},
		{"no-dhcp", noArg, pastaNoDHCP},
		{"no-dhcpv6", noArg, pastaNoDHCPv6},
		{"no-ndp", noArg, pastaNoNDP},
		{"no-ra", noArg, pastaNoRA},
		{"no-splice", noArg, pastaNoSplice},
		{"freebind", noArg, pastaFreeBind},
		{"no-map-gw", noArg, pastaNoMapGW},
		{"ipv4-only", noArg, '4'},
		{"ipv6-only", noArg, '6'},
		{"one-off", noArg, pastaOneOff},
		{"tcp-ports", requiredArg, 't'},
		{"udp-ports", requiredArg, 'u'},
		{"tcp-ns", requiredArg, 'T'},
		{"udp-ns", requiredArg, 'U'},
		{"userns", requiredArg, pastaUserNS},
		{"netns", requiredArg, pastaNetNS},
		{"ns-mac-addr", requiredArg, pastaNSMACAddr},
		{"dhcp-dns", noArg, pastaDHCPDNS},
		{"no-dhcp-dns", noArg, pastaNoDHCPDNS},
		{"dhcp-search", noArg, pastaDHCPSearch},
		{"no-dhcp-search", noArg, pastaNoDHCPSearch},
		{"dns-forward", requiredArg, pastaDNSForward},
		{"no-netns-quit", noArg, pastaNoNetNSQuit},
		{"trace", noArg, pastaTrace},
		{"runas", requiredArg, pastaRunAs},
		{"log-size", requiredArg, pastaLogSize},
		{"version", noArg, pastaVersion},
		{"outbound-if4", requiredArg, pastaOutboundIf4},
		{"outbound-if6", requiredArg, pastaOutboundIf6},
		{"config-net", noArg, pastaConfigNet},
		{"no-copy-routes", noArg, pastaNoCopyRoutes},
		{"no-copy-addrs", noArg, pastaNoCopyAddrs},
		{"netns-only", noArg, pastaNetNSOnly},
		{"map-host-loopback", requiredArg, pastaMapHostLoopback},
		{"map-guest-addr", requiredArg, pastaMapGuestAddr},
		{"dns-host", requiredArg, pastaDNSHost},
		{"vhost-user", noArg, pastaVhostUser},
		{"print-capabilities", noArg, pastaPrintCapabilities},
		{"socket-path", requiredArg, 's'},
	},
}

// pastaRefusals are the options pasta takes and ustack refuses, with
// the reason: what to do instead.
var pastaRefusals = map[int]string{
	'l':                    "--log-file: ustack logs to standard error only: drop the option and redirect standard error",
	pastaLogSize:           "--log-size: ustack logs to standard error only: drop the option",
	pastaRunAs:             "--runas: ustack does not change its user: start it as the user it should run as",
	'F':                    "--fd: ustack does not take a pre-opened tap descriptor: give a PID, --netns or a command",
	'M':                    "--mac-addr: ustack's side of the namespace's TAP device has a random locally administered MAC address: drop the option",
	pastaDHCPDNS:           "--dhcp-dns: ustack runs no DHCP, DHCPv6 or NDP server: configure the namespace's resolvers directly",
	pastaDHCPSearch:        "--dhcp-search: ustack runs no DHCP, DHCPv6 or NDP server: configure the namespace's search domains directly",
	's':                    "--socket: a passt option (its UNIX domain socket for a virtual machine), not pasta's",
	pastaPrintCapabilities: "--print-capabilities: a passt option (vhost-user back-end capabilities), not pasta's",
}

// pastaErr is a refusal as pasta's die() words it: a line on standard
// error, without the usage.
func pastaErr(format string, a ...any) error {
	return &frontEndError{msg: fmt.Sprintf(format, a...)}
}

// parsePasta parses a pasta command line; argv[0] is the program name
// its messages start with, as in C. A refusal is a *frontEndError or a
// *getoptError, worded as pasta words it and in pasta's order: options
// in order, then -t, -u and -D in order, the positionals, and -T and -U.
// Nothing outside the command line is looked at.
func parsePasta(argv []string) (pastaOptions, error) {
	o := pastaOptions{MTU: pastaDefaultMTU, PrefixLen4: -1, PID: -1}
	// pasta reads -t, -u and -D in a second pass, once addresses are
	// set up, and -T and -U in a third, once namespaces are.
	var later []parsedOpt
	g := pastaTable.scan(pastaFrontEnd.progArgs(argv))
	for {
		opt, ok, err := g.option()
		if err != nil {
			return o, err
		}
		if !ok {
			break
		}
		if reason, refused := pastaRefusals[opt.id]; refused {
			return o, pastaErr("%s", reason)
		}
		if err := o.set(opt); err != nil {
			return o, err
		}
		switch opt.id {
		case 'h', pastaVersion:
			return o, nil
		case 't', 'u', 'T', 'U', 'D':
			later = append(later, opt)
		}
	}
	if !o.ConfigNet {
		if o.NoCopyRoutes {
			return o, pastaErr("--no-copy-routes needs --config-net")
		}
		if o.NoCopyAddrs {
			return o, pastaErr("--no-copy-addrs needs --config-net")
		}
	}
	for _, l := range later {
		var err error
		switch l.id {
		case 't':
			err = o.TCPIn.add(l.id, l.arg, o.NoTCP)
		case 'u':
			err = o.UDPIn.add(l.id, l.arg, o.NoUDP)
		case 'D':
			err = o.addDNS(l.arg)
		}
		if err != nil {
			return o, err
		}
	}
	if err := o.target(g.positionals()); err != nil {
		return o, err
	}
	for _, l := range later {
		var err error
		switch l.id {
		case 'T':
			err = o.TCPOut.add(l.id, l.arg, o.NoTCP)
		case 'U':
			err = o.UDPOut.add(l.id, l.arg, o.NoUDP)
		}
		if err != nil {
			return o, err
		}
	}
	return o, nil
}

// set applies one option of pasta's first pass.
func (o *pastaOptions) set(opt parsedOpt) error {
	arg := opt.arg
	switch opt.id {
	case 'h':
		o.Help = true
	case pastaVersion:
		o.Version = true
	case 'd':
		o.Debug, o.Quiet = true, false
	case pastaTrace:
		o.Trace, o.Debug, o.Quiet = true, true, false
	case 'q':
		o.Quiet, o.Debug, o.Trace = true, false, false
	case 'f':
		o.Foreground = true
	case 'e':
		o.Stderr = true
	case 'I':
		return setBounded(&o.NSIfname, arg, ifNameSize, "Invalid interface name: %s")
	case 'p':
		return setBounded(&o.PcapFile, arg, pathMax, "Invalid pcap path: %s")
	case 'P':
		return setBounded(&o.PIDFile, arg, pathMax, "Invalid PID file: %s")
	case 'm':
		// strtol with base 0, and what follows the number ignored:
		// "-m abc" is -m 0, as in pasta.
		v, _, overflow := cStrtol(arg, 0)
		if v != 0 && (overflow || v < pastaMinMTU || v > pastaMaxMTU) {
			return pastaErr("Invalid MTU: %s", arg)
		}
		if v != 0 {
			if err := checkFrontEndMTU(v); err != nil {
				return err
			}
		}
		o.MTU = int(v)
	case 'a':
		a, ok := parseInetPton(arg)
		switch {
		case ok && a.Is6() && !a.IsUnspecified() && !cLoopback(a) && !a.Is4In6() && !isV4Compat(a) && !cMulticast(a):
			o.Addr6 = a
		case ok && a.Is4() && !a.IsUnspecified() && !isBroadcast4(a) && !cLoopback(a) && !cMulticast(a):
			o.Addr4 = a
		default:
			return pastaErr("Invalid address: %s", arg)
		}
	case 'n':
		n, ok := parsePastaNetmask(arg)
		if !ok {
			return pastaErr("Invalid netmask: %s", arg)
		}
		o.PrefixLen4 = n
	case 'g':
		a, ok := parseInetPton(arg)
		switch {
		case ok && a.Is6() && !a.IsUnspecified() && !cLoopback(a):
			o.Gateway6 = a
		case ok && a.Is4() && !a.IsUnspecified() && !isBroadcast4(a) && !cLoopback(a):
			o.Gateway4 = a
		default:
			return pastaErr("Invalid gateway address: %s", arg)
		}
	case 'i':
		o.Interface = arg
	case 'o':
		a, ok := parseInetPton(arg)
		switch {
		case ok && a.Is6() && !a.IsUnspecified() && !cLoopback(a) && !a.Is4In6() && !isV4Compat(a) && !cMulticast(a):
			o.Outbound6 = a
		case ok && a.Is4() && !a.IsUnspecified() && !isBroadcast4(a) && !cMulticast(a):
			o.Outbound4 = a
		default:
			return pastaErr("Invalid or redundant outbound address: %s", arg)
		}
	case 'S':
		if arg == "none" {
			o.NoSearch, o.Search = true, nil
			break
		}
		// pasta also counts the domains given before a "none" towards
		// its limit; ustack does not.
		o.NoSearch = false
		if len(arg) == 0 || len(arg) >= pastaMaxDomain || len(o.Search) >= pastaMaxSearch {
			return pastaErr("Cannot use DNS search domain %s", arg)
		}
		o.Search = append(o.Search, arg)
	case '4':
		o.IPv4Only, o.IPv6Only = true, false
	case '6':
		o.IPv6Only, o.IPv4Only = true, false
	case pastaOneOff:
		return pastaErr("--one-off is for passt mode only")
	case pastaNoDHCPDNS:
		return pastaErr("--no-dhcp-dns is for passt mode only")
	case pastaNoDHCPSearch:
		return pastaErr("--no-dhcp-search is for passt mode only")
	case pastaVhostUser:
		return pastaErr("--vhost-user is for passt mode only")
	case pastaNoTCP:
		o.NoTCP = true
	case pastaNoUDP:
		o.NoUDP = true
	case pastaNoICMP:
		o.NoICMP = true
	case pastaNoDHCP:
		o.NoDHCP = true
	case pastaNoDHCPv6:
		o.NoDHCPv6 = true
	case pastaNoNDP:
		o.NoNDP = true
	case pastaNoRA:
		o.NoRA = true
	case pastaNoSplice:
		o.NoSplice = true
	case pastaFreeBind:
		o.FreeBind = true
	case pastaNoMapGW:
		o.NoMapGW = true
	case pastaUserNS:
		o.NetNSOnly = false
		return setBounded(&o.UserNS, arg, pathMax, "Invalid userns: %s")
	case pastaNetNS:
		path := arg
		if !strings.Contains(arg, "/") {
			path = netnsRunDir + "/" + arg
		}
		if len(path) > pathMax {
			return pastaErr("Network namespace name/path %s too long", arg)
		}
		o.NetNS = path
	case pastaNetNSOnly:
		o.NetNSOnly, o.UserNS = true, ""
	case pastaNoNetNSQuit:
		o.NoNetNSQuit = true
	case pastaConfigNet:
		o.ConfigNet = true
	case pastaNoCopyRoutes:
		o.NoCopyRoutes = true
	case pastaNoCopyAddrs:
		o.NoCopyAddrs = true
	case pastaNSMACAddr:
		mac, err := net.ParseMAC(arg)
		if err != nil || len(mac) != 6 {
			return pastaErr("Invalid MAC address: %s", arg)
		}
		o.NSMAC = mac
	case pastaDNSForward:
		a, ok := parseInetPton(arg)
		switch {
		case ok && a.Is6() && !a.IsUnspecified() && !cLoopback(a):
			o.DNSForward6 = a
		case ok && a.Is4() && !a.IsUnspecified() && !isBroadcast4(a) && !cLoopback(a):
			o.DNSForward4 = a
		default:
			return pastaErr("Invalid DNS forwarding address: %s", arg)
		}
	case pastaDNSHost:
		a, ok := parseInetPton(arg)
		switch {
		case ok && a.Is6() && !a.IsUnspecified():
			o.DNSHost6 = a
		case ok && a.Is4() && !a.IsUnspecified() && !isBroadcast4(a):
			o.DNSHost4 = a
		default:
			return pastaErr("Invalid host nameserver address: %s", arg)
		}
	case pastaMapHostLoopback:
		return setPastaMap(arg, &o.MapHostLoopback4, &o.MapHostLoopback6, &o.NoMapGW)
	case pastaMapGuestAddr:
		return setPastaMap(arg, &o.MapGuestAddr4, &o.MapGuestAddr6, nil)
	case pastaOutboundIf4:
		return setBounded(&o.OutboundIf4, arg, ifNameSize, "Invalid interface name: %s")
	case pastaOutboundIf6:
		return setBounded(&o.OutboundIf6, arg, ifNameSize, "Invalid interface name: %s")
	}
	return nil
}

// setBounded sets *field to arg, a name or path pasta copies into a
// buffer of size bytes with its terminating NUL, refusing it (with
// format) when it is empty or does not fit.
func setBounded(field *string, arg string, size int, format string) error {
	if len(arg) == 0 || len(arg) >= size {
		return pastaErr(format, arg)
	}
	*field = arg
	return nil
}

// setPastaMap reads --map-host-loopback and --map-guest-addr: "none"
// clears both families (and, for the host's loopback, sets noMapGW);
// else an IPv4 or IPv6 address, neither unspecified, loopback nor
// multicast, replaces its family's. (pasta 2024_12_11 refuses "none"
// after clearing, against its manual; ustack does what the manual says,
// as later pastas do.)
func setPastaMap(arg string, a4, a6 *netip.Addr, noMapGW *bool) error {
	if arg == "none" {
		*a4, *a6 = netip.Addr{}, netip.Addr{}
		if noMapGW != nil {
			*noMapGW = true
		}
		return nil
	}
	a, ok := parseInetPton(arg)
	switch {
	case !ok || a.IsUnspecified() || cLoopback(a) || cMulticast(a):
		return pastaErr("Invalid address to remap to host: %s", arg)
	case a.Is6():
		*a6 = a
	default:
		*a4 = a
	}
	return nil
}

// addDNS reads -D: "none" or an IPv4 or IPv6 address, any of them.
func (o *pastaOptions) addDNS(arg string) error {
	if arg == "none" {
		o.NoDNS, o.DNS = true, nil
		o.DNSForward4, o.DNSForward6 = netip.Addr{}, netip.Addr{}
		o.DNSHost4, o.DNSHost6 = netip.Addr{}, netip.Addr{}
		return nil
	}
	a, ok := parseInetPton(arg)
	if !ok {
		return pastaErr("Cannot use DNS address %s", arg)
	}
	o.NoDNS = false
	o.DNS = append(o.DNS, a)
	return nil
}

// target reads the positionals as pasta does: with --netns, none; one
// that is a number (strtol, base 10, nothing after it) is a PID, whose
// namespaces are joined; anything else is the command to run.
func (o *pastaOptions) target(pos []string) error {
	if o.NetNS != "" && len(pos) > 0 {
		return pastaErr("Both --netns and PID or command given")
	}
	if len(pos) == 1 {
		v, rest, overflow := cStrtol(pos[0], 10)
		if rest == "" {
			if overflow || v < 0 || v > math.MaxInt32 {
				return pastaErr("Invalid PID %s", pos[0])
			}
			o.PID = int(v)
			o.NetNS = fmt.Sprintf("/proc/%d/ns/net", v)
			if o.UserNS == "" {
				o.UserNS = fmt.Sprintf("/proc/%d/ns/user", v)
			}
			pos = nil
		}
	}
	if len(pos) > 0 {
		o.Command = pos
	}
	if o.NetNS != "" && o.UserNS == "" {
		o.NetNSOnly = true
	}
	return nil
}

// add reads one -t, -u, -T or -U specification (optname is the option's
// letter) into f; protocolOff is --no-tcp or --no-udp for its protocol.
func (f *portForwards) add(optname int, spec string, protocolOff bool) error {
	if spec == "none" {
		if f.Mode != portsUnset {
			return pastaErr("Port forwarding mode '%s' conflicts with previous mode", spec)
		}
		f.Mode = portsNone
		return nil
	}
	if protocolOff {
		if optname == 't' || optname == 'T' {
			return pastaErr("TCP port forwarding requested but TCP is disabled")
		}
		return pastaErr("UDP port forwarding requested but UDP is disabled")
	}
	switch spec {
	case "auto":
		if f.Mode != portsUnset {
			return pastaErr("Port forwarding mode '%s' conflicts with previous mode", spec)
		}
		f.Mode = portsAuto
		return nil
	case "all":
		return pastaErr("'all' port forwarding is only allowed for passt")
	}
	if f.Mode > portsSpec {
		return pastaErr("Specific ports cannot be specified together with all/none/auto")
	}
	s, ok := parsePortSpec(spec, optname == 't' || optname == 'u')
	if !ok {
		return pastaErr("Invalid port specifier %s", spec)
	}
	if s.overlap {
		return pastaErr("Overlapping excluded ranges %s", spec)
	}
	f.Mode = portsSpec
	f.Specs = append(f.Specs, s.portSpec)
	return nil
}

// parsedPortSpec is a port specification and whether its exclusions
// overlap, which pasta refuses with its own message.
type parsedPortSpec struct {
	portSpec
	overlap bool
}

// parsePortSpec reads [ADDR][%IF]/PORTS (the address part only when
// withAddr: -t and -u) as pasta's conf_ports does, less the binding.
func parsePortSpec(s string, withAddr bool) (parsedPortSpec, bool) {
	var p parsedPortSpec
	ports := s
	if before, after, found := strings.Cut(s, "/"); found {
		if !withAddr {
			return p, false
		}
		ports = after
		addr, ifname, hasIf := strings.Cut(before, "%")
		if hasIf {
			if len(ifname) >= ifNameSize {
				return p, false
			}
			p.Interface = ifname
		}
		if !hasIf || addr != "" {
			// Square brackets are allowed around either family.
			if len(addr) >= 2 && addr[0] == '[' && addr[len(addr)-1] == ']' {
				addr = addr[1 : len(addr)-1]
			}
			a, ok := parseInetPton(addr)
			if !ok {
				return p, false
			}
			p.Addr = a.Unmap()
		}
	}
	chunks := strings.Split(ports, ",")
	// Exclusions first, wherever they are in the list.
	var excluded [65536 / 8]byte
	for _, c := range chunks {
		if !strings.HasPrefix(c, "~") {
			continue
		}
		r, rest, ok := parsePortRange(c[1:])
		if !ok || rest != "" {
			return p, false
		}
		for port := int(r.First); port <= int(r.Last); port++ {
			if excluded[port/8]&(1<<(port%8)) != 0 {
				p.overlap = true
				return p, true
			}
			excluded[port/8] |= 1 << (port % 8)
		}
		r.To = r.First
		p.Excluded = append(p.Excluded, r)
	}
	for _, c := range chunks {
		if strings.HasPrefix(c, "~") {
			continue
		}
		r, rest, ok := parsePortRange(c)
		if !ok {
			return p, false
		}
		r.To = r.First
		if strings.HasPrefix(rest, ":") {
			to, rest2, ok := parsePortRange(rest[1:])
			if !ok || to.Last-to.First != r.Last-r.First {
				return p, false
			}
			r.To, rest = to.First, rest2
		}
		if rest != "" {
			return p, false
		}
		p.Ranges = append(p.Ranges, r)
	}
	return p, true
}

// parsePortRange reads FIRST[-LAST] as pasta does (strtoul, base 10),
// returning what follows it.
func parsePortRange(s string) (portRange, string, bool) {
	first, rest, _ := cStrtoul(s, 10)
	if rest == s {
		return portRange{}, s, false
	}
	last := first
	if strings.HasPrefix(rest, "-") {
		after := rest[1:]
		if last, rest, _ = cStrtoul(after, 10); rest == after {
			return portRange{}, s, false
		}
	}
	if last < first || last > math.MaxUint16 {
		return portRange{}, s, false
	}
	return portRange{First: uint16(first), Last: uint16(last)}, rest, true
}

// String writes the range as a port specification reads it.
func (r portRange) String() string {
	s := strconv.Itoa(int(r.First))
	if r.Last != r.First {
		s += "-" + strconv.Itoa(int(r.Last))
	}
	if r.To != r.First {
		s += ":" + strconv.Itoa(int(r.To))
		if r.Last != r.First {
			s += "-" + strconv.Itoa(int(r.To)+int(r.Last-r.First))
		}
	}
	return s
}

// String writes the specification as pasta reads it.
func (s portSpec) String() string {
	var b strings.Builder
	if s.Addr.IsValid() || s.Interface != "" {
		if s.Addr.IsValid() {
			b.WriteString(s.Addr.String())
		}
		if s.Interface != "" {
			b.WriteString("%" + s.Interface)
		}
		b.WriteString("/")
	}
	var parts []string
	for _, r := range s.Ranges {
		parts = append(parts, r.String())
	}
	for _, r := range s.Excluded {
		parts = append(parts, "~"+r.String())
	}
	b.WriteString(strings.Join(parts, ","))
	return b.String()
}

// parseInetPton reads an IPv4 or IPv6 address as inet_pton reads one:
// no zone, and IPv4 only in dotted-quad form (both as netip reads them).
func parseInetPton(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a, true
}

// isV4Compat is IN6_IS_ADDR_V4COMPAT: ::a.b.c.d with a.b.c.d above 1.
func isV4Compat(a netip.Addr) bool {
	if !a.Is6() || a.Is4In6() {
		return false
	}
	b := a.As16()
	for _, x := range b[:12] {
		if x != 0 {
			return false
		}
	}
	return b[12]|b[13]|b[14] != 0 || b[15] > 1
}

// cLoopback is IN4_IS_ADDR_LOOPBACK (127/8) or IN6_IS_ADDR_LOOPBACK
// (::1 only: unlike netip, C does not look into ::ffff:127.0.0.1).
func cLoopback(a netip.Addr) bool {
	if a.Is4() {
		return a.As4()[0] == 127
	}
	return a == netip.IPv6Loopback()
}

// cMulticast is IN4_IS_ADDR_MULTICAST (224/4) or IN6_IS_ADDR_MULTICAST
// (ff00::/8), without netip's look into IPv4-mapped addresses.
func cMulticast(a netip.Addr) bool {
	if a.Is4() {
		return a.As4()[0]>>4 == 14
	}
	return a.As16()[0] == 0xff
}

func isBroadcast4(a netip.Addr) bool {
	return a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// parsePastaNetmask reads -n as pasta does: a dotted-quad mask whose
// ones are contiguous, or a prefix length read by strtoul with base 0
// (what follows the number ignored, none at all being 0) up to 32.
func parsePastaNetmask(s string) (int, bool) {
	if a, ok := parseInetPton(s); ok && a.Is4() {
		b := a.As4()
		m := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		n := 0
		for m&(1<<31) != 0 {
			m <<= 1
			n++
		}
		return n, m == 0
	}
	v, _, overflow := cStrtoul(s, 0)
	if overflow || v > 32 {
		return 0, false
	}
	return int(v), true
}

// args returns the command line of o: pastaTable's canonical spelling of
// its options and positionals, which parsePasta reads back to o. It is
// how the options are logged and tested.
func (o *pastaOptions) args() []string {
	var opts []parsedOpt
	add := func(id int, arg string) { opts = append(opts, parsedOpt{id: id, arg: arg}) }
	addAddr := func(id int, a ...netip.Addr) {
		for _, a := range a {
			if a.IsValid() {
				add(id, a.String())
			}
		}
	}
	addString := func(id int, s string) {
		if s != "" {
			add(id, s)
		}
	}
	addFlag := func(id int, set bool) {
		if set {
			add(id, "")
		}
	}
	switch {
	case o.Help:
		return pastaTable.spell([]parsedOpt{{id: 'h'}}, nil)
	case o.Version:
		return pastaTable.spell([]parsedOpt{{id: pastaVersion}}, nil)
	}
	switch {
	case o.Trace:
		add(pastaTrace, "")
	case o.Debug:
		add('d', "")
	case o.Quiet:
		add('q', "")
	}
	addFlag('f', o.Foreground)
	addFlag('e', o.Stderr)
	addString('I', o.NSIfname)
	addString('p', o.PcapFile)
	addString('P', o.PIDFile)
	if o.MTU != pastaDefaultMTU {
		add('m', strconv.Itoa(o.MTU))
	}
	addAddr('a', o.Addr4, o.Addr6)
	if o.PrefixLen4 >= 0 {
		add('n', strconv.Itoa(o.PrefixLen4))
	}
	addAddr('g', o.Gateway4, o.Gateway6)
	addString('i', o.Interface)
	addAddr('o', o.Outbound4, o.Outbound6)
	addString(pastaOutboundIf4, o.OutboundIf4)
	addString(pastaOutboundIf6, o.OutboundIf6)
	if o.NoSearch {
		add('S', "none")
	}
	for _, s := range o.Search {
		add('S', s)
	}
	if o.NoDNS {
		add('D', "none")
	}
	for _, a := range o.DNS {
		add('D', a.String())
	}
	addAddr(pastaDNSForward, o.DNSForward4, o.DNSForward6)
	addAddr(pastaDNSHost, o.DNSHost4, o.DNSHost6)
	addFlag(pastaNoTCP, o.NoTCP)
	addFlag(pastaNoUDP, o.NoUDP)
	addFlag(pastaNoICMP, o.NoICMP)
	addFlag(pastaNoDHCP, o.NoDHCP)
	addFlag(pastaNoNDP, o.NoNDP)
	addFlag(pastaNoDHCPv6, o.NoDHCPv6)
	addFlag(pastaNoRA, o.NoRA)
	addFlag(pastaNoSplice, o.NoSplice)
	addFlag(pastaFreeBind, o.FreeBind)
	addFlag(pastaNoMapGW, o.NoMapGW)
	addAddr(pastaMapHostLoopback, o.MapHostLoopback4, o.MapHostLoopback6)
	addAddr(pastaMapGuestAddr, o.MapGuestAddr4, o.MapGuestAddr6)
	addFlag('4', o.IPv4Only)
	addFlag('6', o.IPv6Only)
	for _, d := range []struct {
		id int
		f  *portForwards
	}{{'t', &o.TCPIn}, {'u', &o.UDPIn}, {'T', &o.TCPOut}, {'U', &o.UDPOut}} {
		switch d.f.Mode {
		case portsNone:
			add(d.id, "none")
		case portsAuto:
			add(d.id, "auto")
		case portsSpec:
			for _, s := range d.f.Specs {
				add(d.id, s.String())
			}
		}
	}
	addFlag(pastaConfigNet, o.ConfigNet)
	if o.NSMAC != nil {
		add(pastaNSMACAddr, o.NSMAC.String())
	}
	addFlag(pastaNoCopyRoutes, o.NoCopyRoutes)
	addFlag(pastaNoCopyAddrs, o.NoCopyAddrs)
	addFlag(pastaNoNetNSQuit, o.NoNetNSQuit)
	// --netns-only clears --userns and --userns clears --netns-only, so
	// at most one of them; a PID brings its own user namespace.
	pidUserNS := o.PID >= 0 && o.UserNS == fmt.Sprintf("/proc/%d/ns/user", o.PID)
	switch {
	case o.NetNSOnly:
		add(pastaNetNSOnly, "")
	case o.UserNS != "" && !pidUserNS:
		add(pastaUserNS, o.UserNS)
	}
	var pos []string
	switch {
	case o.PID >= 0:
		pos = []string{strconv.Itoa(o.PID)}
	case o.NetNS != "":
		add(pastaNetNS, o.NetNS)
	default:
		pos = o.Command
	}
	return pastaTable.spell(opts, pos)
}

// writePastaHelp prints the help of `prog` (the name it was run as),
// naming every pasta option ustack takes.
func writePastaHelp(w io.Writer, prog string) {
	fmt.Fprintf(w, `Usage: %[1]s [OPTION]... [COMMAND] [ARGS]...
       %[1]s [OPTION]... PID
       %[1]s [OPTION]... --netns [PATH|NAME]
ustack's pasta: gives a network namespace its network, served by ustack, a
userspace TCP/IP stack, on pasta's command line. The namespace is process
PID's, or the one at PATH (NAME: /run/netns/NAME); with neither, COMMAND (by
default a login shell) runs in new user and network namespaces.

  -d, --debug              log more
      --trace              log the most (implies --debug)
  -q, --quiet              log warnings and errors only
  -f, --foreground         stay in the foreground (default: fork once ready)
  -e, --stderr             no effect (log to standard error, as always)
  -h, --help               print this help and exit
      --version            print the versions and exit
  -I, --ns-ifname NAME     the interface's name in the namespace
  -p, --pcap FILE          write the namespace's packets to FILE (pcap)
  -P, --pid FILE           write the process ID to FILE once ready
  -m, --mtu MTU            the interface's MTU (default %[2]d; 0: the
                           kernel's; ustack takes %[3]d to %[4]d)
  -a, --address ADDR       the namespace's IPv4 or IPv6 address (once per
                           family; default: the host's)
  -n, --netmask MASK       its IPv4 netmask, dotted or a prefix length
  -g, --gateway ADDR       the IPv4 or IPv6 gateway (default: the host's)
  -i, --interface NAME     the host interface addresses and routes come from
  -o, --outbound ADDR      bind outbound sockets to this IPv4 or IPv6 address
      --outbound-if4 NAME  bind outbound IPv4 sockets to this interface
      --outbound-if6 NAME  bind outbound IPv6 sockets to this interface
  -D, --dns ADDR           a name server for the list; none: no DNS at all
  -S, --search LIST        a search domain for the list; none: no list
      --dns-forward ADDR   DNS traffic to ADDR goes to the host's resolver
      --dns-host ADDR      the resolver --dns-forward leads to (default:
                           the first of the host's /etc/resolv.conf)
      --no-tcp             no TCP
      --no-udp             no UDP
      --no-icmp            no ICMP or ICMPv6 echo
      --no-dhcp            no DHCP server (ustack has none)
      --no-ndp             no NDP responses (ustack has none)
      --no-dhcpv6          no DHCPv6 server (ustack has none)
      --no-ra              no router advertisements (none with
                           --config-net either)
      --no-splice          no socket splicing (ustack does none)
      --freebind           -t and -u may bind addresses the host lacks
      --no-map-gw          the gateway does not lead to the host's loopback
      --map-host-loopback ADDR
                           ADDR leads to the host's loopback (none: nothing)
      --map-guest-addr ADDR
                           ADDR leads to the namespace's address on the host
  -4, --ipv4-only          IPv4 only
  -6, --ipv6-only          IPv6 only
  -t, --tcp-ports SPEC     TCP ports forwarded from the host to the namespace
  -u, --udp-ports SPEC     UDP ports forwarded from the host to the namespace
  -T, --tcp-ns SPEC        TCP ports forwarded from the namespace to the host
  -U, --udp-ns SPEC        UDP ports forwarded from the namespace to the host
                           SPEC: none; auto, the ports bound on the far
                           side; or [[ADDR][%%IF]/]PORTS (ADDR and IF with -t
                           and -u only), PORTS a comma-separated list of
                           PORT or FIRST-LAST, each maybe :TARGET or
                           :FIRST-LAST, and ~PORT or ~FIRST-LAST excluded
      --userns NSPATH      the user namespace to join
      --netns PATH|NAME    the network namespace to serve
      --netns-only         join the network namespace only
      --no-netns-quit      keep serving when the namespace goes away
      --config-net         configure the interface in the namespace
      --ns-mac-addr MAC    with --config-net: the interface's MAC address
      --no-copy-routes     with --config-net: the default route only
      --no-copy-addrs      with --config-net: one address only
`, prog, pastaDefaultMTU, tun.MinMTU, tun.MaxMTU)
}

// writePastaVersion prints pasta's --version line, naming the pasta
// release whose command line this is, and a line naming ustack.
func writePastaVersion(w io.Writer) {
	version, revision, dep := buildVersions(gvisorModule)
	fmt.Fprintf(w, "pasta %s+ustack\n", pastaCompat)
	fmt.Fprintf(w, "ustack %s, commit %s: a userspace TCP/IP stack (%s %s)\n", version, revision, gvisorModule, dep[gvisorModule])
}

// pastaFrontEnd prints pasta's help and version.
var pastaFrontEnd = &frontEnd{name: "pasta", help: writePastaHelp, version: writePastaVersion}

// pastaParse parses argv and does what the command line settles by
// itself (frontEnd.settle).
func pastaParse(argv []string, stdout, stderr io.Writer) (o pastaOptions, status int, settled bool) {
	o, err := parsePasta(argv)
	status, settled = pastaFrontEnd.settle(argv, stdout, stderr, o.Help, o.Version, err)
	return o, status, settled
}

// pastaSettle is pastaParse less the options.
func pastaSettle(argv []string, stdout, stderr io.Writer) (int, bool) {
	_, status, settled := pastaParse(argv, stdout, stderr)
	return status, settled
}

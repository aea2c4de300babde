package main

// The slirp4netns front end: ustack started as `slirp4netns ARGS` (a
// symlink) or `ustack slirp4netns ARGS` takes slirp4netns 1.2's command
// line, as Podman 4 (libpod/networking_slirp4netns.go; Podman 5's
// containers/common libnetwork/slirp4netns) and RootlessKit 1
// (pkg/network/slirp4netns) run it: their feature probes grep
// `slirp4netns --help` for option names, so the help lists every name
// slirp4netns has that ustack takes.
//
// Refused, although slirp4netns 1.2 takes them (each with a sentence
// saying why, the usage, and exit status 1):
//   - --target-type=bess: ustack serves network namespaces, not BESS
//     sockets for User Mode Linux;
//   - --netns-type=tapfd: slirp4netns 1.3's, not 1.2's (1.2 read it as a
//     path);
//   - an MTU outside 1280..65520 (slirp4netns takes 1..65521): see
//     checkFrontEndMTU.
//
// Differences from slirp4netns 1.2 that accept more: TAPNAME may be left
// out (tap0; 1.2 requires it although its usage shows it optional), and
// the "experimental" warnings of -6, --enable-seccomp and
// --outbound-addr are not printed (they are about libslirp).

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

// slirp4netnsCompat is the slirp4netns release whose command line the
// front end takes, printed by --version as the slirp4netns version.
const slirp4netnsCompat = "1.2.0"

// slirp4netns 1.2's defaults (main.c).
const (
	slirpDefaultMTU = 1500
	// slirpMaxMTU is slirp4netns's largest MTU: 65535 less the 14-byte
	// Ethernet header of its TAP device.
	slirpMaxMTU     = 65521
	slirpDefaultTap = "tap0"
	// The host (gateway), DNS and recommended guest addresses are these
	// offsets into the network of --cidr.
	slirpGatewayOffset = 2
	slirpDNSOffset     = 3
	slirpGuestOffset   = 100
	// slirpMinPrefix and slirpMaxPrefix bound --cidr's prefix length:
	// a /25 is the smallest network that holds the guest at .100.
	slirpMinPrefix = 1
	slirpMaxPrefix = 25
)

var (
	slirpDefaultCIDR = netip.MustParsePrefix("10.0.2.0/24")
	// With --enable-ipv6, libslirp's fixed IPv6 network as slirp4netns
	// configures it: the guest takes an address from its router
	// advertisements; the host (gateway) and DNS are fixed.
	slirpPrefix6  = netip.MustParsePrefix("fd00::/64")
	slirpGateway6 = netip.MustParseAddr("fd00::2")
	slirpDNS6     = netip.MustParseAddr("fd00::3")
)

// slirpOptions is a slirp4netns 1.2 command line, parsed. With Help or
// Version set, nothing else is meaningful: print and exit 0.
type slirpOptions struct {
	// Help (-h, --help) and Version (-v, --version) end the parse, as
	// slirp4netns exits at the first of them; what came before still
	// counts (earlier errors, Warnings).
	Help, Version bool
	// Warnings are lines slirp4netns prints on standard output before
	// anything else: deprecated option names and extra arguments.
	Warnings []string

	// PID (--netns-type=pid, the default) is the process whose network
	// namespace (/proc/PID/ns/net) is served, 0 with NetNSPath instead.
	// Its user namespace is joined first, unless UserNSPath.
	PID int
	// NetNSPath (--netns-type=path) is the network namespace served, a
	// path that existed when the command line was parsed.
	NetNSPath string
	// UserNSPath (--userns-path) is the user namespace joined before the
	// network namespace, a path that existed when parsed. Without it,
	// /proc/PID/ns/user with PID and none with NetNSPath. slirp4netns
	// goes on when joining fails (as root, or when already in it).
	UserNSPath string
	// TapName is the TAP (Ethernet) device inside the namespace: opened
	// by name, so it may already exist (RootlessKit creates it).
	TapName string
	// Configure (-c) brings the namespace's network up: loopback and
	// TapName up, TapName's MTU and MAC, the guest address with CIDR's
	// prefix length, and a default route through the gateway. Without
	// it the caller configures TapName (RootlessKit does).
	Configure bool
	// MAC (--macaddress, only with Configure) is TapName's MAC address;
	// nil leaves the kernel's random one. slirp4netns reads up to six
	// ':'-separated hexadecimal bytes; fewer leave the rest zero.
	MAC net.HardwareAddr
	// ExitFD (-e): exit once this inherited descriptor is readable,
	// closed or in error (poll(2)); -1 for none.
	ExitFD int
	// ReadyFD (-r): write "1" to this inherited descriptor and close it
	// once the network is configured and the API socket listens; -1 for
	// none.
	ReadyFD int
	// MTU (-m) of TapName in bytes, default 1500; checked against what
	// ustack takes (checkFrontEndMTU), not only slirp4netns's 1..65521.
	MTU int
	// CIDR (--cidr) is the IPv4 network, 10.0.2.0/24 by default, a
	// network address with a prefix length from 1 to 25. The host is at
	// .2 (Gateway4: the gateway, and the host's loopback unless
	// DisableHostLoopback), the DNS relay at .3 (DNS4), the guest at .100
	// (Guest4).
	CIDR netip.Prefix
	// IPv6 (-6) adds IPv6: the network fd00::/64, host and gateway
	// fd00::2, DNS fd00::3, and the guest configures itself from router
	// advertisements. Off, the sandbox has no IPv6.
	IPv6 bool
	// APISocket (-a) is the path of the unix socket that serves
	// slirp4netns's JSON API (add_hostfwd, list_hostfwd, remove_hostfwd);
	// "" for none.
	APISocket string
	// DisableHostLoopback: the gateway addresses do not lead to the
	// host's loopback (127.0.0.1, ::1). By default they do.
	DisableHostLoopback bool
	// EnableSandbox: confine the helper once it serves (slirp4netns: a
	// new mount namespace with only /etc and /run from the host, and as
	// root every capability dropped but CAP_NET_BIND_SERVICE).
	EnableSandbox bool
	// EnableSeccomp: a seccomp allow-list of the system calls serving
	// takes.
	EnableSeccomp bool
	// OutboundAddr (--outbound-addr with an IPv4 address) is the source
	// address outbound IPv4 sockets bind to; OutboundIf (--outbound-addr
	// with anything else) names a host interface whose first IPv4
	// address is looked up once at start. Both zero: the routing table
	// chooses.
	OutboundAddr netip.Addr
	OutboundIf   string
	// OutboundAddr6 and OutboundIf6 (--outbound-addr6) are the same for
	// IPv6 sockets.
	OutboundAddr6 netip.Addr
	OutboundIf6   string
	// DisableDNS turns off the DNS relay at DNS4 (and fd00::3), which
	// otherwise sends queries to the host's resolvers.
	DisableDNS bool
}

// Gateway4 is the host's address in the sandbox: the gateway, where
// host loopback is reached unless DisableHostLoopback.
func (o *slirpOptions) Gateway4() netip.Addr { return slirpOffset(o.CIDR, slirpGatewayOffset) }

// DNS4 is the DNS relay's address in the sandbox.
func (o *slirpOptions) DNS4() netip.Addr { return slirpOffset(o.CIDR, slirpDNSOffset) }

// Guest4 is the guest's address with CIDR's prefix length, as -c sets it.
func (o *slirpOptions) Guest4() netip.Prefix {
	return netip.PrefixFrom(slirpOffset(o.CIDR, slirpGuestOffset), o.CIDR.Bits())
}

func slirpOffset(p netip.Prefix, off uint32) netip.Addr {
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + off
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// NetNS is the path of the network namespace served.
func (o *slirpOptions) NetNS() string {
	if o.NetNSPath != "" {
		return o.NetNSPath
	}
	return fmt.Sprintf("/proc/%d/ns/net", o.PID)
}

// UserNS is the path of the user namespace joined first, "" for none.
func (o *slirpOptions) UserNS() string {
	if o.UserNSPath == "" && o.PID > 0 {
		return fmt.Sprintf("/proc/%d/ns/user", o.PID)
	}
	return o.UserNSPath
}

// Long-only options of slirp4netns, numbered after the short ones.
const (
	slirpCIDR = firstLongOnly + iota
	slirpDisableHostLoopback
	slirpNoHostLoopback // deprecated name of --disable-host-loopback
	slirpNetNSType
	slirpUserNSPath
	slirpEnableSandbox
	slirpCreateSandbox // deprecated name of --enable-sandbox
	slirpEnableSeccomp
	slirpOutboundAddr
	slirpOutboundAddr6
	slirpDisableDNS
	slirpMACAddress
	slirpTargetType
)

// slirpTable is slirp4netns 1.2's getopt_long table, in its order (which
// decides the order of an ambiguous prefix's possibilities). It
// permutes: options may follow PID and TAPNAME.
var slirpTable = &optionTable{
	short: "ce:r:m:a:6hv",
	long: []longOpt{
		{"configure", noArg, 'c'},
		{"exit-fd", requiredArg, 'e'},
		{"ready-fd", requiredArg, 'r'},
		{"mtu", requiredArg, 'm'},
		{"cidr", requiredArg, slirpCIDR},
		{"disable-host-loopback", noArg, slirpDisableHostLoopback},
		{"no-host-loopback", noArg, slirpNoHostLoopback},
		{"netns-type", requiredArg, slirpNetNSType},
		{"userns-path", requiredArg, slirpUserNSPath},
		{"api-socket", requiredArg, 'a'},
		{"enable-ipv6", noArg, '6'},
		{"enable-sandbox", noArg, slirpEnableSandbox},
		{"create-sandbox", noArg, slirpCreateSandbox},
		{"enable-seccomp", noArg, slirpEnableSeccomp},
		{"help", noArg, 'h'},
		{"version", noArg, 'v'},
		{"outbound-addr", requiredArg, slirpOutboundAddr},
		{"outbound-addr6", requiredArg, slirpOutboundAddr6},
		{"disable-dns", noArg, slirpDisableDNS},
		{"macaddress", requiredArg, slirpMACAddress},
		{"target-type", requiredArg, slirpTargetType},
	},
}

// withUsage is a refusal that slirp4netns follows with its usage.
func withUsage(format string, a ...any) error {
	return &frontEndError{msg: fmt.Sprintf(format, a...), usage: true}
}

// parseSlirp4netns parses a slirp4netns 1.2 command line; argv[0] is the
// program name its messages start with, as in C. A refusal is a
// *frontEndError or a *getoptError, worded as slirp4netns words it, in
// the order slirp4netns checks: options in their order, then
// --macaddress and --target-type, the positionals, and last the values
// it checks once parsed (--cidr, --outbound-addr, --outbound-addr6,
// --macaddress). It checks that the paths of --userns-path and
// --netns-type=path exist, as slirp4netns does while parsing.
func parseSlirp4netns(argv []string) (slirpOptions, error) {
	o := slirpOptions{ExitFD: -1, ReadyFD: -1, MTU: slirpDefaultMTU, CIDR: slirpDefaultCIDR, TapName: slirpDefaultTap}
	var cidr, netnsType, outbound, outbound6, mac, targetType *string
	g := slirpTable.scan(slirp4netnsFrontEnd.progArgs(argv))
	for {
		opt, ok, err := g.option()
		if err != nil {
			return o, err
		}
		if !ok {
			break
		}
		arg := opt.arg
		switch opt.id {
		case 'c':
			o.Configure = true
		case 'e':
			if o.ExitFD, ok = slirpFD(arg); !ok {
				return o, withUsage("exit-fd must be a non-negative integer")
			}
		case 'r':
			if o.ReadyFD, ok = slirpFD(arg); !ok {
				return o, withUsage("ready-fd must be a non-negative integer")
			}
		case 'm':
			v, rest, overflow := cStrtol(arg, 10)
			if overflow || rest != "" || v <= 0 || v > slirpMaxMTU {
				return o, withUsage("MTU must be a positive integer (< %d)", slirpMaxMTU+1)
			}
			if err := checkFrontEndMTU(v); err != nil {
				return o, withUsage("%v", err)
			}
			o.MTU = int(v)
		case slirpCIDR:
			cidr = &arg
		case slirpNoHostLoopback:
			o.Warnings = append(o.Warnings, "WARNING: --no-host-loopback is a deprecated name of --disable-host-loopback")
			o.DisableHostLoopback = true
		case slirpDisableHostLoopback:
			o.DisableHostLoopback = true
		case slirpCreateSandbox:
			o.Warnings = append(o.Warnings, "WARNING: --create-sandbox is a deprecated name of --enable-sandbox")
			o.EnableSandbox = true
		case slirpEnableSandbox:
			o.EnableSandbox = true
		case slirpEnableSeccomp:
			o.EnableSeccomp = true
		case slirpNetNSType:
			netnsType = &arg
		case slirpUserNSPath:
			if pathExists(arg) != nil {
				return o, withUsage("userns path doesn't exist: %s", arg)
			}
			o.UserNSPath = arg
		case 'a':
			o.APISocket = arg
		case '6':
			o.IPv6 = true
		case 'h':
			o.Help = true
			return o, nil
		case 'v':
			o.Version = true
			return o, nil
		case slirpOutboundAddr:
			outbound = &arg
		case slirpOutboundAddr6:
			outbound6 = &arg
		case slirpDisableDNS:
			o.DisableDNS = true
		case slirpMACAddress:
			mac = &arg
		case slirpTargetType:
			targetType = &arg
		}
	}
	if mac != nil && !o.Configure {
		return o, withUsage("--macaddr cannot be specified when --configure or -c is not specified")
	}
	if targetType != nil {
		switch *targetType {
		case "netns":
		case "bess":
			return o, withUsage("--target-type=bess: ustack serves network namespaces only (--target-type=netns), not BESS sockets")
		default:
			return o, withUsage(`--target-type must be either "netns" or "bess"`)
		}
	}
	pos := g.positionals()
	if len(pos) == 0 {
		return o, withUsage("")
	}
	if len(pos) > 2 {
		o.Warnings = append(o.Warnings, "WARNING: too many arguments")
	}
	switch {
	case netnsType == nil || *netnsType == "pid":
		v, rest, overflow := cStrtol(pos[0], 10)
		if overflow || rest != "" || v <= 0 || v > math.MaxInt32 {
			return o, withUsage("PID must be a positive integer")
		}
		o.PID = int(v)
	case *netnsType == "tapfd":
		return o, withUsage("--netns-type=tapfd: slirp4netns 1.3's descriptor type is not taken: use pid or path")
	default:
		// slirp4netns 1.2 reads every type but pid as path.
		if err := pathExists(pos[0]); err != nil {
			return o, withUsage("existing path expected when --netns-type=path: %v", err)
		}
		o.NetNSPath = pos[0]
	}
	if len(pos) > 1 {
		o.TapName = pos[1]
	}
	if cidr != nil {
		p, err := parseSlirpCIDR(*cidr)
		if err != nil {
			return o, err
		}
		o.CIDR = p
	}
	if outbound != nil {
		if a, err := netip.ParseAddr(*outbound); err == nil && a.Is4() {
			o.OutboundAddr = a
		} else {
			o.OutboundIf = *outbound
		}
	}
	if outbound6 != nil {
		if a, err := netip.ParseAddr(*outbound6); err == nil && a.Is6() && a.Zone() == "" {
			o.OutboundAddr6 = a
		} else {
			o.OutboundIf6 = *outbound6
		}
	}
	if mac != nil {
		m, err := parseSlirpMAC(*mac)
		if err != nil {
			return o, err
		}
		o.MAC = m
	}
	return o, nil
}

// slirpFD reads a descriptor number as slirp4netns does (strtol, base
// 10, nothing after it, not negative). Above MaxInt32 C would truncate
// it; ustack refuses it.
func slirpFD(s string) (int, bool) {
	v, rest, overflow := cStrtol(s, 10)
	if overflow || rest != "" || v < 0 || v > math.MaxInt32 {
		return -1, false
	}
	return int(v), true
}

// parseSlirpCIDR reads --cidr as slirp4netns does: four decimal octets
// of at most three digits, '/', a prefix length of one or two digits
// from 1 to 25, and no host bits. Its refusals are not followed by the
// usage.
func parseSlirpCIDR(s string) (netip.Prefix, error) {
	bad := func(format string, a ...any) (netip.Prefix, error) {
		return netip.Prefix{}, &frontEndError{msg: fmt.Sprintf(format, a...)}
	}
	addr, bits, ok := strings.Cut(s, "/")
	octets := strings.Split(addr, ".")
	shaped := ok && len(octets) == 4 && len(bits) >= 1 && len(bits) <= 2 && allDigits(bits)
	for _, d := range octets {
		shaped = shaped && len(d) >= 1 && len(d) <= 3 && allDigits(d)
	}
	if !shaped {
		return bad("invalid CIDR: %s", s)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return bad("invalid network address: %s", addr)
	}
	n, _ := strconv.Atoi(bits)
	if n < slirpMinPrefix || n > slirpMaxPrefix {
		return bad("prefix length needs to be %d-%d", slirpMinPrefix, slirpMaxPrefix)
	}
	p := netip.PrefixFrom(a, n)
	if p.Masked() != p {
		return bad("CIDR needs to be a network address like 10.0.2.0/24, not like 10.0.2.100/24")
	}
	return p, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseSlirpMAC reads --macaddress as slirp4netns does: ':'-separated
// fields, each read as C's sscanf("%x") (a hexadecimal number with an
// optional sign and 0x, anything after it ignored) from 0 to 255, at
// most six of them; fewer leave the remaining bytes zero, as slirp4netns
// sets the address from a zeroed buffer. An address that is not
// unicast (multicast, broadcast or all zero), which the kernel refuses
// when -c sets it, is refused here.
func parseSlirpMAC(s string) (net.HardwareAddr, error) {
	const hint = "macaddress has to be a valid MAC address (hex string, 6 bytes, each byte separated by a ':')."
	fields := strings.Split(s, ":")
	mac := make(net.HardwareAddr, 6)
	for i, f := range fields {
		if i == len(mac) {
			return nil, &frontEndError{msg: `"` + s + `" is an invalid MAC address.  Is it too long?` + "\n" + hint}
		}
		// A negative number wraps around to more than 255.
		v, rest, overflow := cStrtoul(f, 16)
		if rest == f || overflow || v > 255 {
			return nil, &frontEndError{msg: `"` + s + `" is an invalid MAC address.` + "\n" + hint}
		}
		mac[i] = byte(v)
	}
	if mac[0]&1 != 0 || string(mac) == "\x00\x00\x00\x00\x00\x00" {
		return nil, &frontEndError{msg: fmt.Sprintf("--macaddress %s: not a unicast MAC address, which the TAP device needs", mac)}
	}
	return mac, nil
}

// args returns the command line of o: slirpTable's canonical spelling
// of its options and positionals, which parseSlirp4netns reads back to
// o (less its Warnings). It is how the options are logged and tested.
func (o *slirpOptions) args() []string {
	var opts []parsedOpt
	add := func(id int, arg string) { opts = append(opts, parsedOpt{id: id, arg: arg}) }
	switch {
	case o.Help:
		add('h', "")
	case o.Version:
		add('v', "")
	}
	if o.Help || o.Version {
		return slirpTable.spell(opts, nil)
	}
	if o.Configure {
		add('c', "")
	}
	if o.ExitFD >= 0 {
		add('e', strconv.Itoa(o.ExitFD))
	}
	if o.ReadyFD >= 0 {
		add('r', strconv.Itoa(o.ReadyFD))
	}
	if o.MTU != slirpDefaultMTU {
		add('m', strconv.Itoa(o.MTU))
	}
	if o.IPv6 {
		add('6', "")
	}
	if o.APISocket != "" {
		add('a', o.APISocket)
	}
	if o.CIDR != slirpDefaultCIDR {
		add(slirpCIDR, o.CIDR.String())
	}
	if o.DisableHostLoopback {
		add(slirpDisableHostLoopback, "")
	}
	if o.NetNSPath != "" {
		add(slirpNetNSType, "path")
	}
	if o.UserNSPath != "" {
		add(slirpUserNSPath, o.UserNSPath)
	}
	if o.EnableSandbox {
		add(slirpEnableSandbox, "")
	}
	if o.EnableSeccomp {
		add(slirpEnableSeccomp, "")
	}
	switch {
	case o.OutboundAddr.IsValid():
		add(slirpOutboundAddr, o.OutboundAddr.String())
	case o.OutboundIf != "":
		add(slirpOutboundAddr, o.OutboundIf)
	}
	switch {
	case o.OutboundAddr6.IsValid():
		add(slirpOutboundAddr6, o.OutboundAddr6.String())
	case o.OutboundIf6 != "":
		add(slirpOutboundAddr6, o.OutboundIf6)
	}
	if o.DisableDNS {
		add(slirpDisableDNS, "")
	}
	if o.MAC != nil {
		add(slirpMACAddress, o.MAC.String())
	}
	target := o.NetNSPath
	if target == "" {
		target = strconv.Itoa(o.PID)
	}
	return slirpTable.spell(opts, []string{target, o.TapName})
}

// writeSlirp4netnsHelp prints the help of `prog` (the name it was run
// as), naming every slirp4netns 1.2 option ustack takes.
func writeSlirp4netnsHelp(w io.Writer, prog string) {
	fmt.Fprintf(w, `Usage: %s [OPTION]... PID|PATH [TAPNAME]
ustack's slirp4netns: gives an unprivileged network namespace its network,
served by ustack, a userspace TCP/IP stack, on slirp4netns 1.2's command line.
The namespace is process PID's (or at PATH with --netns-type=path); its
network is the TAP device TAPNAME (default %s) inside it.

-c, --configure          set TAPNAME up: its address (network + 100), MTU, a
                         default route through the host (network + 2), and lo;
                         without -c, TAPNAME is attached to as it is (its
                         creator configures it) and left alone
-e, --exit-fd=FD         exit when FD becomes readable or is closed
-r, --ready-fd=FD        once serving, write "1" to FD and close it
-m, --mtu=MTU            TAPNAME's MTU (default %d; ustack takes %d to %d)
-6, --enable-ipv6        IPv6 as well, on %s (host %s, DNS %s)
-a, --api-socket=PATH    serve the port forwarding API on this unix socket
--cidr=CIDR              the IPv4 network (default %s): host at .2, DNS
                         at .3, the namespace at .100; a prefix of /1 to /25
--disable-host-loopback  the host address does not reach the host's loopback
--netns-type=TYPE        pid (the default): the namespace of process PID;
                         path: the namespace at PATH
--userns-path=PATH       the user namespace to join (default: PID's)
--enable-sandbox         confine ustack while it serves: either this or
                         --enable-seccomp confines it fully, serving from a
                         process of its own in new mount and PID namespaces
                         with an empty root, as nobody where it can be,
                         with a seccomp allow-list of system calls
--enable-seccomp         the same as --enable-sandbox
--outbound-addr=IPv4     bind outbound IPv4 sockets to this address (or to
                         the first IPv4 address of this interface)
--outbound-addr6=IPv6    bind outbound IPv6 sockets to this address (or to
                         the first IPv6 address of this interface)
--disable-dns            no DNS relay to the host's resolvers at .3
--macaddress=MAC         TAPNAME's MAC address (with -c only)
--target-type=TYPE       netns, the only type ustack serves
-h, --help               print this help and exit
-v, --version            print the versions and exit
`, prog, slirpDefaultTap, slirpDefaultMTU, tun.MinMTU, tun.MaxMTU, slirpPrefix6, slirpGateway6, slirpDNS6, slirpDefaultCIDR)
}

// writeSlirp4netnsVersion prints slirp4netns's --version lines (Podman's
// `podman info` shows them) with ustack's values, and a line naming
// ustack.
func writeSlirp4netnsVersion(w io.Writer) {
	version, revision, dep := buildVersions(gvisorModule, seccompModule)
	fmt.Fprintf(w, "slirp4netns version %s+ustack\n", slirp4netnsCompat)
	fmt.Fprintf(w, "commit: %s\n", revision)
	fmt.Fprintf(w, "libslirp: none (ustack runs gVisor's netstack, %s %s)\n", gvisorModule, dep[gvisorModule])
	// The libslirp configuration level of the slirp4netns 1.2 build
	// whose command line this is (Debian 12's), whose options ustack takes.
	fmt.Fprintf(w, "SLIRP_CONFIG_VERSION_MAX: 4\n")
	fmt.Fprintf(w, "libseccomp: none (ustack builds its seccomp filter with %s %s)\n", seccompModule, dep[seccompModule])
	fmt.Fprintf(w, "ustack: %s\n", version)
}

// slirp4netnsFrontEnd prints slirp4netns's help and version.
var slirp4netnsFrontEnd = &frontEnd{name: "slirp4netns", usageOnStdout: true, help: writeSlirp4netnsHelp, version: writeSlirp4netnsVersion}

// slirp4netnsParse parses argv and does what the command line settles
// by itself (frontEnd.settle), after slirp4netns's warnings.
func slirp4netnsParse(argv []string, stdout, stderr io.Writer) (o slirpOptions, status int, settled bool) {
	o, err := parseSlirp4netns(argv)
	for _, w := range o.Warnings {
		fmt.Fprintln(stdout, w)
	}
	status, settled = slirp4netnsFrontEnd.settle(argv, stdout, stderr, o.Help, o.Version, err)
	return o, status, settled
}

// slirp4netnsSettle is slirp4netnsParse less the options.
func slirp4netnsSettle(argv []string, stdout, stderr io.Writer) (int, bool) {
	_, status, settled := slirp4netnsParse(argv, stdout, stderr)
	return status, settled
}

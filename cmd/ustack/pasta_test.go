package main

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/sandbox"
)

// pastaWant is the parse of `pasta --netns /run/netns/x` changed by mod.
func pastaWant(mod func(o *pastaOptions)) pastaOptions {
	o := pastaOptions{MTU: 65520, PrefixLen4: -1, PID: -1, NetNS: "/run/netns/x", NetNSOnly: true}
	if mod != nil {
		mod(&o)
	}
	return o
}

// pastaBare is the parse of a command line that stops at help or
// version, changed by mod.
func pastaBare(mod func(o *pastaOptions)) pastaOptions {
	o := pastaOptions{MTU: 65520, PrefixLen4: -1, PID: -1}
	mod(&o)
	return o
}

type pastaCase struct {
	name string
	args []string
	want pastaOptions
}

var (
	ip = netip.MustParseAddr
	// spec is a port specification of ranges without address.
	spec = func(r ...portRange) portSpec { return portSpec{Ranges: r} }
	one  = func(port uint16) portRange { return portRange{port, port, port} }
)

func TestPastaAcceptsEveryOptionInEveryForm(t *testing.T) {
	a := func(s string) []string { return append(strings.Fields(s), "--netns", "x") }
	for _, tc := range []pastaCase{
		{"--netns NAME", a(""), pastaWant(nil)},
		{"--netns PATH", []string{"--netns", "/proc/1/ns/net"}, pastaWant(func(o *pastaOptions) { o.NetNS = "/proc/1/ns/net" })},
		{"--netns=PATH", []string{"--netns=/var/run/netns/y"}, pastaWant(func(o *pastaOptions) { o.NetNS = "/var/run/netns/y" })},
		{"--pc prefix", a("--pc /tmp/x.pcap"), pastaWant(func(o *pastaOptions) { o.PcapFile = "/tmp/x.pcap" })},
		{"-p= is the path =", a("-p="), pastaWant(func(o *pastaOptions) { o.PcapFile = "=" })},
		{"-d", a("-d"), pastaWant(func(o *pastaOptions) { o.Debug = true })},
		{"--debug", a("--debug"), pastaWant(func(o *pastaOptions) { o.Debug = true })},
		{"--trace", a("--trace"), pastaWant(func(o *pastaOptions) { o.Debug, o.Trace = true, true })},
		{"-q", a("-q"), pastaWant(func(o *pastaOptions) { o.Quiet = true })},
		{"--quiet", a("--quiet"), pastaWant(func(o *pastaOptions) { o.Quiet = true })},
		{"-d then -q", a("-d -q"), pastaWant(func(o *pastaOptions) { o.Quiet = true })},
		{"-q then --trace", a("-q --trace"), pastaWant(func(o *pastaOptions) { o.Debug, o.Trace = true, true })},
		{"-f", a("-f"), pastaWant(func(o *pastaOptions) { o.Foreground = true })},
		{"--foreground", a("--foreground"), pastaWant(func(o *pastaOptions) { o.Foreground = true })},
		{"-e", a("-e"), pastaWant(func(o *pastaOptions) { o.Stderr = true })},
		{"--stderr", a("--stderr"), pastaWant(func(o *pastaOptions) { o.Stderr = true })},
		{"-I NAME", a("-I tap0"), pastaWant(func(o *pastaOptions) { o.NSIfname = "tap0" })},
		{"-INAME", a("-Ieth0"), pastaWant(func(o *pastaOptions) { o.NSIfname = "eth0" })},
		{"--ns-ifname=NAME", a("--ns-ifname=0123456789abcde"), pastaWant(func(o *pastaOptions) { o.NSIfname = "0123456789abcde" })},
		{"-p FILE", a("-p /tmp/x.pcap"), pastaWant(func(o *pastaOptions) { o.PcapFile = "/tmp/x.pcap" })},
		{"--pcap FILE", a("--pcap /tmp/x.pcap"), pastaWant(func(o *pastaOptions) { o.PcapFile = "/tmp/x.pcap" })},
		{"-P FILE", a("-P /tmp/pasta.pid"), pastaWant(func(o *pastaOptions) { o.PIDFile = "/tmp/pasta.pid" })},
		{"--pid FILE", a("--pid /tmp/pasta.pid"), pastaWant(func(o *pastaOptions) { o.PIDFile = "/tmp/pasta.pid" })},
		{"-m MTU", a("-m 1500"), pastaWant(func(o *pastaOptions) { o.MTU = 1500 })},
		{"-mMTU hexadecimal", a("-m0x5dc"), pastaWant(func(o *pastaOptions) { o.MTU = 1500 })},
		{"--mtu=MTU", a("--mtu=65520"), pastaWant(nil)},
		{"--mtu 0: the kernel's", a("--mtu 0"), pastaWant(func(o *pastaOptions) { o.MTU = 0 })},
		{"--mtu garbage is 0, as strtol reads it", a("--mtu abc"), pastaWant(func(o *pastaOptions) { o.MTU = 0 })},
		{"--mtu trailing garbage ignored", a("--mtu 9000xyz"), pastaWant(func(o *pastaOptions) { o.MTU = 9000 })},
		{"-a IPv4", a("-a 10.0.2.100"), pastaWant(func(o *pastaOptions) { o.Addr4 = ip("10.0.2.100") })},
		{"--address IPv6", a("--address fd00::100"), pastaWant(func(o *pastaOptions) { o.Addr6 = ip("fd00::100") })},
		{"-a both", a("-a 10.0.2.100 -a fd00::100 -a 10.0.2.101"), pastaWant(func(o *pastaOptions) { o.Addr4, o.Addr6 = ip("10.0.2.101"), ip("fd00::100") })},
		{"-n bits", a("-n 24"), pastaWant(func(o *pastaOptions) { o.PrefixLen4 = 24 })},
		{"--netmask dotted", a("--netmask 255.255.240.0"), pastaWant(func(o *pastaOptions) { o.PrefixLen4 = 20 })},
		{"--netmask=0", a("--netmask=0"), pastaWant(func(o *pastaOptions) { o.PrefixLen4 = 0 })},
		{"-g IPv4", a("-g 10.0.2.2"), pastaWant(func(o *pastaOptions) { o.Gateway4 = ip("10.0.2.2") })},
		{"--gateway IPv6", a("--gateway fe80::1"), pastaWant(func(o *pastaOptions) { o.Gateway6 = ip("fe80::1") })},
		{"-i NAME", a("-i eth0"), pastaWant(func(o *pastaOptions) { o.Interface = "eth0" })},
		{"--interface NAME", a("--interface eth0"), pastaWant(func(o *pastaOptions) { o.Interface = "eth0" })},
		{"-o IPv4", a("-o 192.0.2.1"), pastaWant(func(o *pastaOptions) { o.Outbound4 = ip("192.0.2.1") })},
		{"--outbound IPv6", a("--outbound 2001:db8::1"), pastaWant(func(o *pastaOptions) { o.Outbound6 = ip("2001:db8::1") })},
		{"--outbound-if4", a("--outbound-if4 eth0"), pastaWant(func(o *pastaOptions) { o.OutboundIf4 = "eth0" })},
		{"--outbound-if6", a("--outbound-if6=eth1"), pastaWant(func(o *pastaOptions) { o.OutboundIf6 = "eth1" })},
		{"-D ADDR", a("-D 192.0.2.53 --dns 2001:db8::53"), pastaWant(func(o *pastaOptions) { o.DNS = []netip.Addr{ip("192.0.2.53"), ip("2001:db8::53")} })},
		{"--dns none", a("--dns-forward 10.0.2.3 --dns none"), pastaWant(func(o *pastaOptions) { o.NoDNS = true })},
		{"--dns none, then more", a("--dns none -D 127.0.0.1"), pastaWant(func(o *pastaOptions) { o.DNS = []netip.Addr{ip("127.0.0.1")} })},
		{"-S LIST", a("-S example.com --search example.org"), pastaWant(func(o *pastaOptions) { o.Search = []string{"example.com", "example.org"} })},
		{"-S none", a("-S example.com -S none"), pastaWant(func(o *pastaOptions) { o.NoSearch = true })},
		{"--dns-forward IPv4", a("--dns-forward 169.254.1.1"), pastaWant(func(o *pastaOptions) { o.DNSForward4 = ip("169.254.1.1") })},
		{"--dns-forward=IPv6", a("--dns-forward=fd00::3"), pastaWant(func(o *pastaOptions) { o.DNSForward6 = ip("fd00::3") })},
		{"--dns-host", a("--dns-host 192.0.2.53 --dns-host ::1"), pastaWant(func(o *pastaOptions) { o.DNSHost4, o.DNSHost6 = ip("192.0.2.53"), ip("::1") })},
		{"protocol switches", a("--no-tcp --no-udp --no-icmp"), pastaWant(func(o *pastaOptions) { o.NoTCP, o.NoUDP, o.NoICMP = true, true, true })},
		{"servers ustack has not", a("--no-dhcp --no-ndp --no-dhcpv6 --no-ra --no-splice"), pastaWant(func(o *pastaOptions) {
			o.NoDHCP, o.NoNDP, o.NoDHCPv6, o.NoRA, o.NoSplice = true, true, true, true, true
		})},
		{"--no-dhcp exact beats --no-dhcpv6", a("--no-dhcp"), pastaWant(func(o *pastaOptions) { o.NoDHCP = true })},
		{"--ns-mac-addr", a("--config-net --ns-mac-addr 02:00:00:00:00:07"), pastaWant(func(o *pastaOptions) {
			o.ConfigNet, o.NSMAC = true, net.HardwareAddr{2, 0, 0, 0, 0, 7}
		})},
		{"--freebind", a("--freebind"), pastaWant(func(o *pastaOptions) { o.FreeBind = true })},
		{"--no-map-gw", a("--no-map-gw"), pastaWant(func(o *pastaOptions) { o.NoMapGW = true })},
		{"--map-host-loopback", a("--map-host-loopback 169.254.1.2 --map-host-loopback fd00::2"), pastaWant(func(o *pastaOptions) {
			o.MapHostLoopback4, o.MapHostLoopback6 = ip("169.254.1.2"), ip("fd00::2")
		})},
		{"--map-host-loopback none", a("--map-host-loopback 169.254.1.2 --map-host-loopback none"), pastaWant(func(o *pastaOptions) { o.NoMapGW = true })},
		{"--map-guest-addr", a("--map-guest-addr 169.254.1.2"), pastaWant(func(o *pastaOptions) { o.MapGuestAddr4 = ip("169.254.1.2") })},
		{"--map-guest-addr=none", a("--map-guest-addr=169.254.1.2 --map-guest-addr=none"), pastaWant(nil)},
		{"-4", a("-6 -4"), pastaWant(func(o *pastaOptions) { o.IPv4Only = true })},
		{"--ipv6-only", a("--ipv4-only --ipv6-only"), pastaWant(func(o *pastaOptions) { o.IPv6Only = true })},
		{"-t PORT", a("-t 22"), pastaWant(func(o *pastaOptions) { o.TCPIn = portForwards{portsSpec, []portSpec{spec(one(22))}} })},
		{"-tPORT:PORT", a("-t22:23"), pastaWant(func(o *pastaOptions) { o.TCPIn = portForwards{portsSpec, []portSpec{spec(portRange{22, 22, 23})}} })},
		{"--tcp-ports list", a("--tcp-ports 22,25"), pastaWant(func(o *pastaOptions) { o.TCPIn = portForwards{portsSpec, []portSpec{spec(one(22), one(25))}} })},
		{"--tcp-ports=range", a("--tcp-ports=22-80"), pastaWant(func(o *pastaOptions) { o.TCPIn = portForwards{portsSpec, []portSpec{spec(portRange{22, 80, 22})}} })},
		{"-t range:range", a("-t 22-80:32-90"), pastaWant(func(o *pastaOptions) { o.TCPIn = portForwards{portsSpec, []portSpec{spec(portRange{22, 80, 32})}} })},
		{"-t ADDR/PORT", a("-t 192.0.2.1/22"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{{Addr: ip("192.0.2.1"), Ranges: []portRange{one(22)}}}}
		})},
		{"-t [ADDR]/PORT", a("-t [::1]/22"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{{Addr: ip("::1"), Ranges: []portRange{one(22)}}}}
		})},
		{"-t ADDR%IF/PORT", a("-t 192.0.2.1%eth0/22"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{{Addr: ip("192.0.2.1"), Interface: "eth0", Ranges: []portRange{one(22)}}}}
		})},
		{"-t %IF/PORT", a("-t %eth0/22"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{{Interface: "eth0", Ranges: []portRange{one(22)}}}}
		})},
		{"-t exclusions", a("-t 2000-5000,~3000-3010"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{{Ranges: []portRange{{2000, 5000, 2000}}, Excluded: []portRange{{3000, 3010, 3000}}}}}
		})},
		{"-t ADDR/ranges with an exclusion first", a("-t 192.0.2.1/~25,20-30"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{{Addr: ip("192.0.2.1"), Ranges: []portRange{{20, 30, 20}}, Excluded: []portRange{one(25)}}}}
		})},
		{"-t exclusions only", a("-t ~20000-20010"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{{Excluded: []portRange{{20000, 20010, 20000}}}}}
		})},
		{"-t repeated", a("-t 22 -t 80:8080"), pastaWant(func(o *pastaOptions) {
			o.TCPIn = portForwards{portsSpec, []portSpec{spec(one(22)), spec(portRange{80, 80, 8080})}}
		})},
		{"-t none", a("-t none"), pastaWant(func(o *pastaOptions) { o.TCPIn.Mode = portsNone })},
		{"-t auto", a("-t auto"), pastaWant(func(o *pastaOptions) { o.TCPIn.Mode = portsAuto })},
		{"-u", a("-u 53 --udp-ports=5353:53"), pastaWant(func(o *pastaOptions) {
			o.UDPIn = portForwards{portsSpec, []portSpec{spec(one(53)), spec(portRange{5353, 5353, 53})}}
		})},
		{"-T", a("-T 5432"), pastaWant(func(o *pastaOptions) { o.TCPOut = portForwards{portsSpec, []portSpec{spec(one(5432))}} })},
		{"--tcp-ns", a("--tcp-ns=auto"), pastaWant(func(o *pastaOptions) { o.TCPOut.Mode = portsAuto })},
		{"-U", a("-U 53"), pastaWant(func(o *pastaOptions) { o.UDPOut = portForwards{portsSpec, []portSpec{spec(one(53))}} })},
		{"--udp-ns", a("--udp-ns none"), pastaWant(func(o *pastaOptions) { o.UDPOut.Mode = portsNone })},
		{"--userns", a("--userns /proc/1/ns/user"), pastaWant(func(o *pastaOptions) { o.UserNS, o.NetNSOnly = "/proc/1/ns/user", false })},
		{"--netns-only", a("--netns-only"), pastaWant(nil)},
		{"--netns-only drops --userns", a("--userns /proc/1/ns/user --netns-only"), pastaWant(nil)},
		{"--userns after --netns-only", a("--netns-only --userns=/proc/1/ns/user"), pastaWant(func(o *pastaOptions) { o.UserNS, o.NetNSOnly = "/proc/1/ns/user", false })},
		{"--no-netns-quit", a("--no-netns-quit"), pastaWant(func(o *pastaOptions) { o.NoNetNSQuit = true })},
		{"--config-net", a("--config-net"), pastaWant(func(o *pastaOptions) { o.ConfigNet = true })},
		{"--no-copy-routes --no-copy-addrs", a("--config-net --no-copy-routes --no-copy-addrs"), pastaWant(func(o *pastaOptions) {
			o.ConfigNet, o.NoCopyRoutes, o.NoCopyAddrs = true, true, true
		})},
		{"clustered short options", a("-qfe4"), pastaWant(func(o *pastaOptions) { o.Quiet, o.Foreground, o.Stderr, o.IPv4Only = true, true, true, true })},
		{"clustered with an argument", a("-fm1500"), pastaWant(func(o *pastaOptions) { o.Foreground, o.MTU = true, 1500 })},
		{"PID", []string{"--config-net", "1234"}, pastaWant(func(o *pastaOptions) {
			o.ConfigNet, o.PID, o.NetNS, o.UserNS, o.NetNSOnly = true, 1234, "/proc/1234/ns/net", "/proc/1234/ns/user", false
		})},
		{"PID after --", []string{"--", "1234"}, pastaWant(func(o *pastaOptions) {
			o.PID, o.NetNS, o.UserNS, o.NetNSOnly = 1234, "/proc/1234/ns/net", "/proc/1234/ns/user", false
		})},
		{"PID with --userns", []string{"--userns", "/proc/1/ns/user", "1234"}, pastaWant(func(o *pastaOptions) {
			o.PID, o.NetNS, o.UserNS, o.NetNSOnly = 1234, "/proc/1234/ns/net", "/proc/1/ns/user", false
		})},
		{"PID with --netns-only", []string{"--netns-only", "1234"}, pastaWant(func(o *pastaOptions) {
			o.PID, o.NetNS, o.UserNS = 1234, "/proc/1234/ns/net", "/proc/1234/ns/user"
		})},
		{"command", []string{"--config-net", "sh", "-c", "ip addr"}, pastaWant(func(o *pastaOptions) {
			o.ConfigNet, o.NetNS, o.NetNSOnly, o.Command = true, "", false, []string{"sh", "-c", "ip addr"}
		})},
		{"command's options are its own", []string{"-f", "ping", "-c", "1", "-t", "9"}, pastaWant(func(o *pastaOptions) {
			o.Foreground, o.NetNS, o.NetNSOnly, o.Command = true, "", false, []string{"ping", "-c", "1", "-t", "9"}
		})},
		{"command after --", []string{"--", "-not-an-option"}, pastaWant(func(o *pastaOptions) {
			o.NetNS, o.NetNSOnly, o.Command = "", false, []string{"-not-an-option"}
		})},
		{"numbers are a command, not a PID", []string{"1234", "5"}, pastaWant(func(o *pastaOptions) {
			o.NetNS, o.NetNSOnly, o.Command = "", false, []string{"1234", "5"}
		})},
		{"no command: a shell", nil, pastaWant(func(o *pastaOptions) { o.NetNS, o.NetNSOnly = "", false })},
		{"-h", []string{"-h"}, pastaBare(func(o *pastaOptions) { o.Help = true })},
		{"--help ends the parse", []string{"-q", "--help", "--foo"}, pastaBare(func(o *pastaOptions) { o.Quiet, o.Help = true, true })},
		{"--version", []string{"--version"}, pastaBare(func(o *pastaOptions) { o.Version = true })},
		{"--vers prefix", []string{"--vers", "-h"}, pastaBare(func(o *pastaOptions) { o.Version = true })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkPasta(t, tc)
		})
	}
}

// checkPasta parses tc's command line, compares, and checks that the
// options' args parse back to them.
func checkPasta(t *testing.T, tc pastaCase) {
	t.Helper()
	got, err := parsePasta(append([]string{"pasta"}, tc.args...))
	require.NoError(t, err)
	require.Equal(t, tc.want, got)
	pastaRoundTrip.check(t, got)
}

// pastaRoundTrip checks that pastaOptions.args writes the options back.
var pastaRoundTrip = roundTrip[pastaOptions]{
	parse: parsePasta,
	args:  (*pastaOptions).args,
	stops: func(o *pastaOptions) bool { return o.Help || o.Version },
	clean: func(*pastaOptions) {},
}

// TestPastaCallers parses the command lines Podman and RootlessKit build
// (copied from their sources, cited per case).
func TestPastaCallers(t *testing.T) {
	const ns = "/run/user/1000/netns/netns-0c5e8b3e-8c8f-2d3b-4c1e-5b0c6a9f0e11"
	const pid = 4321
	none := portForwards{Mode: portsNone}
	// Podman's defaults: no forwarding but the container's ports, the
	// gateway not mapped to the host.
	podman := func(o *pastaOptions) {
		o.ConfigNet, o.NoMapGW, o.NetNS = true, true, ns
		o.TCPIn, o.UDPIn, o.TCPOut, o.UDPOut = none, none, none, none
	}
	podmanPorts := func(o *pastaOptions) {
		podman(o)
		o.TCPIn = portForwards{portsSpec, []portSpec{spec(portRange{8080, 8080, 80}), {Addr: ip("127.0.0.1"), Ranges: []portRange{{9000, 9002, 9000}}}}}
		o.UDPIn = portForwards{portsSpec, []portSpec{spec(portRange{5353, 5353, 53})}}
	}
	rootlesskit := func(o *pastaOptions) {
		o.Stderr, o.NSIfname, o.MTU = true, "tap0", 65520
		o.Addr4, o.PrefixLen4, o.Gateway4, o.DNSForward4 = ip("10.0.2.100"), 24, ip("10.0.2.2"), ip("10.0.2.3")
		o.TCPIn, o.UDPIn = none, none
		o.PID, o.NetNS, o.UserNS, o.NetNSOnly = pid, "/proc/4321/ns/net", "/proc/4321/ns/user", false
	}
	for _, tc := range []pastaCase{
		// Podman 4.4 and 4.5 libpod/networking_pasta_linux.go, 4.6 to 4.9
		// containers/common libnetwork/pasta: --config-net, the ports
		// ("%s%d-%d:%d-%d" with an optional HOSTIP/), the user's options
		// (--map-gw removed), none for each direction not given, the
		// namespace.
		{"podman 4.4", []string{"--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--netns", ns}, pastaWant(podman)},
		{"podman 4.4 ports", []string{"--config-net", "-t", "8080-8080:80-80", "-t", "127.0.0.1/9000-9002:9000-9002", "-u", "5353-5353:53-53", "-T", "none", "-U", "none", "--no-map-gw", "--netns", ns}, pastaWant(podmanPorts)},
		{"podman 4.x user options", []string{"--config-net", "-I", "tap0", "--ipv4-only", "-a", "10.0.2.0", "-n", "24", "-g", "10.0.2.2", "--dns-forward", "10.0.2.3", "-m", "1500", "-T", "5432", "-t", "none", "-u", "none", "-U", "none", "--netns", ns},
			pastaWant(func(o *pastaOptions) {
				podman(o)
				o.NoMapGW, o.NSIfname, o.IPv4Only, o.Addr4, o.PrefixLen4, o.Gateway4, o.DNSForward4, o.MTU = false, "tap0", true, ip("10.0.2.0"), 24, ip("10.0.2.2"), ip("10.0.2.3"), 1500
				o.TCPOut = portForwards{portsSpec, []portSpec{spec(one(5432))}}
			})},
		// Podman 5.0: --dns none without -D, --dns or --dns-forward, and
		// --quiet.
		{"podman 5.0", []string{"--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--dns", "none", "--quiet", "--netns", ns},
			pastaWant(func(o *pastaOptions) { podman(o); o.NoDNS, o.Quiet = true, true })},
		// Podman 5.1: --dns-forward 169.254.1.1 unless the user gave one.
		{"podman 5.1", []string{"--config-net", "--dns-forward", "169.254.1.1", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet", "--netns", ns},
			pastaWant(func(o *pastaOptions) { podman(o); o.DNSForward4, o.Quiet = ip("169.254.1.1"), true })},
		{"podman 5.2 ports", []string{"--config-net", "-t", "8080-8080:80-80", "-t", "127.0.0.1/9000-9002:9000-9002", "-u", "5353-5353:53-53", "--dns-forward", "169.254.1.1", "-T", "none", "-U", "none", "--no-map-gw", "--quiet", "--netns", ns},
			pastaWant(func(o *pastaOptions) { podmanPorts(o); o.DNSForward4, o.Quiet = ip("169.254.1.1"), true })},
		// Podman 5.3 and later: --map-guest-addr 169.254.1.2 last, so
		// that it can be dropped when pasta does not know it.
		{"podman 5.3", []string{"--config-net", "--dns-forward", "169.254.1.1", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet", "--netns", ns, "--map-guest-addr", "169.254.1.2"},
			pastaWant(func(o *pastaOptions) {
				podman(o)
				o.DNSForward4, o.Quiet, o.MapGuestAddr4 = ip("169.254.1.1"), true, ip("169.254.1.2")
			})},
		{"podman 5.3 debug, --map-gw", []string{"--config-net", "--trace", "--dns-forward", "169.254.1.1", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--netns", ns, "--map-guest-addr", "169.254.1.2"},
			pastaWant(func(o *pastaOptions) {
				podman(o)
				o.NoMapGW, o.Debug, o.Trace, o.DNSForward4, o.MapGuestAddr4 = false, true, true, ip("169.254.1.1"), ip("169.254.1.2")
			})},
		// Podman 5 rootless network namespace (containers/common
		// libnetwork/internal/rootlessnetns): --pid FILE.
		{"podman 5 rootless netns", []string{"--config-net", "--pid", "/run/user/1000/containers/networks/rootless-netns/rootless-netns-conn.pid", "--dns-forward", "169.254.1.1", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet", "--netns", ns, "--map-guest-addr", "169.254.1.2"},
			pastaWant(func(o *pastaOptions) {
				podman(o)
				o.PIDFile, o.DNSForward4, o.Quiet, o.MapGuestAddr4 = "/run/user/1000/containers/networks/rootless-netns/rootless-netns-conn.pid", ip("169.254.1.1"), true, ip("169.254.1.2")
			})},
		// RootlessKit 2.0 to 2.2 pkg/network/pasta: in the foreground,
		// without --config-net, DHCP or router advertisements.
		{"rootlesskit 2.0", []string{"--foreground", "--stderr", "--ns-ifname=tap0", "--mtu=65520", "--no-dhcp", "--no-ra", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--no-map-gw", "--ipv4-only", "--tcp-ports=none", "--udp-ports=none", "4321"},
			pastaWant(func(o *pastaOptions) {
				rootlesskit(o)
				o.Foreground, o.NoDHCP, o.NoRA, o.NoMapGW, o.IPv4Only = true, true, true, true, true
			})},
		{"rootlesskit 2.0 implicit ports, IPv6, detached netns", []string{"--foreground", "--stderr", "--ns-ifname=tap0", "--mtu=65520", "--no-dhcp", "--no-ra", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--tcp-ports=auto", "--udp-ports=auto", "--userns=/proc/4321/ns/user", "--netns=/run/user/1000/rootlesskit/netns"},
			pastaWant(func(o *pastaOptions) {
				rootlesskit(o)
				o.Foreground, o.NoDHCP, o.NoRA = true, true, true
				o.TCPIn.Mode, o.UDPIn.Mode = portsAuto, portsAuto
				o.PID, o.NetNS = -1, "/run/user/1000/rootlesskit/netns"
			})},
		// RootlessKit 2.3: --config-net, forking into the background.
		// From 2.3.2 it adds --host-lo-to-ns-lo when `pasta
		// --host-lo-to-ns-lo --version` succeeds, which ustack's does
		// not (TestPastaRefuses), so it is not in these lines.
		{"rootlesskit 2.3", []string{"--stderr", "--ns-ifname=tap0", "--mtu=65520", "--config-net", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--no-map-gw", "--ipv4-only", "--tcp-ports=none", "--udp-ports=none", "4321"},
			pastaWant(func(o *pastaOptions) {
				rootlesskit(o)
				o.ConfigNet, o.NoMapGW, o.IPv4Only = true, true, true
			})},
		{"rootlesskit 2.3 detached netns", []string{"--stderr", "--ns-ifname=tap0", "--mtu=65520", "--config-net", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--tcp-ports=auto", "--udp-ports=auto", "--userns=/proc/4321/ns/user", "--netns=/run/user/1000/rootlesskit/netns"},
			pastaWant(func(o *pastaOptions) {
				rootlesskit(o)
				o.ConfigNet = true
				o.TCPIn.Mode, o.UDPIn.Mode = portsAuto, portsAuto
				o.PID, o.NetNS = -1, "/run/user/1000/rootlesskit/netns"
			})},
		// RootlessKit's probe: `pasta --version`.
		{"rootlesskit probe", []string{"--version"}, pastaBare(func(o *pastaOptions) { o.Version = true })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkPasta(t, tc)
		})
	}
}

// pastaRefusalCases are the command lines pasta or ustack refuses;
// original marks those the installed pasta refuses alike. It is older
// (Debian 12's, 2023) than the pasta whose command line ustack takes:
// where its wording differs, or it lacks the option, original is off.
func pastaRefusalCases() []refusalCase {
	// The namespace does not exist, so the installed pasta stops there
	// should it take a command line it was expected to refuse.
	a := func(s string) []string { return append(strings.Fields(s), "--netns", "/nonexistent/ustack-test") }
	const ustackMTU = "ustack takes an MTU from 1280 (IPv6's minimum) to 65520 (the largest of its TUN and TAP devices)"
	return []refusalCase{
		{a("--foo"), "PROG: unrecognized option '--foo'", true, true},
		{a("--foo=bar"), "PROG: unrecognized option '--foo=bar'", true, true},
		{a("-x"), "PROG: invalid option -- 'x'", true, true},
		{a("-1"), "PROG: invalid option -- '1'", true, true},
		{a("-s /tmp/s"), "PROG: invalid option -- 's'", true, true},
		{[]string{"--netns"}, "PROG: option '--netns' requires an argument", true, true},
		{[]string{"-t"}, "PROG: option requires an argument -- 't'", true, true},
		{[]string{"-qt"}, "PROG: option requires an argument -- 't'", true, true},
		{a("--version=1"), "PROG: option '--version' doesn't allow an argument", true, true},
		{a("--no-tcp=1"), "PROG: option '--no-tcp' doesn't allow an argument", true, true},
		{a("--no"), "PROG: option '--no' is ambiguous; possibilities: '--no-tcp' '--no-udp' '--no-icmp' '--no-dhcp' '--no-dhcpv6' '--no-ndp' '--no-ra' '--no-splice' '--no-map-gw' '--no-dhcp-dns' '--no-dhcp-search' '--no-netns-quit' '--no-copy-routes' '--no-copy-addrs'", true, false},
		{a("--dhcp"), "PROG: option '--dhcp' is ambiguous; possibilities: '--dhcp-dns' '--dhcp-search'", true, true},
		{a("--outbound-if"), "PROG: option '--outbound-if' is ambiguous; possibilities: '--outbound-if4' '--outbound-if6'", true, true},
		// Newer than the installed pasta, so refused as it refuses them;
		// --host-lo-to-ns-lo as any pasta before 2024_10_30, which is
		// how RootlessKit finds out to leave it out.
		{a("--host-lo-to-ns-lo"), "PROG: unrecognized option '--host-lo-to-ns-lo'", true, true},
		{[]string{"--host-lo-to-ns-lo", "--version"}, "PROG: unrecognized option '--host-lo-to-ns-lo'", true, true},
		{a("--map-gw"), "PROG: unrecognized option '--map-gw'", true, true},
		{a("-m 70000"), "Invalid MTU: 70000", false, true},
		{a("-m 67"), "Invalid MTU: 67", false, true},
		{a("-m -1"), "Invalid MTU: -1", false, true},
		{a("-I 0123456789abcdef"), "Invalid interface name: 0123456789abcdef", false, true},
		{a("--outbound-if4="), "Invalid interface name: ", false, true},
		{a("--netn=/a"), "PROG: option '--netn=/a' is ambiguous; possibilities: '--netns' '--netns-only'", true, true},
		{a("--pcap="), "Invalid pcap path: ", false, true},
		{a("--pid="), "Invalid PID file: ", false, true},
		{a("--userns="), "Invalid userns: ", false, true},
		{a("-a foo"), "Invalid address: foo", false, true},
		{a("-a ::1"), "Invalid address: ::1", false, true},
		{a("-a ::ffff:192.0.2.1"), "Invalid address: ::ffff:192.0.2.1", false, true},
		{a("-a ::2"), "Invalid address: ::2", false, true},
		{a("-a 224.0.0.1"), "Invalid address: 224.0.0.1", false, true},
		{a("-a 255.255.255.255"), "Invalid address: 255.255.255.255", false, true},
		{a("-a fe80::1%eth0"), "Invalid address: fe80::1%eth0", false, true},
		{a("-n 33"), "Invalid netmask: 33", false, true},
		{a("-n 255.0.255.0"), "Invalid netmask: 255.0.255.0", false, true},
		{a("-g x"), "Invalid gateway address: x", false, true},
		{a("-g 127.0.0.1"), "Invalid gateway address: 127.0.0.1", false, true},
		{a("-o ::1"), "Invalid or redundant outbound address: ::1", false, true},
		{a("-o 0.0.0.0"), "Invalid or redundant outbound address: 0.0.0.0", false, true},
		{a("--dns-forward x"), "Invalid DNS forwarding address: x", false, true},
		{a("--dns-forward 127.0.0.1"), "Invalid DNS forwarding address: 127.0.0.1", false, true},
		{a("-D x"), "Cannot use DNS address x", false, true},
		{a("--search="), "Cannot use DNS search domain ", false, true},
		{a("-S a -S b -S c -S d -S e -S f -S g"), "Cannot use DNS search domain g", false, true},
		{a("--dns-host 0.0.0.0"), "Invalid host nameserver address: 0.0.0.0", false, false},
		{a("--map-host-loopback 127.0.0.1"), "Invalid address to remap to host: 127.0.0.1", false, false},
		{a("--map-guest-addr ff02::1"), "Invalid address to remap to host: ff02::1", false, false},
		{a("--one-off"), "--one-off is for passt mode only", false, true},
		{a("--no-dhcp-dns"), "--no-dhcp-dns is for passt mode only", false, true},
		{a("--no-dhcp-search"), "--no-dhcp-search is for passt mode only", false, true},
		{a("--vhost-user"), "--vhost-user is for passt mode only", false, false},
		{a("--no-copy-routes"), "--no-copy-routes needs --config-net", false, false},
		{a("--no-copy-addrs"), "--no-copy-addrs needs --config-net", false, false},
		{a("-t 99999"), "Invalid port specifier 99999", false, true},
		{a("-t 80-22"), "Invalid port specifier 80-22", false, true},
		{a("-t 80,"), "Invalid port specifier 80,", false, true},
		{a("-t ,80"), "Invalid port specifier ,80", false, true},
		{a("-t 80:81-82"), "Invalid port specifier 80:81-82", false, true},
		{a("-t 80x"), "Invalid port specifier 80x", false, true},
		{a("-t x/80"), "Invalid port specifier x/80", false, true},
		{a("-t /80"), "Invalid port specifier /80", false, true},
		{a("-t ~"), "Invalid port specifier ~", false, true},
		{a("-t ~80:81"), "Invalid port specifier ~80:81", false, true},
		{a("-t 192.0.2.1%0123456789abcdef/80"), "Invalid port specifier 192.0.2.1%0123456789abcdef/80", false, false},
		{a("-t all"), "'all' port forwarding is only allowed for passt", false, true},
		{a("-u all"), "'all' port forwarding is only allowed for passt", false, true},
		{a("-t none -t 80"), "Specific ports cannot be specified together with all/none/auto", false, true},
		{a("-t auto -t 80"), "Specific ports cannot be specified together with all/none/auto", false, true},
		{a("-t 80 -t none"), "Port forwarding mode 'none' conflicts with previous mode", false, true},
		{a("-u auto -u auto"), "Port forwarding mode 'auto' conflicts with previous mode", false, true},
		{a("-t none -t none"), "Port forwarding mode 'none' conflicts with previous mode", false, true},
		{a("-t 5-25,~10-20,~15"), "Overlapping excluded ranges 5-25,~10-20,~15", false, false},
		{a("--no-tcp -t 80"), "TCP port forwarding requested but TCP is disabled", false, false},
		{a("--no-udp -u auto"), "UDP port forwarding requested but UDP is disabled", false, false},
		{[]string{"--no-tcp", "-T", "80", "1"}, "TCP port forwarding requested but TCP is disabled", false, false},
		{[]string{"-T", "192.0.2.1/80", "1"}, "Invalid port specifier 192.0.2.1/80", false, false},
		{[]string{"-U", "none", "-U", "53", "1"}, "Specific ports cannot be specified together with all/none/auto", false, false},
		{[]string{"--netns", "/nonexistent/ustack-test", "1234"}, "Both --netns and PID or command given", false, true},
		{[]string{"--netns", "/nonexistent/ustack-test", "--", "true"}, "Both --netns and PID or command given", false, true},
		{[]string{"--", "-5"}, "Invalid PID -5", false, true},
		{[]string{"99999999999"}, "Invalid PID 99999999999", false, true},
		// The first refusal wins: -T is read after the positionals.
		{[]string{"-T", "99999", "--netns", "/nonexistent/ustack-test", "1"}, "Both --netns and PID or command given", false, true},
		// ustack's own refusals.
		{a("-m 1000"), "MTU 1000: " + ustackMTU, false, false},
		{a("--mtu=65535"), "MTU 65535: " + ustackMTU, false, false},
		{a("-l /tmp/pasta.log"), "--log-file: ustack logs to standard error only: drop the option and redirect standard error", false, false},
		{a("--log-size 1048576"), "--log-size: ustack logs to standard error only: drop the option", false, false},
		{a("--runas 1000"), "--runas: ustack does not change its user: start it as the user it should run as", false, false},
		{a("-F 3"), "--fd: ustack does not take a pre-opened tap descriptor: give a PID, --netns or a command", false, false},
		{a("-M 02:00:00:00:00:01"), "--mac-addr: ustack's side of the namespace's TAP device has a random locally administered MAC address: drop the option", false, false},
		{a("--ns-mac-addr 02:00:00:00:00"), "Invalid MAC address: 02:00:00:00:00", false, false},
		{a("--dhcp-dns"), "--dhcp-dns: ustack runs no DHCP, DHCPv6 or NDP server: configure the namespace's resolvers directly", false, false},
		{a("--dhcp-search"), "--dhcp-search: ustack runs no DHCP, DHCPv6 or NDP server: configure the namespace's search domains directly", false, false},
		{a("--socket /tmp/s"), "--socket: a passt option (its UNIX domain socket for a virtual machine), not pasta's", false, false},
		{a("--socket-path=/tmp/s"), "--socket: a passt option (its UNIX domain socket for a virtual machine), not pasta's", false, false},
		{a("--print-capabilities"), "--print-capabilities: a passt option (vhost-user back-end capabilities), not pasta's", false, false},
	}
}

func TestPastaRefuses(t *testing.T) {
	requireRefusals(t, pastaFrontEnd, pastaSettle, pastaRefusalCases())
}

// TestPastaRefusesAsTheOriginal runs the installed pasta on the command
// lines both refuse and compares how.
func TestPastaRefusesAsTheOriginal(t *testing.T) {
	requireOriginalRefusals(t, pastaFrontEnd, parsePasta, pastaRefusalCases())
}

// TestPastaHelp checks that the help names every option ustack takes.
func TestPastaHelp(t *testing.T) {
	stdout := requireSettledOK(t, pastaSettle, "/usr/bin/pasta", "-h")
	require.True(t, strings.HasPrefix(stdout, "Usage: /usr/bin/pasta [OPTION]... [COMMAND] [ARGS]...\n"), stdout)
	passt := map[int]bool{pastaOneOff: true, pastaNoDHCPDNS: true, pastaNoDHCPSearch: true, pastaVhostUser: true}
	for _, l := range pastaTable.long {
		_, refused := pastaRefusals[l.id]
		if refused || passt[l.id] {
			require.NotContains(t, stdout, "--"+l.name+" ", "the help names --%s, which ustack refuses", l.name)
			continue
		}
		require.Contains(t, stdout, "--"+l.name, "the help does not name --%s", l.name)
		if l.id < firstLongOnly {
			require.Contains(t, stdout, "-"+string(rune(l.id))+", --"+l.name, "the help does not name -%c", l.id)
		}
	}
}

func TestPastaVersion(t *testing.T) {
	stdout := requireSettledOK(t, pastaSettle, "pasta", "--version")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 2, stdout)
	require.Equal(t, "pasta "+pastaCompat+"+ustack", lines[0])
	require.True(t, strings.HasPrefix(lines[1], "ustack "), lines[1])
}

func TestPastaPortSpecString(t *testing.T) {
	for _, s := range []string{"22", "22:23", "22,25", "22-80", "22-80:32-90", "192.0.2.1/22", "2001:db8::1/22", "192.0.2.1%eth0/22", "%eth0/22", "2000-5000,~3000-3010", "~20000-20010", "0"} {
		p, ok := parsePortSpec(s, true)
		require.True(t, ok, s)
		require.False(t, p.overlap, s)
		require.Equal(t, s, p.String())
	}
}

// FuzzPasta checks that no command line makes the parser panic, and
// that what it accepts is written back by args into a command line that
// parses to the same options.
func FuzzPasta(f *testing.F) {
	pastaRoundTrip.fuzz(f,
		"-t 192.0.2.1%eth0/20-30,~25 -u ~53 -T 5432:5433 --netns x",
		"--userns /proc/1/ns/user --netns-only -D none -D 1.1.1.1 -S none -S a 1",
		"-m 0x5dc -n 255.255.0.0 -a 10.0.0.2 -a fd00::2 --map-host-loopback none --map-host-loopback fd00::3 -- sh -c true")
}

// FuzzPastaPortSpec checks that a port specification never makes the
// parser panic, and that one it accepts is written back by String into
// one that parses to the same specification.
func FuzzPastaPortSpec(f *testing.F) {
	for _, s := range []string{"22", "22-80:32-90", "192.0.2.1%eth0/20-30,~25", "[::1]/8080", "%lo/1-65535", "~0", "5-25,~10-20,~15", " +80- 90"} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, withAddr bool) {
		p, ok := parsePortSpec(s, withAddr)
		if !ok || p.overlap {
			return
		}
		again, ok := parsePortSpec(p.String(), withAddr)
		require.True(t, ok, "%q written as %q", s, p.String())
		require.Equal(t, p, again, "%q written as %q", s, p.String())
	})
}

// TestPastaMapping maps the callers' command lines (as in
// TestPastaCallers) onto the run, on a host whose first default routes
// go through eth0, 192.0.2.50/24 by 192.0.2.1 and 2001:db8::50/64 by
// fe80::1.
func TestPastaMapping(t *testing.T) {
	const ns = "/run/user/1000/netns/netns-0c5e8b3e"
	const pidFile = "/run/user/1000/containers/networks/rootless-netns/rootless-netns-conn.pid"
	p := netip.MustParsePrefix
	host := func(ifname string) (v4, v6 *hostIface, err error) {
		if ifname != "" && ifname != "eth0" {
			return nil, nil, errors.New("Link not found")
		}
		return &hostIface{"eth0", p("192.0.2.50/24"), ip("192.0.2.1")}, &hostIface{"eth0", p("2001:db8::50/64"), ip("fe80::1")}, nil
	}
	ephemeral := portRange{32768, 60999, 32768}
	// podman is Podman's line on that host: the host's addressing
	// copied, no DNS address, the gateway not the host's loopback,
	// serving in the background until the namespace file goes.
	podman := func(mod func(r *sandboxRun)) sandboxRun {
		r := sandboxRun{
			name: "pasta", confine: true, confineOff: "pasta's isolation cannot be turned off", procs: 1, sysmonTick: true,
			readyFD: -1, exitFD: -1, detach: true, quitNetNS: ns,
			cfg: sandbox.Config{
				NetNS: ns, TAP: true, Device: "eth0", MTU: 65520, NoRA: true, AllowHostLoopback: true,
				Addr4: p("192.0.2.50/24"), Gateway4: ip("192.0.2.1"), Addr6: p("2001:db8::50/64"), Gateway6: ip("fe80::1"),
				DNS4: netip.IPv4Unspecified(), DNS6: netip.IPv6Unspecified(),
				HostLoopback4: netip.IPv4Unspecified(), HostLoopback6: netip.IPv6Unspecified(),
			},
		}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	// rootlesskit is RootlessKit 2's: 10.0.2.0/24 with .100, .2 and .3,
	// tap0, the child's namespaces, IPv4 only.
	rootlesskit := func(mod func(r *sandboxRun)) sandboxRun {
		r := podman(nil)
		r.cfg.NetNS, r.cfg.UserNS, r.quitNetNS, r.quitPID = "/proc/4321/ns/net", "/proc/4321/ns/user", "/proc/4321/ns/net", 4321
		r.cfg.Device, r.cfg.NoIPv6, r.cfg.Addr6, r.cfg.Gateway6 = "tap0", true, netip.Prefix{}, netip.Addr{}
		r.cfg.Addr4, r.cfg.Gateway4, r.cfg.DNS4 = p("10.0.2.100/24"), ip("10.0.2.2"), ip("10.0.2.3")
		mod(&r)
		return r
	}
	for _, tc := range []struct {
		name  string
		args  []string
		want  sandboxRun
		notes int
	}{
		{"podman 4.4", []string{"--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--netns", ns}, podman(nil), 0},
		{"podman 4.4 ports", []string{"--config-net", "-t", "8080-8080:80-80", "-t", "127.0.0.1/9000-9002:9000-9002", "-u", "5353-5353:53-53", "-T", "none", "-U", "none", "--no-map-gw", "--netns", ns},
			podman(func(r *sandboxRun) {
				r.cfg.PortForwards = []sandbox.PortForward{
					{Host: netip.MustParseAddrPort("0.0.0.0:8080"), Port: 80},
					{Host: netip.MustParseAddrPort("127.0.0.1:9000"), Port: 9000},
					{Host: netip.MustParseAddrPort("127.0.0.1:9001"), Port: 9001},
					{Host: netip.MustParseAddrPort("127.0.0.1:9002"), Port: 9002},
					{UDP: true, Host: netip.MustParseAddrPort("0.0.0.0:5353"), Port: 53},
				}
			}), 0},
		{"podman 5.0", []string{"--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--dns", "none", "--quiet", "--netns", ns},
			podman(func(r *sandboxRun) { r.quiet = true }), 0},
		{"podman 5.3", []string{"--config-net", "--dns-forward", "169.254.1.1", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet", "--netns", ns, "--map-guest-addr", "169.254.1.2"},
			podman(func(r *sandboxRun) {
				r.quiet, r.cfg.DNS4, r.cfg.MapGuestAddr4 = true, ip("169.254.1.1"), ip("169.254.1.2")
			}), 0},
		{"podman 5.3, --map-gw: the gateway leads to the host's loopback", []string{"--config-net", "--trace", "--dns-forward", "169.254.1.1", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--netns", ns, "--map-guest-addr", "169.254.1.2"},
			podman(func(r *sandboxRun) {
				r.cfg.DNS4, r.cfg.MapGuestAddr4 = ip("169.254.1.1"), ip("169.254.1.2")
				r.cfg.HostLoopback4, r.cfg.HostLoopback6 = netip.Addr{}, netip.Addr{}
			}), 0},
		{"podman 5 rootless netns", []string{"--config-net", "--pid", pidFile, "--dns-forward", "169.254.1.1", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-map-gw", "--quiet", "--netns", ns, "--map-guest-addr", "169.254.1.2"},
			podman(func(r *sandboxRun) {
				r.quiet, r.pidFile, r.cfg.DNS4, r.cfg.MapGuestAddr4 = true, pidFile, ip("169.254.1.1"), ip("169.254.1.2")
			}), 0},
		{"podman, user options: IPv4 only, -I, -m, -n", []string{"--config-net", "-I", "tap0", "--ipv4-only", "-a", "10.0.2.15", "-n", "24", "-g", "10.0.2.2", "--dns-forward", "10.0.2.3", "-m", "1500", "-T", "none", "-t", "none", "-u", "none", "-U", "none", "--netns", ns},
			podman(func(r *sandboxRun) {
				r.cfg.Device, r.cfg.MTU, r.cfg.NoIPv6, r.cfg.Addr6, r.cfg.Gateway6 = "tap0", 1500, true, netip.Prefix{}, netip.Addr{}
				r.cfg.Addr4, r.cfg.Gateway4, r.cfg.DNS4 = p("10.0.2.15/24"), ip("10.0.2.2"), ip("10.0.2.3")
				r.cfg.HostLoopback4, r.cfg.HostLoopback6 = netip.Addr{}, netip.Addr{}
			}), 0},
		{"rootlesskit 2.0: in the foreground, on its tap0, left unconfigured", []string{"--foreground", "--stderr", "--ns-ifname=tap0", "--mtu=65520", "--no-dhcp", "--no-ra", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--no-map-gw", "--ipv4-only", "--tcp-ports=none", "--udp-ports=none", "4321"},
			rootlesskit(func(r *sandboxRun) { r.detach, r.cfg.NoConfigure = false, true }), 1},
		{"rootlesskit 2.3", []string{"--stderr", "--ns-ifname=tap0", "--mtu=65520", "--config-net", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--no-map-gw", "--ipv4-only", "--tcp-ports=none", "--udp-ports=none", "4321"},
			rootlesskit(func(r *sandboxRun) {}), 1},
		{"rootlesskit 2.3, IPv6 and the host's loopback, detached netns", []string{"--stderr", "--ns-ifname=tap0", "--mtu=65520", "--config-net", "--address=10.0.2.100", "--netmask=24", "--gateway=10.0.2.2", "--dns-forward=10.0.2.3", "--tcp-ports=none", "--udp-ports=none", "--userns=/proc/4321/ns/user", "--netns=/run/user/1000/rootlesskit/netns"},
			rootlesskit(func(r *sandboxRun) {
				r.cfg.NetNS, r.quitNetNS, r.quitPID = "/run/user/1000/rootlesskit/netns", "/run/user/1000/rootlesskit/netns", 0
				r.cfg.NoIPv6, r.cfg.Addr6, r.cfg.Gateway6 = false, p("2001:db8::50/64"), ip("fe80::1")
				r.cfg.HostLoopback4, r.cfg.HostLoopback6 = netip.Addr{}, netip.Addr{}
			}), 1},
		{"a command, a pcap, -i, the prefix widened to the gateway", []string{"--config-net", "-i", "eth0", "-a", "192.0.2.200", "-n", "26", "-p", "/tmp/x.pcap", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--no-netns-quit", "--", "sh", "-c", "true"},
			podman(func(r *sandboxRun) {
				r.detach, r.quitNetNS, r.pcap, r.args = false, "", "/tmp/x.pcap", []string{"sh", "-c", "true"}
				r.cfg.NetNS, r.cfg.Addr4 = "", p("192.0.2.200/24")
				r.cfg.HostLoopback4, r.cfg.HostLoopback6 = netip.Addr{}, netip.Addr{}
			}), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parsePasta(append([]string{"pasta"}, tc.args...))
			require.NoError(t, err)
			got, notes, err := o.sandboxRun("pasta", host, ephemeral)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Len(t, notes, tc.notes, "%q", notes)
		})
	}
	noHost := func(string) (v4, v6 *hostIface, err error) { return nil, nil, nil }
	for _, tc := range []struct {
		args []string
		host func(string) (v4, v6 *hostIface, err error)
		msg  string
	}{
		{[]string{"--tcp-ports=auto", "--udp-ports=auto", "4321"}, host, "-t auto: ustack does not follow the ports bound on the far side: list them (-t PORTS, -u PORTS)"},
		{[]string{"-T", "5432", "--netns", ns}, host, "-T 5432: ustack forwards no ports from the namespace to the host"},
		{[]string{"-t", "%eth0/80", "--netns", ns}, host, "-t %eth0/80: ustack binds forwarded ports to addresses, not interfaces"},
		{[]string{"-t", "~22", "--netns", ns}, host, "-t ~22: more than 4096 ports forwarded"},
		{[]string{"-t", "0", "--netns", ns}, host, "-t 0: port 0: ustack forwards ports from 1 up"},
		{[]string{"-6", "--netns", ns}, host, "-6/--ipv6-only: ustack's namespace always has IPv4"},
		{[]string{"--no-udp", "--netns", ns}, host, "--no-tcp, --no-udp, --no-icmp"},
		{[]string{"-D", "192.0.2.53", "--netns", ns}, host, "-D/--dns ADDR: ustack announces no name servers"},
		{[]string{"--netns", ns}, noHost, "External interface not usable"},
		{[]string{"-a", "2001:db8::9", "-g", "2001:db8::1", "--netns", ns}, noHost, "ustack's namespace always has IPv4: give -a and -g"},
		{[]string{"-i", "eth9", "--netns", ns}, host, "-i eth9: Link not found"},
	} {
		o, err := parsePasta(append([]string{"pasta"}, tc.args...))
		require.NoError(t, err, "%q", tc.args)
		_, _, err = o.sandboxRun("pasta", tc.host, ephemeral)
		require.ErrorContains(t, err, tc.msg, "%q", tc.args)
	}
}

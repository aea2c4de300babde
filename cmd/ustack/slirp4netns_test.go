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

// slirpWant is the parse of `slirp4netns 1234` changed by mod.
func slirpWant(mod func(o *slirpOptions)) slirpOptions {
	o := slirpOptions{PID: 1234, TapName: "tap0", ExitFD: -1, ReadyFD: -1, MTU: 1500, CIDR: netip.MustParsePrefix("10.0.2.0/24")}
	if mod != nil {
		mod(&o)
	}
	return o
}

// slirpCase is a command line (without the program name) and its parse.
type slirpCase struct {
	name string
	args []string
	want slirpOptions
}

func TestSlirp4netnsAcceptsEveryOptionInEveryForm(t *testing.T) {
	ns := existingFile(t, "netns")
	userns := existingFile(t, "userns")
	a := func(s string) []string { return strings.Fields(s) }
	for _, tc := range []slirpCase{
		{"PID only: TAPNAME tap0", a("1234"), slirpWant(nil)},
		{"PID and TAPNAME", a("1234 eth7"), slirpWant(func(o *slirpOptions) { o.TapName = "eth7" })},
		{"-c", a("-c 1234 tap0"), slirpWant(func(o *slirpOptions) { o.Configure = true })},
		{"--configure", a("--configure 1234 tap0"), slirpWant(func(o *slirpOptions) { o.Configure = true })},
		{"--conf prefix", a("--conf 1234 tap0"), slirpWant(func(o *slirpOptions) { o.Configure = true })},
		{"-e FD", a("-e 3 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ExitFD = 3 })},
		{"-eFD", a("-e3 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ExitFD = 3 })},
		{"--exit-fd FD", a("--exit-fd 3 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ExitFD = 3 })},
		{"--exit-fd=FD", a("--exit-fd=0 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ExitFD = 0 })},
		{"-r FD", a("-r 4 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ReadyFD = 4 })},
		{"-rFD", a("-r4 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ReadyFD = 4 })},
		{"--ready-fd FD", a("--ready-fd 4 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ReadyFD = 4 })},
		{"--ready-fd=FD", a("--ready-fd=+4 1234 tap0"), slirpWant(func(o *slirpOptions) { o.ReadyFD = 4 })},
		{"-m MTU", a("-m 9000 1234 tap0"), slirpWant(func(o *slirpOptions) { o.MTU = 9000 })},
		{"-mMTU", a("-m9000 1234 tap0"), slirpWant(func(o *slirpOptions) { o.MTU = 9000 })},
		{"--mtu MTU", a("--mtu 65520 1234 tap0"), slirpWant(func(o *slirpOptions) { o.MTU = 65520 })},
		{"--mtu=MTU", a("--mtu=1280 1234 tap0"), slirpWant(func(o *slirpOptions) { o.MTU = 1280 })},
		{"--mt= prefix", a("--mt=1500 1234 tap0"), slirpWant(nil)},
		{"-6", a("-6 1234 tap0"), slirpWant(func(o *slirpOptions) { o.IPv6 = true })},
		{"--enable-ipv6", a("--enable-ipv6 1234 tap0"), slirpWant(func(o *slirpOptions) { o.IPv6 = true })},
		{"-a PATH", a("-a /tmp/api.sock 1234 tap0"), slirpWant(func(o *slirpOptions) { o.APISocket = "/tmp/api.sock" })},
		{"-aPATH", a("-a/tmp/api.sock 1234 tap0"), slirpWant(func(o *slirpOptions) { o.APISocket = "/tmp/api.sock" })},
		{"--api-socket PATH", a("--api-socket /tmp/api.sock 1234 tap0"), slirpWant(func(o *slirpOptions) { o.APISocket = "/tmp/api.sock" })},
		{"--api-socket=PATH", a("--api-socket=/tmp/api.sock 1234 tap0"), slirpWant(func(o *slirpOptions) { o.APISocket = "/tmp/api.sock" })},
		{"--cidr CIDR", a("--cidr 10.0.3.0/24 1234 tap0"), slirpWant(func(o *slirpOptions) { o.CIDR = netip.MustParsePrefix("10.0.3.0/24") })},
		{"--cidr=CIDR", a("--cidr=192.168.128.0/17 1234 tap0"), slirpWant(func(o *slirpOptions) { o.CIDR = netip.MustParsePrefix("192.168.128.0/17") })},
		{"--cidr /25", a("--cidr=10.0.2.128/25 1234 tap0"), slirpWant(func(o *slirpOptions) { o.CIDR = netip.MustParsePrefix("10.0.2.128/25") })},
		{"--disable-host-loopback", a("--disable-host-loopback 1234 tap0"), slirpWant(func(o *slirpOptions) { o.DisableHostLoopback = true })},
		{"--no-host-loopback, deprecated", a("--no-host-loopback 1234 tap0"), slirpWant(func(o *slirpOptions) {
			o.DisableHostLoopback = true
			o.Warnings = []string{"WARNING: --no-host-loopback is a deprecated name of --disable-host-loopback"}
		})},
		{"--netns-type=path", []string{"--netns-type=path", ns, "tap0"}, slirpWant(func(o *slirpOptions) { o.PID, o.NetNSPath = 0, ns })},
		{"--netns-type path", []string{"--netns-type", "path", ns, "tap0"}, slirpWant(func(o *slirpOptions) { o.PID, o.NetNSPath = 0, ns })},
		{"--netns-type of 1.2's other types is path", []string{"--netns-type=file", ns}, slirpWant(func(o *slirpOptions) { o.PID, o.NetNSPath = 0, ns })},
		{"--netns-type=pid", a("--netns-type=pid 1234 tap0"), slirpWant(nil)},
		{"--userns-path=PATH", []string{"--userns-path=" + userns, "1234", "tap0"}, slirpWant(func(o *slirpOptions) { o.UserNSPath = userns })},
		{"--userns-path PATH", []string{"--userns-path", userns, "1234", "tap0"}, slirpWant(func(o *slirpOptions) { o.UserNSPath = userns })},
		{"--enable-sandbox", a("--enable-sandbox 1234 tap0"), slirpWant(func(o *slirpOptions) { o.EnableSandbox = true })},
		{"--create-sandbox, deprecated", a("--create-sandbox 1234 tap0"), slirpWant(func(o *slirpOptions) {
			o.EnableSandbox = true
			o.Warnings = []string{"WARNING: --create-sandbox is a deprecated name of --enable-sandbox"}
		})},
		{"--enable-seccomp", a("--enable-seccomp 1234 tap0"), slirpWant(func(o *slirpOptions) { o.EnableSeccomp = true })},
		{"--outbound-addr=IPv4", a("--outbound-addr=192.0.2.7 1234 tap0"), slirpWant(func(o *slirpOptions) { o.OutboundAddr = netip.MustParseAddr("192.0.2.7") })},
		{"--outbound-addr INTERFACE", a("--outbound-addr eth0 1234 tap0"), slirpWant(func(o *slirpOptions) { o.OutboundIf = "eth0" })},
		{"--outbound-addr6=IPv6", a("--outbound-addr6=2001:db8::7 1234 tap0"), slirpWant(func(o *slirpOptions) { o.OutboundAddr6 = netip.MustParseAddr("2001:db8::7") })},
		{"--outbound-addr6 INTERFACE", a("--outbound-addr6 eth0 1234 tap0"), slirpWant(func(o *slirpOptions) { o.OutboundIf6 = "eth0" })},
		{"--disable-dns", a("--disable-dns 1234 tap0"), slirpWant(func(o *slirpOptions) { o.DisableDNS = true })},
		{"--macaddress=MAC", a("-c --macaddress=02:00:5e:10:00:01 1234 tap0"), slirpWant(func(o *slirpOptions) {
			o.Configure, o.MAC = true, net.HardwareAddr{2, 0, 0x5e, 0x10, 0, 1}
		})},
		{"--macaddress short, zero filled", a("-c --macaddress 0x2:a 1234 tap0"), slirpWant(func(o *slirpOptions) {
			o.Configure, o.MAC = true, net.HardwareAddr{2, 0xa, 0, 0, 0, 0}
		})},
		{"--target-type=netns", a("--target-type=netns 1234 tap0"), slirpWant(nil)},
		{"-c6 cluster", a("-c6 1234 tap0"), slirpWant(func(o *slirpOptions) { o.Configure, o.IPv6 = true, true })},
		{"-c6m9000 cluster", a("-c6m9000 1234 tap0"), slirpWant(func(o *slirpOptions) { o.Configure, o.IPv6, o.MTU = true, true, 9000 })},
		{"-ce 3 cluster", a("-ce 3 1234 tap0"), slirpWant(func(o *slirpOptions) { o.Configure, o.ExitFD = true, 3 })},
		{"options after positionals", a("1234 tap1 -c --mtu=9000 -r 5"), slirpWant(func(o *slirpOptions) { o.Configure, o.MTU, o.ReadyFD, o.TapName = true, 9000, 5, "tap1" })},
		{"options between positionals", a("1234 -c tap1"), slirpWant(func(o *slirpOptions) { o.Configure, o.TapName = true, "tap1" })},
		{"-- ends options", a("-c -- 1234 -x"), slirpWant(func(o *slirpOptions) { o.Configure, o.TapName = true, "-x" })},
		{"too many arguments", a("1234 tap0 more"), slirpWant(func(o *slirpOptions) { o.Warnings = []string{"WARNING: too many arguments"} })},
		{"later option wins", a("-m 9000 -m 1500 --cidr=10.1.0.0/16 --cidr=10.0.2.0/24 1234 tap0"), slirpWant(nil)},
		{"-h", a("-h"), slirpOptions{Help: true, ExitFD: -1, ReadyFD: -1, MTU: 1500, CIDR: slirpDefaultCIDR, TapName: "tap0"}},
		{"--help ends the parse", a("-c --help --foo"), slirpOptions{Help: true, Configure: true, ExitFD: -1, ReadyFD: -1, MTU: 1500, CIDR: slirpDefaultCIDR, TapName: "tap0"}},
		{"--he prefix", a("--he"), slirpOptions{Help: true, ExitFD: -1, ReadyFD: -1, MTU: 1500, CIDR: slirpDefaultCIDR, TapName: "tap0"}},
		{"-v", a("-v"), slirpOptions{Version: true, ExitFD: -1, ReadyFD: -1, MTU: 1500, CIDR: slirpDefaultCIDR, TapName: "tap0"}},
		{"--version before -h", a("--version -h"), slirpOptions{Version: true, ExitFD: -1, ReadyFD: -1, MTU: 1500, CIDR: slirpDefaultCIDR, TapName: "tap0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSlirp4netns(append([]string{"slirp4netns"}, tc.args...))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			slirpRoundTrip.check(t, got)
		})
	}
}

func TestSlirp4netnsDerivedAddresses(t *testing.T) {
	o := slirpWant(nil)
	require.Equal(t, netip.MustParseAddr("10.0.2.2"), o.Gateway4())
	require.Equal(t, netip.MustParseAddr("10.0.2.3"), o.DNS4())
	require.Equal(t, netip.MustParsePrefix("10.0.2.100/24"), o.Guest4())
	require.Equal(t, "/proc/1234/ns/net", o.NetNS())
	require.Equal(t, "/proc/1234/ns/user", o.UserNS())
	o = slirpWant(func(o *slirpOptions) {
		o.CIDR = netip.MustParsePrefix("192.168.128.0/25")
		o.PID, o.NetNSPath = 0, "/run/netns/x"
	})
	require.Equal(t, netip.MustParseAddr("192.168.128.2"), o.Gateway4())
	require.Equal(t, netip.MustParseAddr("192.168.128.3"), o.DNS4())
	require.Equal(t, netip.MustParsePrefix("192.168.128.100/25"), o.Guest4())
	require.Equal(t, "/run/netns/x", o.NetNS())
	require.Empty(t, o.UserNS())
}

// TestSlirp4netnsCallers parses the command lines Podman and RootlessKit
// build (copied from their sources, cited per case).
func TestSlirp4netnsCallers(t *testing.T) {
	ns := existingFile(t, "netns")
	userns := existingFile(t, "user")
	const api = "/run/user/1000/libpod/tmp/abc.net"
	podman := func(o *slirpOptions) {
		o.DisableHostLoopback, o.MTU, o.EnableSandbox, o.EnableSeccomp, o.IPv6, o.Configure = true, 65520, true, true, true, true
		o.PID, o.NetNSPath = 0, ns
	}
	for _, tc := range []slirpCase{
		// Podman 4.3.1 libpod/networking_slirp4netns.go setupSlirp4netns:
		// createBasicSlirp4netnsCmdArgs, then -c -e 3 -r 4, the API
		// socket with ports and port_handler=slirp4netns, the namespace.
		{"podman 4.3.1 container", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-e", "3", "-r", "4", "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) { podman(o); o.ExitFD, o.ReadyFD = 3, 4 })},
		{"podman 4.3.1 container, API socket, options", []string{"--disable-host-loopback", "--mtu=1500", "--enable-sandbox", "--enable-seccomp", "--cidr=10.0.3.0/24", "--enable-ipv6", "--outbound-addr=192.0.2.1", "--outbound-addr6=2001:db8::1", "-c", "-e", "3", "-r", "4", "--api-socket", api, "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) {
				podman(o)
				o.ExitFD, o.ReadyFD, o.MTU, o.APISocket = 3, 4, 1500, api
				o.CIDR = netip.MustParsePrefix("10.0.3.0/24")
				o.OutboundAddr, o.OutboundAddr6 = netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
			})},
		{"podman 4.3.1 container, allow_host_loopback, enable_ipv6=false, no pivot root", []string{"--mtu=65520", "--enable-seccomp", "-c", "-e", "3", "-r", "4", "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) {
				podman(o)
				o.ExitFD, o.ReadyFD, o.DisableHostLoopback, o.IPv6, o.EnableSandbox = 3, 4, false, false, false
			})},
		{"podman 4.3.1 container configured after start (PID)", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-e", "3", "-r", "4", "4321", "tap0"},
			slirpWant(func(o *slirpOptions) { podman(o); o.ExitFD, o.ReadyFD, o.PID, o.NetNSPath = 3, 4, 4321, "" })},
		// Podman 4.3.1 libpod/networking_linux.go, the rootless network
		// namespace: no exit descriptor.
		{"podman 4.3.1 rootless netns", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-r", "3", "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) { podman(o); o.ReadyFD = 3 })},
		// Podman 5 (containers/common libnetwork/slirp4netns Setup):
		// -c -r 3, -e 4 with an exit pipe, the API socket, the namespace.
		{"podman 5 container", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-r", "3", "-e", "4", "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) { podman(o); o.ReadyFD, o.ExitFD = 3, 4 })},
		{"podman 5 container, API socket", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-r", "3", "-e", "4", "--api-socket", api, "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) { podman(o); o.ReadyFD, o.ExitFD, o.APISocket = 3, 4, api })},
		{"podman 5 rootless netns", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-r", "3", "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) { podman(o); o.ReadyFD = 3 })},
		// RootlessKit 1.1 pkg/network/slirp4netns ConfigureNetwork: the
		// child process's PID and the TAP device RootlessKit made.
		{"rootlesskit 1.1", []string{"--mtu", "65520", "-r", "3", "--disable-host-loopback", "--cidr", "10.0.2.0/24", "--api-socket", "/run/user/1000/rootlesskit/slirp4netns.sock", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "4321", "tap0"},
			slirpWant(func(o *slirpOptions) {
				o.MTU, o.ReadyFD, o.DisableHostLoopback, o.APISocket = 65520, 3, true, "/run/user/1000/rootlesskit/slirp4netns.sock"
				o.EnableSandbox, o.EnableSeccomp, o.IPv6, o.PID = true, true, true, 4321
			})},
		{"rootlesskit 1.1, least", []string{"--mtu", "65520", "-r", "3", "4321", "tap0"},
			slirpWant(func(o *slirpOptions) { o.MTU, o.ReadyFD, o.PID = 65520, 3, 4321 })},
		// RootlessKit 2 with --detach-netns: the user namespace of the
		// child and the detached network namespace's path.
		{"rootlesskit 2 detach-netns", []string{"--mtu", "65520", "-r", "3", "--disable-host-loopback", "--cidr", "10.0.2.0/24", "--enable-seccomp", "--enable-ipv6", "--userns-path=" + userns, "--netns-type=path", ns, "tap0"},
			slirpWant(func(o *slirpOptions) {
				o.MTU, o.ReadyFD, o.DisableHostLoopback, o.EnableSeccomp, o.IPv6 = 65520, 3, true, true, true
				o.UserNSPath, o.PID, o.NetNSPath = userns, 0, ns
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSlirp4netns(append([]string{"/usr/bin/slirp4netns"}, tc.args...))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// slirpRoundTrip checks that slirpOptions.args writes the options back.
var slirpRoundTrip = roundTrip[slirpOptions]{
	parse: parseSlirp4netns,
	args:  (*slirpOptions).args,
	stops: func(o *slirpOptions) bool { return o.Help || o.Version },
	clean: func(o *slirpOptions) { o.Warnings = nil },
}

// slirpRefusals are the command lines slirp4netns or ustack refuses;
// original marks those the installed slirp4netns 1.2 refuses alike.
func slirpRefusals(t *testing.T) []refusalCase {
	ns := existingFile(t, "netns")
	// No such process: pid_max is at most 2^22.
	const pid = "2147483647"
	a := func(s string) []string { return strings.Fields(s) }
	return []refusalCase{
		{a("--foo " + pid + " tap0"), "PROG: unrecognized option '--foo'", true, true},
		{a("--foo=bar"), "PROG: unrecognized option '--foo=bar'", true, true},
		{a("-x " + pid + " tap0"), "PROG: invalid option -- 'x'", true, true},
		{a("-c -? " + pid), "PROG: invalid option -- '?'", true, true},
		{a("-m"), "PROG: option requires an argument -- 'm'", true, true},
		{a("-cm"), "PROG: option requires an argument -- 'm'", true, true},
		{a("--mtu"), "PROG: option '--mtu' requires an argument", true, true},
		{a("--mt"), "PROG: option '--mtu' requires an argument", true, true},
		{a(pid + " tap0 --api-socket"), "PROG: option '--api-socket' requires an argument", true, true},
		{a("--hel=x"), "PROG: option '--help' doesn't allow an argument", true, true},
		{a("--enable-ipv6=1 " + pid), "PROG: option '--enable-ipv6' doesn't allow an argument", true, true},
		{a("--dis " + pid), "PROG: option '--dis' is ambiguous; possibilities: '--disable-host-loopback' '--disable-dns'", true, true},
		{a("--enable " + pid), "PROG: option '--enable' is ambiguous; possibilities: '--enable-ipv6' '--enable-sandbox' '--enable-seccomp'", true, true},
		{a("--outbound " + pid), "PROG: option '--outbound' is ambiguous; possibilities: '--outbound-addr' '--outbound-addr6'", true, true},
		{a("---x"), "PROG: unrecognized option '---x'", true, true},
		{a("--foo -h"), "PROG: unrecognized option '--foo'", true, true},
		{a("--mtu=abc 1"), "MTU must be a positive integer (< 65522)", true, true},
		{a("-m 0 " + pid + " tap0"), "MTU must be a positive integer (< 65522)", true, true},
		{a("-m -1 " + pid + " tap0"), "MTU must be a positive integer (< 65522)", true, true},
		{a("-m 65522 " + pid + " tap0"), "MTU must be a positive integer (< 65522)", true, true},
		{a("-m 1500x " + pid + " tap0"), "MTU must be a positive integer (< 65522)", true, true},
		{a("-e -1 " + pid + " tap0"), "exit-fd must be a non-negative integer", true, true},
		{a("-e x " + pid + " tap0"), "exit-fd must be a non-negative integer", true, true},
		{a("-r 3.0 " + pid + " tap0"), "ready-fd must be a non-negative integer", true, true},
		{a("--userns-path=/nonexistent/user " + pid + " tap0"), "userns path doesn't exist: /nonexistent/user", true, true},
		{a("--netns-type=path /nonexistent/net tap0"), "existing path expected when --netns-type=path: No such file or directory", true, true},
		{a("--macaddress=02:00:00:00:00:01 " + pid + " tap0"), "--macaddr cannot be specified when --configure or -c is not specified", true, true},
		{a("--target-type=foo " + pid + " tap0"), `--target-type must be either "netns" or "bess"`, true, true},
		{a(""), "", true, true},
		{a("-c"), "", true, true},
		{a("abc tap0"), "PID must be a positive integer", true, true},
		{a("0 tap0"), "PID must be a positive integer", true, true},
		{a("-- -5 tap0"), "PID must be a positive integer", true, true},
		{a("12x tap0"), "PID must be a positive integer", true, true},
		{a("--cidr=10.0.2.0 " + pid + " tap0"), "invalid CIDR: 10.0.2.0", false, true},
		{a("--cidr=10.0.2.0/024 " + pid + " tap0"), "invalid CIDR: 10.0.2.0/024", false, true},
		{a("--cidr=fd00::/64 " + pid + " tap0"), "invalid CIDR: fd00::/64", false, true},
		{a("--cidr=10.0.256.0/24 " + pid + " tap0"), "invalid network address: 10.0.256.0", false, true},
		{a("--cidr=10.0.2.0/26 " + pid + " tap0"), "prefix length needs to be 1-25", false, true},
		{a("--cidr=10.0.2.0/0 " + pid + " tap0"), "prefix length needs to be 1-25", false, true},
		{a("--cidr=10.0.2.100/24 " + pid + " tap0"), "CIDR needs to be a network address like 10.0.2.0/24, not like 10.0.2.100/24", false, true},
		{a("-c --macaddress=02:00:00:00:00:01:02 " + pid + " tap0"), `"02:00:00:00:00:01:02" is an invalid MAC address.  Is it too long?`, false, true},
		{a("-c --macaddress=02:zz:00:00:00:01 " + pid + " tap0"), `"02:zz:00:00:00:01" is an invalid MAC address.`, false, true},
		{a("-c --macaddress=02:100:00:00:00:01 " + pid + " tap0"), `"02:100:00:00:00:01" is an invalid MAC address.`, false, true},
		// ustack's own refusals.
		{a("-m 65521 " + pid + " tap0"), "MTU 65521: ustack takes an MTU from 1280 (IPv6's minimum) to 65520 (the largest of its TUN and TAP devices)", true, false},
		{a("-m 576 " + pid + " tap0"), "MTU 576: ustack takes an MTU from 1280 (IPv6's minimum) to 65520 (the largest of its TUN and TAP devices)", true, false},
		{a("--target-type=bess /tmp/bess.sock"), "--target-type=bess: ustack serves network namespaces only (--target-type=netns), not BESS sockets", true, false},
		{a("--netns-type=tapfd 3"), "--netns-type=tapfd: slirp4netns 1.3's descriptor type is not taken: use pid or path", true, false},
		{a("-c --macaddress=01:00:5e:00:00:01 " + pid + " tap0"), "--macaddress 01:00:5e:00:00:01: not a unicast MAC address, which the TAP device needs", false, false},
		{a("-c --macaddress=0:0:0:0:0:0 " + pid + " tap0"), "--macaddress 00:00:00:00:00:00: not a unicast MAC address, which the TAP device needs", false, false},
		{[]string{"--netns-type=path", ns, "tap0", "--mtu=65521"}, "MTU 65521: ustack takes an MTU from 1280 (IPv6's minimum) to 65520 (the largest of its TUN and TAP devices)", true, false},
	}
}

func TestSlirp4netnsRefuses(t *testing.T) {
	requireRefusals(t, slirp4netnsFrontEnd, slirp4netnsSettle, slirpRefusals(t))
}

// TestSlirp4netnsRefusesAsTheOriginal runs the installed slirp4netns on
// the command lines both refuse and compares how.
func TestSlirp4netnsRefusesAsTheOriginal(t *testing.T) {
	requireOriginalRefusals(t, slirp4netnsFrontEnd, parseSlirp4netns, slirpRefusals(t))
}

// TestSlirp4netnsHelp checks that the help names every option ustack
// takes, including those the callers look for before they run it.
func TestSlirp4netnsHelp(t *testing.T) {
	stdout := requireSettledOK(t, slirp4netnsSettle, "/usr/bin/slirp4netns", "--help")
	require.True(t, strings.HasPrefix(stdout, "Usage: /usr/bin/slirp4netns [OPTION]... PID|PATH [TAPNAME]\n"), stdout)
	for _, l := range slirpTable.long {
		if l.id == slirpNoHostLoopback || l.id == slirpCreateSandbox {
			continue // deprecated names, which slirp4netns does not list either
		}
		require.Contains(t, stdout, "--"+l.name, "the help does not name --%s", l.name)
	}
	for i, c := range slirpTable.short {
		if c != ':' {
			require.Contains(t, stdout, "-"+slirpTable.short[i:i+1]+", --", "the help does not name -%c", c)
		}
	}
	// Podman 4 and 5 (checkSlirpFlags) and RootlessKit (DetectFeatures,
	// which refuses a slirp4netns without --netns-type) grep for these.
	for _, s := range []string{"--disable-host-loopback", "--mtu", "--enable-sandbox", "--enable-seccomp", "--cidr", "--outbound-addr", "--enable-ipv6", "--netns-type", "--api-socket"} {
		require.Contains(t, stdout, s)
	}
}

func TestSlirp4netnsVersion(t *testing.T) {
	stdout := requireSettledOK(t, slirp4netnsSettle, "slirp4netns", "-v")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 6, stdout)
	require.Equal(t, "slirp4netns version 1.2.0+ustack", lines[0])
	// slirp4netns's line names, in its order ("runc-compatible and
	// machine-parsable"), with ustack's values, and ustack's own line.
	for i, name := range []string{"", "commit", "libslirp", "SLIRP_CONFIG_VERSION_MAX", "libseccomp", "ustack"} {
		if name != "" {
			k, v, ok := strings.Cut(lines[i], ": ")
			require.True(t, ok && k == name && v != "", "line %d: %q", i, lines[i])
		}
	}
	require.Contains(t, lines[2], gvisorModule)
}

// TestSlirp4netnsVersionAsTheOriginal compares the line names of
// --version with the installed slirp4netns's.
func TestSlirp4netnsVersionAsTheOriginal(t *testing.T) {
	status, stdout, _, _ := runOriginal(t, "slirp4netns", "--version")
	require.Zero(t, status)
	var ours strings.Builder
	writeSlirp4netnsVersion(&ours)
	key := func(l string) string { k, _, _ := strings.Cut(l, ":"); return k }
	theirs := strings.Split(strings.TrimSpace(stdout), "\n")
	mine := strings.Split(strings.TrimSpace(ours.String()), "\n")
	require.True(t, strings.HasPrefix(theirs[0], "slirp4netns version "))
	for i := 1; i < len(theirs); i++ {
		require.Equal(t, key(theirs[i]), key(mine[i]), "line %d", i)
	}
}

// FuzzSlirp4netns checks that no command line makes the parser panic,
// and that what it accepts is written back by args into a command line
// that parses to the same options.
func FuzzSlirp4netns(f *testing.F) {
	slirpRoundTrip.fuzz(f, "-c6m9000 1234 tap0", "--cidr=10.0.3.0/24 -c --macaddress=2:0:0:0:0:1 --outbound-addr=eth0 1 t", "--netns-type=path /proc/self/ns/net tap0 x", "--outbound-addr6=::ffff:1.2.3.4 1")
}

// TestSlirp4netnsMapping maps the callers' command lines (as in
// TestSlirp4netnsCallers) onto the run: the sandbox's configuration and
// the descriptors, API socket and confinement around it.
func TestSlirp4netnsMapping(t *testing.T) {
	ns := existingFile(t, "netns")
	userns := existingFile(t, "user")
	const api = "/run/user/1000/libpod/tmp/abc.net"
	a, p := netip.MustParseAddr, netip.MustParsePrefix
	ifAddrs := func(name string) ([]net.Addr, error) {
		if name != "eth0" {
			return nil, errors.New("no such network interface")
		}
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("fe80::7"), Mask: net.CIDRMask(64, 128)},
			&net.IPNet{IP: net.ParseIP("192.0.2.7").To4(), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("2001:db8::7"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}
	// run is what every caller's line has in common: slirp4netns's
	// layout on a TAP device, one CPU, the monitor's slow tick.
	run := func(mod func(r *sandboxRun)) sandboxRun {
		r := sandboxRun{
			name: "slirp4netns", readyFD: -1, exitFD: -1, procs: 1, sysmonTick: true,
			confineOff: "leave out --enable-sandbox and --enable-seccomp",
			cfg: sandbox.Config{
				TAP: true, Device: "tap0", MTU: 1500, AllowHostLoopback: true, NoIPv6: true,
				Addr4: p("10.0.2.100/24"), Gateway4: a("10.0.2.2"), DNS4: a("10.0.2.3"),
			},
		}
		mod(&r)
		return r
	}
	v6 := func(c *sandbox.Config) {
		c.NoIPv6, c.Addr6, c.Gateway6, c.DNS6 = false, p("fd00::100/64"), a("fd00::2"), a("fd00::3")
	}
	podman := func(r *sandboxRun) {
		r.confine, r.cfg.NetNS, r.cfg.MTU, r.cfg.AllowHostLoopback = true, ns, 65520, false
		v6(&r.cfg)
	}
	for _, tc := range []struct {
		name string
		args []string
		want sandboxRun
	}{
		{"podman 4.3.1 container", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-e", "3", "-r", "4", "--netns-type=path", ns, "tap0"},
			run(func(r *sandboxRun) { podman(r); r.exitFD, r.readyFD = 3, 4 })},
		{"podman 4.3.1 container, API socket, options", []string{"--disable-host-loopback", "--mtu=1500", "--enable-sandbox", "--enable-seccomp", "--cidr=10.0.3.0/24", "--enable-ipv6", "--outbound-addr=192.0.2.1", "--outbound-addr6=2001:db8::1", "-c", "-e", "3", "-r", "4", "--api-socket", api, "--netns-type=path", ns, "tap0"},
			run(func(r *sandboxRun) {
				podman(r)
				r.exitFD, r.readyFD, r.apiSocket, r.cfg.MTU = 3, 4, api, 1500
				r.cfg.Addr4, r.cfg.Gateway4, r.cfg.DNS4 = p("10.0.3.100/24"), a("10.0.3.2"), a("10.0.3.3")
				r.cfg.OutboundAddr4, r.cfg.OutboundAddr6 = a("192.0.2.1"), a("2001:db8::1")
			})},
		{"podman 4.3.1 allow_host_loopback, no IPv6, seccomp alone", []string{"--mtu=65520", "--enable-seccomp", "-c", "-e", "3", "-r", "4", "--netns-type=path", ns, "tap0"},
			run(func(r *sandboxRun) {
				r.confine, r.cfg.NetNS, r.cfg.MTU, r.exitFD, r.readyFD = true, ns, 65520, 3, 4
			})},
		{"podman rootless netns, MAC", []string{"--disable-host-loopback", "--mtu=65520", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "-c", "-r", "3", "--macaddress=02:00:00:00:00:09", "--netns-type=path", ns, "tap0"},
			run(func(r *sandboxRun) {
				podman(r)
				r.readyFD, r.cfg.MAC = 3, net.HardwareAddr{2, 0, 0, 0, 0, 9}
			})},
		{"rootlesskit 1.1: its tap0 left to it", []string{"--mtu", "65520", "-r", "3", "--disable-host-loopback", "--cidr", "10.0.2.0/24", "--api-socket", "/run/user/1000/rootlesskit/slirp4netns.sock", "--enable-sandbox", "--enable-seccomp", "--enable-ipv6", "4321", "tap0"},
			run(func(r *sandboxRun) {
				r.readyFD, r.apiSocket, r.confine = 3, "/run/user/1000/rootlesskit/slirp4netns.sock", true
				r.cfg.NetNS, r.cfg.UserNS, r.cfg.NoConfigure, r.cfg.MTU, r.cfg.AllowHostLoopback = "/proc/4321/ns/net", "/proc/4321/ns/user", true, 65520, false
				v6(&r.cfg)
			})},
		{"rootlesskit 1.1, least: unconfined, as slirp4netns", []string{"--mtu", "65520", "-r", "3", "4321", "tap0"},
			run(func(r *sandboxRun) {
				r.readyFD = 3
				r.cfg.NetNS, r.cfg.UserNS, r.cfg.NoConfigure, r.cfg.MTU = "/proc/4321/ns/net", "/proc/4321/ns/user", true, 65520
			})},
		{"rootlesskit 2 detach-netns", []string{"--mtu", "65520", "-r", "3", "--disable-host-loopback", "--cidr", "10.0.2.0/24", "--enable-seccomp", "--enable-ipv6", "--userns-path=" + userns, "--netns-type=path", ns, "tap0"},
			run(func(r *sandboxRun) {
				r.readyFD, r.confine = 3, true
				r.cfg.NetNS, r.cfg.UserNS, r.cfg.NoConfigure, r.cfg.MTU, r.cfg.AllowHostLoopback = ns, userns, true, 65520, false
				v6(&r.cfg)
			})},
		{"outbound addresses of an interface", []string{"-6", "--outbound-addr=eth0", "--outbound-addr6=eth0", "--disable-dns", "4321", "tap1"},
			run(func(r *sandboxRun) {
				r.cfg.NetNS, r.cfg.UserNS, r.cfg.NoConfigure, r.cfg.Device, r.cfg.NoDNS = "/proc/4321/ns/net", "/proc/4321/ns/user", true, "tap1", true
				r.cfg.OutboundAddr4, r.cfg.OutboundAddr6 = a("192.0.2.7"), a("2001:db8::7")
				v6(&r.cfg)
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseSlirp4netns(append([]string{"slirp4netns"}, tc.args...))
			require.NoError(t, err)
			got, err := o.sandboxRun("slirp4netns", ifAddrs)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--outbound-addr=eth9", "1", "tap0"}, "--outbound-addr=eth9: neither an IPv4 address nor an interface with one: no such network interface"},
		{[]string{"-6", "--outbound-addr6=lo0", "1", "tap0"}, "--outbound-addr6=lo0: neither an IPv6 address nor an interface with one"},
		{[]string{"--outbound-addr6=eth0", "1", "tap0"}, ""}, // taken, and unused without IPv6, as slirp4netns does
	} {
		o, err := parseSlirp4netns(append([]string{"slirp4netns"}, tc.args...))
		require.NoError(t, err)
		_, err = o.sandboxRun("slirp4netns", ifAddrs)
		if tc.msg == "" {
			require.NoError(t, err, "%q", tc.args)
			continue
		}
		require.ErrorContains(t, err, tc.msg, "%q", tc.args)
	}
}

package sandbox

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ustack-dev/ustack/forward"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"golang.org/x/net/proxy"
)

// Defaults of Config. The IPv4 addresses are in 198.18.0.0/15, the range
// reserved for benchmarking (RFC 2544), so they clash with no real network
// the host may route to; the IPv6 ones are in fd00::/8 (unique local).
var (
	DefaultAddr4    = netip.MustParsePrefix("198.18.0.100/24")
	DefaultGateway4 = netip.MustParseAddr("198.18.0.1")
	DefaultDNS4     = netip.MustParseAddr("198.18.0.3")
	DefaultAddr6    = netip.MustParsePrefix("fd00:198:18::100/64")
	DefaultGateway6 = netip.MustParseAddr("fd00:198:18::1")
	DefaultDNS6     = netip.MustParseAddr("fd00:198:18::3")
)

const (
	// DefaultMTU is the largest MTU a TUN device takes (65520, what
	// slirp4netns and pasta use): with offloads on, TCP moves 64 KiB
	// super-segments either way.
	DefaultMTU = tun.MaxMTU
	// DefaultDevice names the TUN device inside the sandbox, and
	// DefaultTAPDevice a TAP device, as slirp4netns and pasta name theirs.
	DefaultDevice    = "tun0"
	DefaultTAPDevice = "tap0"
	// DefaultTCPBuffer is what a zero Options.TCPBuffer means in a
	// sandbox, which builds its stack for it: the most gVisor buffers
	// per direction of one relayed TCP flow (receive and send buffer
	// maximum), half the stack's own maximum. 4 MiB keeps a 10 Gbit/s flow
	// at 3 ms RTT busy and bounds a flow's memory in this process to
	// about twice that, so forward.DefaultMemoryBudget holds 1024 flows.
	DefaultTCPBuffer = 4 << 20
	// DefaultConnectTimeout bounds a host-side TCP connect for one flow.
	DefaultConnectTimeout = 10 * time.Second
)

// User namespace mappings of a rootless sandbox (Config.UsernsMap).
const (
	// UsernsMapSelf maps the caller's uid and gid to root inside, and
	// nothing else, as `unshare -r` does.
	UsernsMapSelf = "self"
	// UsernsMapAuto maps root inside to the caller and uids and gids 1 and
	// up to the caller's ranges in /etc/subuid and /etc/subgid, through
	// newuidmap and newgidmap, as rootless podman does.
	UsernsMapAuto = "auto"
)

// Config describes a sandbox. The zero value of a field means its default
// (see the Default constants and variables), except the booleans, which
// default to false.
type Config struct {
	// NetNS is the path of an existing network namespace to serve, such as
	// /var/run/netns/NAME or /proc/PID/ns/net; "" creates a new one that
	// lives as long as the Sandbox (and the processes started in it).
	NetNS string
	// Host serves Device in this process's own network namespace, as
	// tun2socks does, instead of a namespace of the sandbox's: nothing is
	// created or entered but the device, and no route is changed (route
	// what should go through the device yourself; with a default route
	// through it, Interface or Mark keep the relay's own sockets out of
	// it). NetNS must be empty. Without root the device must exist,
	// persistent and the caller's (ip tuntap add ... user NAME), and be
	// left as it is configured (NoConfigure).
	Host bool
	// UserNS, without root, is the user namespace to join with NetNS
	// (/proc/PID/ns/user); "" means the one that owns NetNS.
	UserNS string
	// UsernsMap, without root and NetNS "", is how the new user
	// namespace maps ids: UsernsMapSelf or UsernsMapAuto; "" means auto
	// where newuidmap and subordinate ranges exist, self otherwise.
	UsernsMap string
	// Device names the device inside the namespace: DefaultDevice for a
	// TUN device, DefaultTAPDevice with TAP.
	Device string
	// TAP makes the device a TAP device, which carries Ethernet frames,
	// as slirp4netns and pasta give rootless containers, instead of a
	// TUN device: ustack then answers ARP and neighbour discovery for its
	// addresses and sends router advertisements of Addr6's prefix, so
	// that the sandbox configures IPv6 itself (SLAAC). The device may
	// exist already (RootlessKit creates its tap0): New attaches to it by
	// name, and refuses a device of the other type.
	TAP bool
	// MAC is the TAP device's MAC address (the sandbox's side), set when
	// New configures it; nil leaves the kernel's random one.
	MAC net.HardwareAddr
	// NoConfigure leaves the device to whoever made it, as RootlessKit
	// configures the tap0 it creates: New attaches to (or creates) Device
	// and touches no address, route, MTU or link state in the namespace.
	// The sandbox still takes Addr4, the gateways and the DNS addresses
	// as given, so they must match what the creator configures. A zero
	// MTU then means the device's own.
	NoConfigure bool
	// Addr4 and Addr6 are the sandbox's addresses; Gateway4 and
	// Gateway6 ustack's, in the same prefixes (Gateway6 may also be a
	// link-local address, as a host's IPv6 gateway usually is). NoIPv6
	// leaves IPv6 off.
	Addr4, Addr6       netip.Prefix
	Gateway4, Gateway6 netip.Addr
	// DNS4 and DNS6 are ustack's DNS addresses, where queries are
	// relayed to DNSUpstream. They may lie outside the sandbox's prefix
	// (pasta's --dns-forward 169.254.1.1, as Podman gives it): the
	// sandbox reaches them through the gateway, and ustack owns them as
	// /32 or /128. The unspecified address (0.0.0.0, ::) means none of
	// that family: port 53 is then relayed as any other port.
	DNS4, DNS6 netip.Addr
	NoIPv6     bool
	// NoRA turns a TAP sandbox's router advertisements off: its IPv6 is
	// then only what New configures (pasta sends none when it configures
	// the namespace itself, or with --no-ra).
	NoRA bool
	// MTU of the device (of the IP packets it carries); NoOffload turns
	// its virtio-net offloads off.
	MTU       uint32
	NoOffload bool
	// Queues is the device's queue count (one receive goroutine each).
	Queues int
	// Interface binds every host socket the relay opens (TCP, UDP, ICMP,
	// DNS over TCP, the proxy's) to this interface (SO_BINDTODEVICE), and
	// Mark marks each one (SO_MARK; root only): so that a default route
	// through the sandbox's own device (Host) cannot loop the relay's
	// traffic back into it, with Mark matched by a routing rule. 0 and
	// "" mean none.
	Interface string
	Mark      uint32
	// Capture, if not nil, receives a capture of every packet the device
	// carries, either way, in pcap format (package link/pcap), which
	// Wireshark and tcpdump read: Ethernet frames on a TAP device, IP
	// packets on a TUN device. A writer slower than the traffic loses
	// packets, counted, rather than slowing the sandbox down. New does
	// not close it.
	Capture io.Writer
	// Qdisc names the NIC's queueing discipline (package sched); "" is none.
	Qdisc string
	// BusyPoll is the stack's busy-polling mode (stack.Options.BusyPoll).
	BusyPoll poll.Mode

	// DNSUpstream is the resolver that DNS queries to DNS4/DNS6 go to;
	// the zero value means the first nameserver of the host's
	// /etc/resolv.conf. NoDNS turns the DNS relay off.
	DNSUpstream netip.AddrPort
	NoDNS       bool
	// ResolvConf, when starting a command, gives it a private
	// /etc/resolv.conf naming DNS4 (and DNS6), in a mount namespace of its
	// own; the host's file is untouched.
	ResolvConf bool

	// AllowHostLoopback maps the HostLoopback addresses (the gateways by
	// default) to the host's loopback (127.0.0.1 and ::1); without it
	// they refuse every flow.
	AllowHostLoopback bool
	// HostLoopback4 and HostLoopback6 are the addresses that stand for
	// the host's loopback (see AllowHostLoopback): zero means the
	// gateway's, as slirp4netns and pasta have it. The unspecified
	// address (0.0.0.0, ::) means none: the gateway is then relayed as
	// any other destination, which suits a gateway that is the host's
	// real one (pasta's --no-map-gw, its gateway copied from the host).
	// An address other than the gateway's is ustack's too, as DNS4 is.
	HostLoopback4, HostLoopback6 netip.Addr
	// MapGuestAddr4 and MapGuestAddr6, if valid, are addresses whose TCP
	// connections go to the sandbox's own address (Addr4, Addr6) on the
	// host, as pasta's --map-guest-addr maps them: where the sandbox has
	// the host's address, that is how it reaches the host by its address
	// (Podman's host.containers.internal, 169.254.1.2). ustack owns them
	// as it owns DNS4. UDP and pings to them are not mapped: they go
	// where they are addressed, like any destination (a link-local one
	// is refused as reserved).
	MapGuestAddr4, MapGuestAddr6 netip.Addr
	// OutboundAddr4 and OutboundAddr6, if valid, are the host addresses
	// the relay's TCP connections leave from, each connection bound to
	// the one of its destination's family (slirp4netns's --outbound-addr
	// and --outbound-addr6, pasta's -o); invalid: routing picks. The
	// relay's UDP sockets and pings are not bound to them.
	OutboundAddr4, OutboundAddr6 netip.Addr
	// Allow, if not empty, is the set of destinations the sandbox may
	// reach; Deny is refused even if Allow covers it.
	Allow, Deny []netip.Prefix
	// Options are the relay's limits, as package forward takes them: a
	// zero field means forward's default, a negative limit none. A zero
	// TCPBuffer means DefaultTCPBuffer here, the sandbox building its
	// stack for it; UDPIdleTimeout also ends the port forwards' idle UDP
	// mappings. NICs must be nil: the sandbox relays its one NIC.
	forward.Options
	// ConnectTimeout bounds a host-side TCP connect.
	ConnectTimeout time.Duration

	// PortForwards carry host connections into the sandbox.
	PortForwards []PortForward

	// Dialer, if not nil, is what every flow of the sandbox is relayed
	// through instead of host sockets: a tunnel's userspace network, such
	// as a WireGuard client's (wgnet.Net.Dialer; ustack tun -wg), so that the
	// sandbox's only network is the tunnel. UDP goes through it where it
	// has packet sockets (forward.PacketListener),
	// pings where it has echo sockets (forward.PingListener), DNS queries
	// to DNS4 and DNS6 to DNSUpstream through it; what it cannot carry is
	// refused and counted (Unsupported). The policy applies as with host
	// sockets. DNSUpstream should be a resolver it reaches (the host's
	// is the default). Interface, Mark, the outbound addresses and
	// AllowHostLoopback, which are about host sockets, are refused with
	// it. It is the caller's, used while the sandbox serves; it is not
	// carried across processes (a relay process builds its own).
	Dialer proxy.ContextDialer `json:"-"`
	// Proxy, if not empty, is the URL of a proxy that every TCP flow of
	// the sandbox goes through instead of a host socket (package
	// forward/upstream): socks5://[user:pass@]HOST:PORT, or
	// http://[user:pass@]HOST:PORT for HTTP CONNECT. The policy (Allow,
	// Deny, the reserved ranges, AllowHostLoopback) still applies to the
	// destination the sandbox asked for; the host's loopback is then the
	// proxy's. Neither kind carries UDP (x/net's SOCKS5 client has no UDP
	// ASSOCIATE), so UDP is refused (Unsupported) unless ProxyUDPDirect,
	// and DNS queries to DNS4 and DNS6 go to DNSUpstream over TCP through
	// the proxy. ICMP echo is refused (Unsupported).
	Proxy string
	// ProxyUDPDirect relays UDP to host sockets, outside the proxy, when
	// Proxy is set (DNS queries too). Off, UDP is refused: who sets a
	// proxy expects all traffic to leave through it.
	ProxyUDPDirect bool
}

// PortForward is a port forward from the host into the sandbox, like
// slirp4netns's hostfwd and pasta's -t/-u.
type PortForward struct {
	// UDP forwards datagrams; otherwise TCP connections.
	UDP bool
	// Host is where the host listens; port 0 picks one (PortForwardAddrs).
	Host netip.AddrPort
	// Port is the sandbox port the flows go to, at Addr4 (or Addr6 when
	// Host is an IPv6 address).
	Port uint16
}

// String formats f as ParsePortForward reads it.
func (f PortForward) String() string {
	s := fmt.Sprintf("%s:%d", f.Host, f.Port)
	if f.UDP {
		s += "/udp"
	}
	return s
}

// ParsePortForward reads a port forward: [HOSTIP:]HOSTPORT:PORT[/tcp|/udp].
// Without HOSTIP the host listens on 127.0.0.1 only: exposing a sandbox
// port to the network takes an explicit 0.0.0.0 or [::].
func ParsePortForward(s string) (PortForward, error) {
	var f PortForward
	spec := s
	if i := strings.LastIndexByte(spec, '/'); i >= 0 {
		switch strings.ToLower(spec[i+1:]) {
		case "udp":
			f.UDP = true
		case "tcp":
		default:
			return f, fmt.Errorf("port forward %q: protocol %q: use tcp or udp", s, spec[i+1:])
		}
		spec = spec[:i]
	}
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return f, fmt.Errorf("port forward %q: want [HOSTIP:]HOSTPORT:PORT[/udp]", s)
	}
	port, err := parsePort(spec[i+1:])
	if err != nil {
		return f, fmt.Errorf("port forward %q: sandbox port: %w", s, err)
	}
	f.Port = port
	host := spec[:i]
	ip := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if j := strings.LastIndexByte(host, ':'); j >= 0 {
		a := strings.TrimSuffix(strings.TrimPrefix(host[:j], "["), "]")
		if ip, err = netip.ParseAddr(a); err != nil {
			return f, fmt.Errorf("port forward %q: host address %q: %w", s, a, err)
		}
		host = host[j+1:]
	}
	hp, err := parsePort(host)
	if err != nil {
		return f, fmt.Errorf("port forward %q: host port: %w", s, err)
	}
	f.Host = netip.AddrPortFrom(ip.Unmap(), hp)
	return f, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a port (1 to 65535)", s)
	}
	return uint16(n), nil
}

// normalize fills in defaults and checks c.
func (c Config) normalize() (Config, error) {
	setPrefix := func(p *netip.Prefix, d netip.Prefix) {
		if !p.IsValid() {
			*p = d
		}
	}
	setAddr := func(a *netip.Addr, d netip.Addr) {
		if !a.IsValid() {
			*a = d
		}
	}
	setPrefix(&c.Addr4, DefaultAddr4)
	setPrefix(&c.Addr6, DefaultAddr6)
	setAddr(&c.Gateway4, DefaultGateway4)
	setAddr(&c.Gateway6, DefaultGateway6)
	setAddr(&c.DNS4, DefaultDNS4)
	setAddr(&c.DNS6, DefaultDNS6)
	setAddr(&c.HostLoopback4, c.Gateway4)
	setAddr(&c.HostLoopback6, c.Gateway6)
	if c.Device == "" {
		c.Device = DefaultDevice
		if c.TAP {
			c.Device = DefaultTAPDevice
		}
	}
	if c.MTU == 0 && !c.NoConfigure {
		c.MTU = DefaultMTU
	}
	if c.Queues == 0 {
		c.Queues = 1
	}
	if c.TCPBuffer == 0 {
		c.TCPBuffer = DefaultTCPBuffer
	}
	if c.UDPIdleTimeout == 0 {
		c.UDPIdleTimeout = forward.DefaultUDPIdleTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	var errs []error
	if err := checkDevice(c.Device); err != nil {
		errs = append(errs, err)
	}
	if c.Queues < 1 || c.Queues > tun.MaxQueues {
		errs = append(errs, fmt.Errorf("sandbox: %d TUN queues: must be from 1 to %d", c.Queues, tun.MaxQueues))
	}
	if c.UsernsMap != "" && c.UsernsMap != UsernsMapSelf && c.UsernsMap != UsernsMapAuto {
		errs = append(errs, fmt.Errorf("sandbox: user namespace map %q: use self or auto", c.UsernsMap))
	}
	if c.Qdisc != "" && !sched.Known(c.Qdisc) {
		errs = append(errs, fmt.Errorf("sandbox: %w", &sched.UnknownError{Name: c.Qdisc}))
	}
	// The sandbox, the gateway and the DNS address share the prefix, and
	// none of them may be its network (or IPv4 broadcast) address.
	if c.Addr4.Addr().Is4() && (c.Addr4.Bits() > 30 || c.Addr4.Addr() == c.Addr4.Masked().Addr() || c.Addr4.Bits() < 32 && c.Addr4.Addr() == broadcast(c.Addr4)) {
		errs = append(errs, fmt.Errorf("sandbox: address %v: want a host address in a prefix of /30 or shorter, such as %v", c.Addr4, DefaultAddr4))
	}
	if !c.NoIPv6 && c.Addr6.Addr().Is6() && (c.Addr6.Bits() > 126 || c.Addr6.Addr() == c.Addr6.Masked().Addr()) {
		errs = append(errs, fmt.Errorf("sandbox: IPv6 address %v: want a host address in a prefix of /126 or shorter, such as %v", c.Addr6, DefaultAddr6))
	}
	for _, p := range append(append([]netip.Prefix(nil), c.Allow...), c.Deny...) {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("sandbox: allow/deny prefix %v: not a valid CIDR prefix", p))
		}
	}
	check4 := func(what string, a netip.Addr) {
		if !a.Is4() || !c.Addr4.Contains(a) || a == c.Addr4.Addr() {
			errs = append(errs, fmt.Errorf("sandbox: %s %v: must be an IPv4 address in %v other than the sandbox's", what, a, c.Addr4.Masked()))
		}
	}
	check6 := func(what string, a netip.Addr) {
		if !a.Is6() || a.Is4In6() || !(c.Addr6.Contains(a) || a.IsLinkLocalUnicast()) || a == c.Addr6.Addr() {
			errs = append(errs, fmt.Errorf("sandbox: %s %v: must be an IPv6 address in %v, or a link-local one, other than the sandbox's", what, a, c.Addr6.Masked()))
		}
	}
	if !c.Addr4.Addr().Is4() {
		errs = append(errs, fmt.Errorf("sandbox: address %v: want an IPv4 CIDR such as %v", c.Addr4, DefaultAddr4))
	} else {
		check4("gateway", c.Gateway4)
	}
	if !c.NoIPv6 {
		if !c.Addr6.Addr().Is6() || c.Addr6.Addr().Is4In6() {
			errs = append(errs, fmt.Errorf("sandbox: IPv6 address %v: want an IPv6 CIDR such as %v", c.Addr6, DefaultAddr6))
		} else {
			check6("IPv6 gateway", c.Gateway6)
		}
	}
	errs = append(errs, c.checkExtra()...)
	if len(c.MAC) > 0 {
		switch {
		case !c.TAP:
			errs = append(errs, fmt.Errorf("sandbox: MAC %v: only a TAP device has one; set TAP, or leave MAC empty", c.MAC))
		case c.NoConfigure:
			errs = append(errs, fmt.Errorf("sandbox: MAC %v: with NoConfigure the device's creator sets it; leave MAC empty", c.MAC))
		case len(c.MAC) != 6 || c.MAC[0]&1 != 0 || [6]byte(c.MAC) == [6]byte{}:
			errs = append(errs, fmt.Errorf("sandbox: MAC %v: want a unicast Ethernet address such as 02:00:00:00:00:01", c.MAC))
		}
	}
	if c.MTU != 0 && (c.MTU < tun.MinMTU || c.MTU > tun.MaxMTU) || c.MTU == 0 && !c.NoConfigure {
		errs = append(errs, fmt.Errorf("sandbox: MTU %d: must be from %d to %d", c.MTU, tun.MinMTU, tun.MaxMTU))
	}
	if c.TCPBuffer < 4096 {
		errs = append(errs, fmt.Errorf("sandbox: TCP buffer %d bytes: must be at least 4096", c.TCPBuffer))
	}
	if c.Host && c.NetNS != "" {
		errs = append(errs, fmt.Errorf("sandbox: Host and NetNS %s: Host serves this process's own namespace; give one or the other", c.NetNS))
	}
	if c.Interface != "" {
		if err := checkDevice(c.Interface); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: Interface: %w", err))
		}
	}
	if c.NICs != nil {
		errs = append(errs, errors.New("sandbox: Options.NICs: the sandbox relays its one NIC; leave NICs nil"))
	}
	if c.UDPIdleTimeout < 0 || c.ConnectTimeout < 0 {
		errs = append(errs, errors.New("sandbox: timeouts must be positive"))
	}
	if a := c.OutboundAddr4; a.IsValid() && (!a.Is4() || a.IsUnspecified() || a.IsMulticast()) {
		errs = append(errs, fmt.Errorf("sandbox: outbound address %v: want an IPv4 address of the host", a))
	}
	if a := c.OutboundAddr6; a.IsValid() && (!a.Is6() || a.Is4In6() || a.IsUnspecified() || a.IsMulticast()) {
		errs = append(errs, fmt.Errorf("sandbox: IPv6 outbound address %v: want an IPv6 address of the host", a))
	}
	if c.Proxy != "" && (c.OutboundAddr4.IsValid() || c.OutboundAddr6.IsValid()) {
		errs = append(errs, errors.New("sandbox: outbound addresses bind the relay's host sockets, and with a proxy it opens none of its own: leave OutboundAddr4 and OutboundAddr6 unset, or the proxy"))
	}
	if c.Dialer != nil {
		switch {
		case c.Proxy != "":
			errs = append(errs, errors.New("sandbox: a Dialer and a Proxy: flows go through one or the other; give one"))
		case c.Interface != "" || c.Mark != 0 || c.OutboundAddr4.IsValid() || c.OutboundAddr6.IsValid():
			errs = append(errs, errors.New("sandbox: Interface, Mark and the outbound addresses are the relay's host sockets', and with a Dialer it opens none of its own: set them on the Dialer's sockets, or leave them unset"))
		case c.AllowHostLoopback:
			errs = append(errs, errors.New("sandbox: AllowHostLoopback with a Dialer: the host's loopback is not reached through it; leave AllowHostLoopback off"))
		}
	}
	if c.Proxy != "" {
		if _, err := parseProxy(c.Proxy, nil); err != nil {
			errs = append(errs, err)
		}
	} else if c.ProxyUDPDirect {
		errs = append(errs, errors.New("sandbox: UDP direct past a proxy, without a proxy: UDP always goes to host sockets then; set Proxy, or leave ProxyUDPDirect off"))
	}
	seen := map[PortForward]bool{}
	for _, f := range c.PortForwards {
		if f.Host.Addr().Is6() && c.NoIPv6 {
			errs = append(errs, fmt.Errorf("sandbox: port forward %v: IPv6 is off in the sandbox", f))
		}
		if f.Port == 0 || !f.Host.Addr().IsValid() {
			errs = append(errs, fmt.Errorf("sandbox: port forward %v: needs a host address and a sandbox port", f))
		}
		key := PortForward{UDP: f.UDP, Host: f.Host}
		if f.Host.Port() != 0 && seen[key] {
			errs = append(errs, fmt.Errorf("sandbox: port forward %v: host address %v/%s is forwarded twice", f, f.Host, f.proto()))
		}
		seen[key] = true
	}
	return c, errors.Join(errs...)
}

// Check reports what New would refuse in c, without creating anything.
func (c Config) Check() error {
	_, err := c.normalize()
	return err
}

// proto names the forward's protocol.
func (f PortForward) proto() string {
	if f.UDP {
		return "udp"
	}
	return "tcp"
}

// broadcast is the last address of an IPv4 prefix.
func broadcast(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// checkDevice checks a network device name as Linux does (dev_valid_name):
// 1 to 15 bytes, not "." or "..", no '/', ':' or white space.
func checkDevice(name string) error {
	bad := len(name) == 0 || len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n\v\f\r")
	if bad {
		return fmt.Errorf("sandbox: device name %q: want 1 to 15 characters, without '/', ':' or spaces, such as %q", name, DefaultDevice)
	}
	return nil
}

// extraAddr is one of the sandbox's addresses besides its gateways, as
// checkExtra and owned see them.
type extraAddr struct {
	what string
	a    netip.Addr
	v6   bool
	// loopback: a host loopback address, which is a gateway by default;
	// the unspecified address stands for none (as for DNS).
	loopback, none bool
}

// extraAddrs are the addresses ustack owns in the sandbox besides the
// gateways, those of IPv6 only with it on: DNS, the host's loopback's
// aliases (the gateways, unless set otherwise) and the guest address
// aliases.
func (c *Config) extraAddrs() []extraAddr {
	x := []extraAddr{
		{what: "DNS address", a: c.DNS4, none: true},
		{what: "host loopback address", a: c.HostLoopback4, loopback: true, none: true},
		{what: "guest address alias", a: c.MapGuestAddr4},
	}
	if !c.NoIPv6 {
		x = append(x,
			extraAddr{what: "IPv6 DNS address", a: c.DNS6, v6: true, none: true},
			extraAddr{what: "IPv6 host loopback address", a: c.HostLoopback6, v6: true, loopback: true, none: true},
			extraAddr{what: "IPv6 guest address alias", a: c.MapGuestAddr6, v6: true})
	}
	return x
}

// checkExtra checks extraAddrs: each of its family, usable as a host
// address (not loopback, multicast or broadcast), not the sandbox's
// address, and none the same as another or as a gateway, but for a host
// loopback address (which is the gateway by default).
func (c *Config) checkExtra() []error {
	var errs []error
	seen := map[netip.Addr]string{c.Gateway4: "gateway", c.Gateway6: "IPv6 gateway"}
	for _, x := range c.extraAddrs() {
		if !x.a.IsValid() || x.none && x.a.IsUnspecified() {
			continue
		}
		if x.a.Is6() != x.v6 || x.a.Is4In6() || x.a.IsUnspecified() || x.a.IsLoopback() || x.a.IsMulticast() ||
			x.a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || x.a == c.Addr4.Addr() || x.a == c.Addr6.Addr() {
			family, hint := "IPv4", ", or 0.0.0.0 for none"
			if x.v6 {
				family, hint = "IPv6", ", or :: for none"
			}
			if !x.none {
				hint = ""
			}
			errs = append(errs, fmt.Errorf("sandbox: %s %v: want an %s host address other than the sandbox's%s", x.what, x.a, family, hint))
			continue
		}
		if x.loopback && (x.a == c.Gateway4 || x.a == c.Gateway6) {
			continue
		}
		if other, dup := seen[x.a]; dup {
			errs = append(errs, fmt.Errorf("sandbox: the %s and the %s are both %v: they must differ", other, x.what, x.a))
			continue
		}
		seen[x.a] = x.what
	}
	return errs
}

// owned are the sandbox's addresses ustack owns, each with the
// sandbox's prefix length where it lies in the prefix, as a host route
// (/32, /128) where it does not (a DNS address such as 169.254.1.1, a
// link-local IPv6 gateway). The gateway comes first: it is the primary
// address, the source of port-forwarded connections.
func (c *Config) owned() []netip.Prefix {
	own := func(a netip.Addr) netip.Prefix {
		p := c.Addr4
		if a.Is6() {
			p = c.Addr6
		}
		if p.Contains(a) {
			return netip.PrefixFrom(a, p.Bits())
		}
		return netip.PrefixFrom(a, a.BitLen())
	}
	out := []netip.Prefix{own(c.Gateway4)}
	if !c.NoIPv6 {
		out = append(out, own(c.Gateway6))
	}
	seen := map[netip.Addr]bool{c.Gateway4: true, c.Gateway6: true}
	for _, x := range c.extraAddrs() {
		if x.a.IsValid() && !x.a.IsUnspecified() && !seen[x.a] {
			seen[x.a] = true
			out = append(out, own(x.a))
		}
	}
	return out
}

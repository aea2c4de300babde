package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/proxy"
)

// A Stack dials as Go's net does, so anything that takes a dialer
// (http.Transport.DialContext, x/net/proxy, gRPC's WithContextDialer)
// runs over it.
var (
	_ proxy.ContextDialer = (*Stack)(nil)
	_ proxy.Dialer        = (*Stack)(nil)
)

// family restricts addresses to one IP version: any, 4 or 6.
type family uint8

const (
	anyFamily family = iota
	v4Only
	v6Only
)

func (f family) allows(a netip.Addr) bool {
	return f == anyFamily || (f == v4Only) == a.Is4()
}

// lookupNetwork is the network argument of net.Resolver.LookupNetIP.
func (f family) lookupNetwork() string {
	switch f {
	case v4Only:
		return "ip4"
	case v6Only:
		return "ip6"
	}
	return "ip"
}

// parseNetwork splits a transport network name ("tcp", "udp6") into its
// protocol and family.
func parseNetwork(network string) (proto string, f family, ok bool) {
	switch network {
	case "tcp", "udp":
		return network, anyFamily, true
	case "tcp4", "udp4":
		return network[:3], v4Only, true
	case "tcp6", "udp6":
		return network[:3], v6Only, true
	}
	return "", 0, false
}

// errMissingAddress is a dial without a host: a stack has no "local
// system" to dial as Go's net does for an empty host.
var errMissingAddress = errors.New("missing address: give the host to dial")

// minAttempt is the least time each address of a multi-address dial gets
// before the next is tried, as long as the whole deadline allows it:
// Go's net uses the same floor, so that one slow address does not eat the
// time of the ones after it, nor a short deadline starve them all.
const minAttempt = 2 * time.Second

// DialContext connects to address on the named network, as
// net.Dialer.DialContext does: networks "tcp", "tcp4", "tcp6", "udp",
// "udp4", "udp6", and "ip4:icmp", "ip6:ipv6-icmp" for ICMP echo (see
// ListenPacket). The address is "host:port" (IPv6 hosts in brackets); a
// host name is resolved through Resolver, and each of its addresses of
// the network's IP version is tried in the resolver's order until one
// connects, each within its share of ctx's deadline. IPv6 zones are
// refused: the stack's addresses have none.
//
// ctx bounds the lookup and the TCP handshake; cancelling it after
// DialContext returns does not affect the conn. The conns are the ones
// DialTCP and DialUDP return, with the stack's buffer caching and busy
// polling. Errors are *net.OpError with Op "dial", this network and the
// address that failed, its Err the errno a Linux socket gives
// (TranslateError): a refused connection satisfies errors.Is(err,
// syscall.ECONNREFUSED), one without a route ENETUNREACH, and a dial that
// ran out of time has Timeout() true and satisfies errors.Is(err,
// context.DeadlineExceeded).
func (s *Stack) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if ctx == nil {
		panic("ustack: DialContext with a nil context")
	}
	if v6, ok, err := parseICMPNetwork(network); ok {
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		return s.dialPing(ctx, network, address, v6)
	}
	proto, fam, ok := parseNetwork(network)
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	host, port, err := s.splitHostPort(ctx, proto, address)
	if err == nil && host == "" {
		err = errMissingAddress
	}
	var addrs []netip.Addr
	if err == nil {
		addrs, err = s.lookup(ctx, fam, host)
	}
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var first error
	for i, a := range addrs {
		ap := netip.AddrPortFrom(a, port)
		c, err := s.dialOne(ctx, proto, ap, len(addrs)-i)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = &net.OpError{Op: "dial", Net: network, Addr: netAddr(proto, ap), Err: innerError(err)}
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// dialOne dials one address with its share of ctx's deadline, left
// addresses (this one included) still to try.
func (s *Stack) dialOne(ctx context.Context, proto string, ap netip.AddrPort, left int) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if proto == "udp" {
		return s.DialUDP(netip.AddrPort{}, ap)
	}
	if deadline, ok := ctx.Deadline(); ok && left > 1 {
		remaining := time.Until(deadline)
		share := remaining / time.Duration(left)
		if share < minAttempt {
			share = min(minAttempt, remaining)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, share)
		defer cancel()
	}
	return s.DialTCP(ctx, ap)
}

// innerError unwraps the *net.OpError that DialTCP, ListenTCP and
// friends return, so that the caller's OpError names the caller's
// network and address and does not nest a second one.
func innerError(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Err
	}
	return err
}

// netAddr is ap as the net.Addr type of proto.
func netAddr(proto string, ap netip.AddrPort) net.Addr {
	if proto == "udp" {
		return net.UDPAddrFromAddrPort(ap)
	}
	return net.TCPAddrFromAddrPort(ap)
}

// Dial is DialContext without a context.
func (s *Stack) Dial(network, address string) (net.Conn, error) {
	return s.DialContext(context.Background(), network, address)
}

// Listen listens for TCP connections on address, as net.Listen does:
// networks "tcp", "tcp4", "tcp6"; an empty host listens on all of the
// stack's addresses ("tcp" and "tcp6" on [::], which takes IPv4 too;
// "tcp4" on 0.0.0.0); a host name is resolved through Resolver and its
// first address used. Port 0 picks a free port (see the listener's Addr).
// The listener's conns are the stack's, as ListenTCP's are. Errors are
// *net.OpError with Op "listen".
func (s *Stack) Listen(network, address string) (net.Listener, error) {
	proto, fam, ok := parseNetwork(network)
	if !ok || proto != "tcp" {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	ap, err := s.localAddrPort(proto, fam, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	ln, err := s.ListenTCP(ap)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: netAddr(proto, ap), Err: innerError(err)}
	}
	return ln, nil
}

// ListenPacket opens a packet socket on address, as net.ListenPacket
// does. Networks "udp", "udp4", "udp6" give a UDP socket (the one
// ListenUDP returns), with addresses as in Listen. Networks "ip4:icmp"
// (or "ip4:1") and "ip6:ipv6-icmp" (or "ip6:58") give an ICMP echo
// socket on the address, a host without a port ("" for any): it is
// Linux's unprivileged ping socket, and x/net/icmp's "udp4" and "udp6"
// in shape: write an echo request (type, code, identifier, sequence,
// data; the stack sets the identifier to the socket's and computes the
// checksum), read the echo replies to it, ICMP header first, from
// *net.IPAddr sources. Errors are *net.OpError with Op "listen".
func (s *Stack) ListenPacket(network, address string) (net.PacketConn, error) {
	if v6, ok, err := parseICMPNetwork(network); ok {
		if err != nil {
			return nil, &net.OpError{Op: "listen", Net: network, Err: err}
		}
		return s.listenPing(network, address, v6)
	}
	proto, fam, ok := parseNetwork(network)
	if !ok || proto != "udp" {
		return nil, &net.OpError{Op: "listen", Net: network, Err: net.UnknownNetworkError(network)}
	}
	ap, err := s.localAddrPort(proto, fam, address)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	c, err := s.ListenUDP(ap)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: netAddr(proto, ap), Err: innerError(err)}
	}
	return c, nil
}

// localAddrPort parses a local address to listen on.
func (s *Stack) localAddrPort(proto string, fam family, address string) (netip.AddrPort, error) {
	ctx := context.Background()
	host, port, err := s.splitHostPort(ctx, proto, address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	a, err := s.localAddr(ctx, fam, host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, port), nil
}

// localAddr is the address of host to bind to: the unspecified address
// of fam for an empty host, else host's first address of fam (IPv4 first
// for any family, as Go's net does for listeners).
func (s *Stack) localAddr(ctx context.Context, fam family, host string) (netip.Addr, error) {
	if host == "" {
		if fam == v4Only {
			return netip.IPv4Unspecified(), nil
		}
		return netip.IPv6Unspecified(), nil
	}
	addrs, err := s.lookup(ctx, fam, host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a.Is4() {
			return a, nil
		}
	}
	return addrs[0], nil
}

// splitHostPort splits "host:port"; the port may be a number or a
// service name of proto (looked up in the host's /etc/services, as Go's
// net does).
func (s *Stack) splitHostPort(ctx context.Context, proto, address string) (string, uint16, error) {
	host, service, err := net.SplitHostPort(address)
	if err != nil {
		return "", 0, err
	}
	if n, err := strconv.ParseUint(service, 10, 16); err == nil {
		return host, uint16(n), nil
	}
	n, err := s.dns.r.LookupPort(ctx, proto, service)
	if err != nil {
		return "", 0, err
	}
	return host, uint16(n), nil
}

// lookup returns host's addresses of fam, unmapped: host itself if it is
// an IP address, else what Resolver finds for it.
func (s *Stack) lookup(ctx context.Context, fam family, host string) ([]netip.Addr, error) {
	if strings.Contains(host, "%") {
		return nil, &net.AddrError{Err: "IPv6 zones are not supported: a ustack stack's addresses have no scope; drop the %zone", Addr: host}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if !fam.allows(a) {
			return nil, &net.AddrError{Err: fmt.Sprintf("no suitable address: want IPv%s", fam.version()), Addr: host}
		}
		return []netip.Addr{a}, nil
	}
	lookup := s.dns.r.LookupNetIP
	if s.lookupHost != nil {
		lookup = s.lookupHost
	}
	found, err := lookup(ctx, fam.lookupNetwork(), host)
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, 0, len(found))
	for _, a := range found {
		if a = a.Unmap(); fam.allows(a) {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, &net.AddrError{Err: fmt.Sprintf("no suitable address: want IPv%s", fam.version()), Addr: host}
	}
	return addrs, nil
}

func (f family) version() string {
	switch f {
	case v4Only:
		return "4"
	case v6Only:
		return "6"
	}
	return "4 or IPv6"
}

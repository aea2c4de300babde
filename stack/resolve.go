package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
)

// DNSPort is the port the servers of Options.DNS are asked on.
const DNSPort = 53

// errNoDNS is what a lookup fails with on a stack without Options.DNS.
var errNoDNS = errors.New("no DNS servers: set stack.Options.DNS, or dial an address")

// resolver is the stack's DNS client: Go's own resolver, whose
// connections to the name servers go through this stack to the servers
// of Options.DNS.
//
// Go's resolver dials each server of the host's resolv.conf in turn; it
// cannot be given servers of its own, only a Dial. So Dial ignores the
// address it is asked for and connects to the current server of ours,
// first the first; a server that fails (cannot be reached, or lets a
// query time out) makes the next one current, so that one dead server
// costs one attempt rather than every lookup's first.
type resolver struct {
	st      *Stack
	servers []netip.Addr
	cur     atomic.Uint32 // servers[cur % len] is asked first
	r       *net.Resolver
}

func newResolver(st *Stack, servers []netip.Addr) *resolver {
	r := &resolver{st: st}
	for _, a := range servers {
		r.servers = append(r.servers, a.Unmap())
	}
	r.r = &net.Resolver{PreferGo: true, Dial: r.dial}
	return r
}

// Resolver returns the stack's resolver: Go's pure-Go DNS client asking
// the servers of Options.DNS (on DNSPort, over UDP and, for answers too
// large for a datagram, TCP) through this stack. It is what DialContext,
// Listen and ListenPacket use for host names, and it is safe for
// concurrent use.
//
// Only the servers are the stack's: Go's resolver still answers from the
// host's /etc/hosts first (so "localhost" is the host's 127.0.0.1), and
// still applies the search list, ndots, timeout and attempts of the
// host's /etc/resolv.conf. A stack without Options.DNS fails every
// lookup of a name not in /etc/hosts.
func (s *Stack) Resolver() *net.Resolver { return s.dns.r }

// dial is the net.Resolver's Dial. network is "udp" or "tcp"; the
// address, a server of the host's resolv.conf, is not ours to use. A
// server that cannot be dialed (no route, TCP refused) is skipped at
// once for the next.
func (r *resolver) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	if len(r.servers) == 0 {
		return nil, errNoDNS
	}
	var first error
	for range r.servers {
		c, err := r.dialCurrent(ctx, network)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// dialCurrent dials the current server; if that fails, the next server
// becomes current.
func (r *resolver) dialCurrent(ctx context.Context, network string) (net.Conn, error) {
	i := r.cur.Load()
	server := netip.AddrPortFrom(r.servers[int(i%uint32(len(r.servers)))], DNSPort)
	fail := func() { r.cur.CompareAndSwap(i, i+1) }
	switch network {
	case "udp", "udp4", "udp6":
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := r.st.DialUDP(netip.AddrPort{}, server)
		if err != nil {
			fail()
			return nil, err
		}
		// Go's resolver frames by datagram only if the conn is a
		// net.PacketConn, so the wrapper must stay one.
		pc := &dnsPacketConn{udpConn: c.(udpConn)}
		pc.watch = newDNSWatch(ctx, pc.udpConn, fail)
		return pc, nil
	case "tcp", "tcp4", "tcp6":
		c, err := r.st.DialTCP(ctx, server)
		if err != nil {
			if ctx.Err() == nil {
				fail()
			}
			return nil, err
		}
		sc := &dnsStreamConn{Conn: c}
		sc.watch = newDNSWatch(ctx, c, fail)
		return sc, nil
	}
	return nil, fmt.Errorf("DNS over %q: the resolver asks over udp or tcp", network)
}

// dnsWatch counts an exchange with a name server as failed when it
// ends without an answer: a read that reaches the deadline Go's resolver
// sets (its per-attempt timeout), or a lookup abandoned while the conn
// was still open (its context ended first: Go's resolver then leaves the
// exchange waiting out its own timeout in the background, so the watch
// also closes the conn, freeing it at once).
type dnsWatch struct {
	fail func()
	stop func() bool // stops the context watch; false if it ran
}

func newDNSWatch(ctx context.Context, c net.Conn, fail func()) dnsWatch {
	return dnsWatch{fail: fail, stop: context.AfterFunc(ctx, func() {
		fail()
		c.Close()
	})}
}

// read passes on a read's result, noting a timeout.
func (w dnsWatch) read(n int, err error) (int, error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		w.fail()
	}
	return n, err
}

// dnsPacketConn is a UDP conn to a name server, watched.
type dnsPacketConn struct {
	udpConn
	watch dnsWatch
}

// Read implements net.Conn.
func (c *dnsPacketConn) Read(b []byte) (int, error) { return c.watch.read(c.udpConn.Read(b)) }

// Close implements net.Conn.
func (c *dnsPacketConn) Close() error {
	c.watch.stop()
	return c.udpConn.Close()
}

// dnsStreamConn is a TCP conn to a name server, watched.
type dnsStreamConn struct {
	net.Conn
	watch dnsWatch
}

// Read implements net.Conn.
func (c *dnsStreamConn) Read(b []byte) (int, error) { return c.watch.read(c.Conn.Read(b)) }

// Close implements net.Conn.
func (c *dnsStreamConn) Close() error {
	c.watch.stop()
	return c.Conn.Close()
}

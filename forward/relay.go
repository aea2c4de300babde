package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/net/proxy"
)

// PacketListener is what a dialer also implements to carry UDP for
// Relay: an unconnected socket on the far side, so a flow keeps one
// mapping to every destination (full cone). net.ListenConfig has this
// method. A dialer qualifies too with the methods of a userspace
// network, such as wireguard-go's tun/netstack.Net or wgnet.Net:
// ListenUDPAddrPort(netip.AddrPort) or ListenUDP(*net.UDPAddr),
// returning any net.PacketConn and an error (no interface can name their
// concrete results, so Relay finds them by name). Relay uses host sockets
// directly when the dialer is a *net.Dialer.
type PacketListener interface {
	ListenPacket(ctx context.Context, network, address string) (net.PacketConn, error)
}

// Relay returns a Handler that dials each flow's destination (as the
// Policy maps it) with d and relays: &net.Dialer{} for host sockets, a
// SOCKS5 dialer for a proxy. A nil p is the zero Policy. TCP is accepted
// only once the upstream connection is up, so a refused destination is a
// reset to the peer, as from the real one. UDP goes through host sockets
// when d is a *net.Dialer, through d's packet sockets when it has them
// (PacketListener), and is refused (Unsupported) otherwise; ICMP echo
// goes to the host's ICMP sockets when d is a *net.Dialer (and the
// process may open them: Forwarder.OpenPing says), to d's echo sockets
// when it has them (PingListener), and is refused otherwise. Every host socket
// Relay opens, for TCP, UDP, pings and DNS over TCP alike, is opened as d
// opens its own: with d's Control (or ControlContext) and bound to the
// address of d's LocalAddr, so that marks (SO_MARK) and bindings
// (SO_BINDTODEVICE) a VPN client sets keep all of them out of its tunnel.
// A Relay serves one Forwarder.
func Relay(d proxy.ContextDialer, p *Policy) Handler {
	r := &relay{d: d}
	if p != nil {
		r.pol = *p
	}
	if r.host, _ = d.(*net.Dialer); r.host == nil {
		r.pl = packetListener(d)
		r.pinger, _ = d.(PingListener)
	}
	r.ping.init(r)
	return r
}

type relay struct {
	d      proxy.ContextDialer
	pol    Policy
	host   *net.Dialer    // d, when it makes host sockets
	pl     PacketListener // d's packet sockets, if it has them and no host ones
	pinger PingListener   // d's echo sockets, if it has them and no host ones
	ping   pingRelay
}

var _ PingHandler = (*relay)(nil)

// HandleTCP implements Handler: dial first, then complete the peer's
// handshake.
func (r *relay) HandleTCP(req *TCPRequest) {
	f := req.f
	to, dns, reason, ok := r.pol.target(req.Dst())
	if !ok {
		req.reject(reason, true)
		return
	}
	up, err := r.d.DialContext(req.Context(), "tcp", to.String())
	if err != nil {
		// A dial cancelled with its request (refused by a limit
		// meanwhile, or the Forwarder closing) did not fail.
		if req.Context().Err() == nil {
			f.c.connectFailed.Add(1)
		}
		req.reject(-1, true)
		return
	}
	c, err := req.Accept()
	if err != nil {
		// The peer gave up on the handshake meanwhile.
		if tc, ok := up.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		up.Close()
		return
	}
	if dns.IsValid() {
		f.c.dns.Add(1)
	}
	// A host socket is relayed by runners started only while data is
	// ready (hostSplice), so this goroutine ends here and an idle flow
	// holds none; other conns are copied in it.
	if _, parked := parkSplice(c, up, false); !parked {
		copySplice(c, up)
	}
}

// Splice relays between c, a conn from TCPRequest.Accept or
// Forwarder.DialTCP, and other until both directions have ended, passing
// half-closes and resets across, then closes both; it blocks until then.
// With other a host socket (*net.TCPConn) it copies without a buffer of
// its own (see the package doc), in goroutines started only while data
// is ready, and waits; otherwise it copies through one, in this
// goroutine and one more. A caller that must not hold a goroutine per
// flow uses SpliceAsync.
func Splice(c, other net.Conn) error {
	if finished, parked := parkSplice(c, other, true); parked {
		<-finished
		return nil
	}
	return copySplice(c, other)
}

// SpliceAsync is Splice for callers that relay many long-lived flows,
// such as a sandbox's port forwards, and must not hold a goroutine per
// flow: it relays between c, a conn from TCPRequest.Accept or
// Forwarder.DialTCP, and other as Splice does, but the relay belongs to
// c's Forwarder from then on, not to the caller: Close aborts it (with
// resets where the conns can carry them), Shutdown waits for it, and
// done is closed once it has ended and closed both conns. With other a
// host socket (*net.TCPConn) an idle flow holds no goroutine: the calling
// goroutine carries what other sends to c until other has been silent
// for the relay's linger (tens of milliseconds) or the flow ends, as
// Relay's handler does, and SpliceAsync returns then; other conns are
// copied in two goroutines of the Forwarder's, and SpliceAsync returns at
// once. SpliceAsync takes both conns over whatever it returns: an error
// means they were reset at once (c is not a conn of a Forwarder's, or the
// Forwarder is closed).
func SpliceAsync(c, other net.Conn) (done <-chan struct{}, err error) {
	fc, ok := c.(*conn)
	if !ok {
		resetConn(c)
		resetConn(other)
		return nil, fmt.Errorf("forward: SpliceAsync: %T is not a conn of a Forwarder's: pass one from TCPRequest.Accept or Forwarder.DialTCP, or use Splice", c)
	}
	if finished, parked := parkSplice(c, other, true); parked {
		return finished, nil
	}
	f := fc.fl.f
	if !f.own() {
		resetConn(c)
		resetConn(other)
		return nil, errors.New("forward: SpliceAsync: the Forwarder is closed")
	}
	ch := make(chan struct{})
	go func() {
		defer f.wg.Done()
		defer close(ch)
		copySplice(c, other)
	}()
	return ch, nil
}

// own registers a goroutine of the Forwarder's that carries a flow
// already open (SpliceAsync's copy), or reports that Close has begun and
// is past its last chance to abort the flow: unlike begin, it still
// succeeds while Shutdown lets flows finish.
func (f *Forwarder) own() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == closed {
		return false
	}
	f.wg.Add(1)
	return true
}

// parkSplice relays between c and other with hostSplice, if they are a
// stack conn and a host socket and the host socket can be polled: the
// relay Relay, Splice and SpliceAsync share, so that every flow of that
// shape parks when idle. false means nothing was done (copy instead).
func parkSplice(c, other net.Conn, wait bool) (<-chan struct{}, bool) {
	fc, ok := c.(*conn)
	if !ok {
		return nil, false
	}
	h, ok := other.(*net.TCPConn)
	if !ok {
		return nil, false
	}
	return hostSplice(fc, h, wait)
}

// copySplice relays through io.Copy in each direction: this goroutine
// and one it starts and joins.
func copySplice(a, b net.Conn) error {
	var once sync.Once
	abort := func() {
		once.Do(func() {
			resetConn(a)
			resetConn(b)
		})
	}
	if fc, ok := a.(*conn); ok {
		fc.fl.setAbort(fc.ep, abort)
	}
	pump := func(dst, src net.Conn) error {
		_, err := io.Copy(dst, src)
		if err != nil {
			abort()
			return err
		}
		// Pass the half-close on; a conn that cannot half-close ends
		// when the other direction does.
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- pump(b, a) }()
	err := pump(a, b)
	err = errors.Join(err, <-errc)
	a.Close()
	b.Close()
	return err
}

// resetConn ends a conn at once, with a reset where it can.
func resetConn(c net.Conn) {
	switch cc := c.(type) {
	case *net.TCPConn:
		cc.SetLinger(0)
	case *conn:
		cc.ep.Abort()
	}
	c.Close()
}

// HandleUDP implements Handler.
func (r *relay) HandleUDP(u *UDPFlow) {
	switch {
	case r.pol.NoUDP:
	case r.host != nil:
		if !hostUDP(r, u) {
			u.refuseFlow(HostError)
		}
		return
	case r.pl != nil:
		r.packetUDP(u, r.pl)
		return
	}
	r.tcpDNS(u)
}

// packetUDP relays a flow through a dialer's packet conn: datagrams to
// the far side in this goroutine, replies in one it starts and joins.
func (r *relay) packetUDP(u *UDPFlow, pl PacketListener) {
	f := u.f
	network := "udp4"
	if u.src.Addr().Is6() {
		network = "udp6"
	}
	pc, err := pl.ListenPacket(f.ctx, network, "")
	if err != nil {
		u.refuseFlow(HostError)
		return
	}
	u.atClose(func() { pc.Close() })
	var dnsMu sync.Mutex
	var viaDNS netip.Addr
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1<<16)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				u.Close()
				return
			}
			ua, ok := from.(*net.UDPAddr)
			if !ok {
				continue
			}
			dnsMu.Lock()
			via := viaDNS
			dnsMu.Unlock()
			src, reason, ok := r.pol.source(ua.AddrPort(), via, u.src.Addr().Is6())
			if !ok || src.Addr().Is4() != u.src.Addr().Is4() {
				f.refuse(reason)
				continue
			}
			u.WriteToAddrPort(buf[:n], src)
		}
	}()
	buf := make([]byte, 1<<16)
	for {
		n, dst, err := u.ReadFromAddrPort(buf)
		if err != nil {
			break
		}
		to, dns, reason, ok := r.pol.target(dst)
		if !ok {
			u.refuseDatagram(reason, buf[:n], dst)
			continue
		}
		if dns.IsValid() {
			dnsMu.Lock()
			viaDNS = dns
			dnsMu.Unlock()
			f.c.dns.Add(1)
		}
		if _, err := pc.WriteTo(buf[:n], net.UDPAddrFromAddrPort(to)); err != nil {
			f.c.udpDropped.Add(1)
		}
	}
	pc.Close()
	<-done
}

// HandlePing implements PingHandler: echo requests go to the host's ICMP
// sockets when the dialer makes host sockets.
func (r *relay) HandlePing(req *PingRequest) {
	f := req.f
	if reason, ok := r.pol.allowed(req.Dst()); !ok {
		f.refuse(reason)
		return
	}
	if r.host == nil && r.pinger == nil {
		f.refuse(Unsupported)
		return
	}
	r.ping.send(req)
}

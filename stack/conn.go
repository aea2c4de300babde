package stack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/ustack-dev/ustack/sched"
)

// ListenBacklog is the accept queue length of ListenTCP: 4096 is Linux's
// default net.core.somaxconn since 5.4, which Go's net uses as its backlog.
const ListenBacklog = 4096

func opError(op, network string, addr netip.AddrPort, err error) *net.OpError {
	var a net.Addr
	if addr.IsValid() {
		if network == "udp" {
			a = net.UDPAddrFromAddrPort(addr)
		} else {
			a = net.TCPAddrFromAddrPort(addr)
		}
	}
	return &net.OpError{Op: op, Net: network, Addr: a, Err: err}
}

func fullAddress(ap netip.AddrPort) tcpip.FullAddress {
	fa := tcpip.FullAddress{Port: ap.Port()}
	if a := ap.Addr().Unmap(); !a.IsUnspecified() {
		fa.Addr = toTCPIP(a)
	}
	return fa
}

// TCPConn is a TCP connection of the stack: a net.Conn that can also shut
// one direction down, as *net.TCPConn can. Every TCP conn that this
// package, package forward and package wgnet hand out is one, so a
// caller needs no type assertion for a half-close.
type TCPConn interface {
	net.Conn
	// CloseRead shuts the reading side down: reads return io.EOF.
	CloseRead() error
	// CloseWrite shuts the writing side down: the peer reads EOF (FIN)
	// after what was written.
	CloseWrite() error
}

var _ TCPConn = (*tcpConn)(nil)

// DialTCP connects to addr. Errors are *net.OpError, their Err translated
// by TranslateError.
func (s *Stack) DialTCP(ctx context.Context, addr netip.AddrPort) (TCPConn, error) {
	wq, ep, err := s.ConnectTCP(ctx, addr)
	if err != nil {
		return nil, err
	}
	return s.NewTCPConn(wq, ep), nil
}

// ConnectTCP connects a new TCP endpoint of the stack to addr, as DialTCP
// does, and returns the connected endpoint and its waiter queue rather
// than a conn: for code that drives the endpoint itself (package forward
// splices it into host sockets) and makes a conn of it only if it needs
// one (NewTCPConn). The caller owns ep. Errors are DialTCP's.
func (s *Stack) ConnectTCP(ctx context.Context, addr netip.AddrPort) (*waiter.Queue, tcpip.Endpoint, error) {
	if !addr.IsValid() || addr.Addr().Unmap().IsUnspecified() || addr.Port() == 0 {
		return nil, nil, opError("dial", "tcp", addr, errors.New("need a specified address and a non-zero port"))
	}
	if err := s.live(); err != nil {
		return nil, nil, opError("dial", "tcp", addr, err)
	}
	wq := new(waiter.Queue)
	ep, terr := s.s.NewEndpoint(tcp.ProtocolNumber, protocolOf(addr.Addr()), wq)
	if terr != nil {
		return nil, nil, opError("dial", "tcp", addr, TranslateError(terr))
	}
	entry, ready := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	terr = ep.Connect(fullAddress(addr))
	if _, started := terr.(*tcpip.ErrConnectStarted); started {
		select {
		case <-ctx.Done():
			ep.Close()
			return nil, nil, opError("dial", "tcp", addr, ctx.Err())
		case <-ready:
		}
		terr = ep.LastError()
	}
	if terr != nil {
		ep.Close()
		return nil, nil, opError("dial", "tcp", addr, TranslateError(terr))
	}
	return wq, ep, nil
}

// ListenTCP listens on addr; an unspecified address listens on all of the
// stack's addresses of that IP version (for [::], of both versions). The
// listener also has SetDeadline(time.Time) error, as *net.TCPListener
// does, which bounds Accept.
func (s *Stack) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	if !addr.IsValid() {
		return nil, opError("listen", "tcp", addr, errors.New("no address given"))
	}
	if err := s.live(); err != nil {
		return nil, opError("listen", "tcp", addr, err)
	}
	var wq waiter.Queue
	ep, terr := s.s.NewEndpoint(tcp.ProtocolNumber, protocolOf(addr.Addr()), &wq)
	if terr != nil {
		return nil, opError("listen", "tcp", addr, TranslateError(terr))
	}
	if terr := ep.Bind(fullAddress(addr)); terr != nil {
		ep.Close()
		return nil, opError("listen", "tcp", addr, TranslateError(terr))
	}
	if terr := ep.Listen(ListenBacklog); terr != nil {
		ep.Close()
		return nil, opError("listen", "tcp", addr, TranslateError(terr))
	}
	return newTCPListener(&wq, ep, s.poller, s.cache), nil
}

// DialUDP returns a UDP socket bound to laddr (any address and port if
// laddr is the zero value) and connected to raddr. The returned conn is
// also a net.PacketConn.
func (s *Stack) DialUDP(laddr, raddr netip.AddrPort) (net.Conn, error) {
	if !raddr.IsValid() || raddr.Addr().Unmap().IsUnspecified() || raddr.Port() == 0 {
		return nil, opError("dial", "udp", raddr, errors.New("need a specified address and a non-zero port"))
	}
	if laddr.IsValid() && laddr.Addr().Unmap().Is4() != raddr.Addr().Unmap().Is4() {
		return nil, opError("dial", "udp", raddr, fmt.Errorf("local address %v is of another IP version", laddr))
	}
	return s.udp("dial", laddr, raddr, protocolOf(raddr.Addr()))
}

// ListenUDP returns an unconnected UDP socket bound to laddr.
func (s *Stack) ListenUDP(laddr netip.AddrPort) (net.PacketConn, error) {
	if !laddr.IsValid() {
		return nil, opError("listen", "udp", laddr, errors.New("no address given"))
	}
	return s.udp("listen", laddr, netip.AddrPort{}, protocolOf(laddr.Addr()))
}

func (s *Stack) udp(op string, laddr, raddr netip.AddrPort, proto tcpip.NetworkProtocolNumber) (udpConn, error) {
	if err := s.live(); err != nil {
		return nil, opError(op, "udp", laddr, err)
	}
	var wq waiter.Queue
	ep, terr := s.s.NewEndpoint(udp.ProtocolNumber, proto, &wq)
	if terr != nil {
		return nil, opError(op, "udp", laddr, TranslateError(terr))
	}
	if s.udpRecvErr {
		setRecvErr(ep)
	}
	if laddr.IsValid() {
		if terr := ep.Bind(fullAddress(laddr)); terr != nil {
			ep.Close()
			return nil, opError(op, "udp", laddr, TranslateError(terr))
		}
	}
	if raddr.IsValid() {
		if terr := ep.Connect(fullAddress(raddr)); terr != nil {
			ep.Close()
			return nil, opError(op, "udp", raddr, TranslateError(terr))
		}
	}
	u := &udpSocket{}
	u.init("udp", ep, &wq, s.poller, s.cache)
	u.recvErr.Store(s.udpRecvErr)
	if s.udpWait > 0 {
		u.room = &roomWait{st: s, wait: s.udpWait, report: s.udpRecvErr, proto: proto}
	}
	return u, nil
}

// setRecvErr sets IP_RECVERR and IPV6_RECVERR on ep: the way gVisor tells
// a writer that the NIC refused its datagram (without it the refusal is
// swallowed, as in Linux), and queues ICMP errors on the socket.
func setRecvErr(ep tcpip.Endpoint) {
	ep.SocketOptions().SetIPv4RecvError(true)
	ep.SocketOptions().SetIPv6RecvError(true)
}

// roomFor returns the room signal (sched.RoomNotifier) of the qdisc of the
// NIC that a datagram from local to remote leaves by, or nil if there is
// no route or that qdisc cannot signal room (gVisor's none and fifo).
func (s *Stack) roomFor(local tcpip.FullAddress, remote tcpip.FullAddress, proto tcpip.NetworkProtocolNumber) sched.RoomNotifier {
	nicID := remote.NIC
	if nicID == 0 {
		nicID = local.NIC
	}
	r, terr := s.s.FindRoute(nicID, local.Addr, remote.Addr, proto, false)
	if terr != nil {
		return nil
	}
	nicID = r.OutgoingNIC()
	r.Release()
	var qd gstack.QueueingDiscipline
	s.mu.Lock()
	for _, n := range s.nics {
		if n.id == nicID {
			qd = n.qd
		}
	}
	s.mu.Unlock()
	rn, _ := qd.(sched.RoomNotifier)
	return rn
}

// udpConn is what DialUDP and ListenUDP return: a net.Conn that is also a
// net.PacketConn.
type udpConn interface {
	net.Conn
	net.PacketConn
}

// Ping sends one ICMP echo request with payload to dst and waits for the
// matching reply or for ctx to end. It returns the round-trip time. It
// uses the ICMP echo socket that ListenPacket gives for "ip4:icmp" and
// "ip6:ipv6-icmp".
func (s *Stack) Ping(ctx context.Context, dst netip.Addr, payload []byte) (time.Duration, error) {
	dst = dst.Unmap()
	if !dst.IsValid() || dst.IsUnspecified() {
		return 0, &net.OpError{Op: "ping", Net: "ip", Err: errors.New("need a specified address")}
	}
	target := &net.IPAddr{IP: dst.AsSlice()}
	fail := func(err error) (time.Duration, error) {
		if ctx.Err() != nil {
			err = ctx.Err() // the deadline Ping set for it, or a cancellation
		} else if op, ok := err.(*net.OpError); ok {
			err = op.Err
		}
		return 0, &net.OpError{Op: "ping", Net: "ip", Addr: target, Err: err}
	}
	network := "ip4:icmp"
	echo, reply := uint8(header.ICMPv4Echo), uint8(header.ICMPv4EchoReply)
	if dst.Is6() {
		network = "ip6:ipv6-icmp"
		echo, reply = uint8(header.ICMPv6EchoRequest), uint8(header.ICMPv6EchoReply)
	}
	c, err := s.newPing(network, dst.Is6())
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	// ctx's end is a read deadline in the past, as Go's net turns a
	// dial's context into a deadline.
	ended := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(ended)
		c.SetReadDeadline(time.Unix(1, 0))
	})
	defer func() {
		if !stop() {
			<-ended
		}
	}()

	// The endpoint fills in the identifier (its port) and the checksum;
	// the sequence number tells our reply from stale ones.
	const seq = 1
	msg := make([]byte, header.ICMPv4MinimumSize+len(payload))
	msg[0] = echo
	binary.BigEndian.PutUint16(msg[6:], seq)
	copy(msg[header.ICMPv4MinimumSize:], payload)
	start := time.Now()
	if _, err := c.WriteTo(msg, target); err != nil {
		return fail(err)
	}
	buf := make([]byte, len(msg)+64)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return fail(err)
		}
		got := buf[:n]
		if len(got) >= header.ICMPv4MinimumSize && got[0] == reply &&
			binary.BigEndian.Uint16(got[6:]) == seq && string(got[header.ICMPv4MinimumSize:]) == string(payload) {
			return time.Since(start), nil
		}
	}
}

package wgnet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// PingAddr is the address of a ping socket: an IP address whose network
// is "ping4" or "ping6". It is wireguard-go netstack's PingAddr.
type PingAddr struct{ addr netip.Addr }

// PingAddrFromAddr returns the PingAddr of addr.
func PingAddrFromAddr(addr netip.Addr) *PingAddr { return &PingAddr{addr} }

// String implements net.Addr.
func (a PingAddr) String() string { return a.addr.String() }

// Network implements net.Addr.
func (a PingAddr) Network() string {
	switch {
	case a.addr.Is4():
		return "ping4"
	case a.addr.Is6():
		return "ping6"
	}
	return "ping"
}

// Addr returns the IP address.
func (a PingAddr) Addr() netip.Addr { return a.addr }

// PingConn is an ICMP echo socket through the stack (an unprivileged
// ping socket, as Linux's SOCK_DGRAM IPPROTO_ICMP): what it writes is an
// ICMP message whose identifier and checksum the stack fills in, and what
// it reads are the echo replies addressed to it. It is a net.Conn and a
// net.PacketConn, safe for concurrent use.
type PingConn struct {
	laddr, raddr PingAddr
	ep           tcpip.Endpoint
	wq           waiter.Queue

	mu            sync.Mutex // guards the deadlines
	readDeadline  time.Time
	writeDeadline time.Time
	deadlineMoved chan struct{} // closed and replaced when a deadline changes

	closeOnce sync.Once
	done      chan struct{}
}

var (
	_ net.Conn       = (*PingConn)(nil)
	_ net.PacketConn = (*PingConn)(nil)
)

// DialPingAddr returns a ping socket bound to laddr (if valid) and
// connected to raddr (if valid); at least one must be.
func (n *Net) DialPingAddr(laddr, raddr netip.Addr) (*PingConn, error) {
	laddr, raddr = laddr.Unmap(), raddr.Unmap()
	if !laddr.IsValid() && !raddr.IsValid() {
		return nil, errors.New("wgnet: ping dial: give a local or a remote address")
	}
	if laddr.IsValid() && raddr.IsValid() && laddr.Is4() != raddr.Is4() {
		return nil, fmt.Errorf("wgnet: ping dial: %v and %v are of different IP versions", laddr, raddr)
	}
	v6 := laddr.Is6() || raddr.Is6()
	tp, np := icmp.ProtocolNumber4, ipv4.ProtocolNumber
	if v6 {
		tp, np = icmp.ProtocolNumber6, ipv6.ProtocolNumber
	}
	pc := &PingConn{laddr: PingAddr{laddr}, raddr: PingAddr{raddr}, deadlineMoved: make(chan struct{}), done: make(chan struct{})}
	if !laddr.IsValid() {
		pc.laddr.addr = netip.IPv4Unspecified()
		if v6 {
			pc.laddr.addr = netip.IPv6Unspecified()
		}
	}
	ep, terr := n.s.GVisor().NewEndpoint(tp, np, &pc.wq)
	if terr != nil {
		return nil, fmt.Errorf("wgnet: ping socket: %s", terr)
	}
	pc.ep = ep
	if laddr.IsValid() {
		if terr := ep.Bind(tcpip.FullAddress{Addr: tcpip.AddrFromSlice(laddr.AsSlice())}); terr != nil {
			ep.Close()
			return nil, fmt.Errorf("wgnet: ping bind %v: %s", laddr, terr)
		}
	}
	if raddr.IsValid() {
		if terr := ep.Connect(tcpip.FullAddress{Addr: tcpip.AddrFromSlice(raddr.AsSlice())}); terr != nil {
			ep.Close()
			return nil, fmt.Errorf("wgnet: ping connect %v: %s", raddr, terr)
		}
	}
	return pc, nil
}

// ListenPingAddr returns an unconnected ping socket bound to laddr.
func (n *Net) ListenPingAddr(laddr netip.Addr) (*PingConn, error) {
	return n.DialPingAddr(laddr, netip.Addr{})
}

// DialPing is DialPingAddr with *PingAddr arguments, either nil.
func (n *Net) DialPing(laddr, raddr *PingAddr) (*PingConn, error) {
	var la, ra netip.Addr
	if laddr != nil {
		la = laddr.addr
	}
	if raddr != nil {
		ra = raddr.addr
	}
	return n.DialPingAddr(la, ra)
}

// ListenPing is ListenPingAddr with a *PingAddr (nil is not allowed: a
// ping socket needs an IP version).
func (n *Net) ListenPing(laddr *PingAddr) (*PingConn, error) {
	var la netip.Addr
	if laddr != nil {
		la = laddr.addr
	}
	return n.ListenPingAddr(la)
}

// LocalAddr implements net.Conn.
func (pc *PingConn) LocalAddr() net.Addr { return pc.laddr }

// RemoteAddr implements net.Conn.
func (pc *PingConn) RemoteAddr() net.Addr { return pc.raddr }

// Close implements net.Conn; it wakes a blocked read.
func (pc *PingConn) Close() error {
	pc.closeOnce.Do(func() {
		close(pc.done)
		pc.ep.Close()
	})
	return nil
}

// SetDeadline implements net.Conn.
func (pc *PingConn) SetDeadline(t time.Time) error {
	pc.setDeadlines(t, true, true)
	return nil
}

// SetReadDeadline implements net.Conn.
func (pc *PingConn) SetReadDeadline(t time.Time) error {
	pc.setDeadlines(t, true, false)
	return nil
}

// SetWriteDeadline implements net.Conn. A write never waits (the stack
// queues or refuses at once), so only a deadline already past fails it.
func (pc *PingConn) SetWriteDeadline(t time.Time) error {
	pc.setDeadlines(t, false, true)
	return nil
}

func (pc *PingConn) setDeadlines(t time.Time, read, write bool) {
	pc.mu.Lock()
	if read {
		pc.readDeadline = t
	}
	if write {
		pc.writeDeadline = t
	}
	close(pc.deadlineMoved)
	pc.deadlineMoved = make(chan struct{})
	pc.mu.Unlock()
}

func (pc *PingConn) opError(op string, addr net.Addr, err error) error {
	return &net.OpError{Op: op, Net: pc.laddr.Network(), Source: pc.laddr, Addr: addr, Err: err}
}

// WriteTo implements net.PacketConn: p is an ICMP message (an echo
// request, typically) sent to addr, a *PingAddr or *net.IPAddr of the
// socket's IP version.
func (pc *PingConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	var na netip.Addr
	switch v := addr.(type) {
	case *PingAddr:
		na = v.addr
	case PingAddr:
		na = v.addr
	case *net.IPAddr:
		na, _ = netip.AddrFromSlice(v.IP)
	default:
		return 0, pc.opError("write", addr, fmt.Errorf("address of type %T: use a *PingAddr or *net.IPAddr", addr))
	}
	na = na.Unmap()
	if na.Is4() != pc.laddr.addr.Is4() {
		return 0, pc.opError("write", addr, errors.New("address of the other IP version than the socket's"))
	}
	pc.mu.Lock()
	wd := pc.writeDeadline
	pc.mu.Unlock()
	if !wd.IsZero() && !time.Now().Before(wd) {
		return 0, pc.opError("write", addr, os.ErrDeadlineExceeded)
	}
	to := tcpip.FullAddress{Addr: tcpip.AddrFromSlice(na.AsSlice())}
	n, terr := pc.ep.Write(bytes.NewReader(p), tcpip.WriteOptions{To: &to})
	if terr != nil {
		return int(n), pc.opError("write", addr, errors.New(terr.String()))
	}
	return int(n), nil
}

// Write implements net.Conn: it sends p to the connected address.
func (pc *PingConn) Write(p []byte) (int, error) { return pc.WriteTo(p, &pc.raddr) }

// ReadFrom implements net.PacketConn: it waits for an ICMP message, until
// the read deadline or Close.
func (pc *PingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	entry, readable := waiter.NewChannelEntry(waiter.ReadableEvents)
	pc.wq.EventRegister(&entry)
	defer pc.wq.EventUnregister(&entry)
	for {
		w := tcpip.SliceWriter(p)
		res, terr := pc.ep.Read(&w, tcpip.ReadOptions{NeedRemoteAddr: true})
		if terr == nil {
			ra, _ := netip.AddrFromSlice(res.RemoteAddr.Addr.AsSlice())
			return res.Count, &PingAddr{ra}, nil
		}
		if _, wait := terr.(*tcpip.ErrWouldBlock); !wait {
			select {
			case <-pc.done:
				return 0, nil, pc.opError("read", nil, net.ErrClosed)
			default:
			}
			return 0, nil, pc.opError("read", nil, errors.New(terr.String()))
		}
		pc.mu.Lock()
		rd, moved := pc.readDeadline, pc.deadlineMoved
		pc.mu.Unlock()
		if err := pc.wait(readable, moved, rd); err != nil {
			return 0, nil, pc.opError("read", nil, err)
		}
	}
}

// wait blocks until the socket may be readable, the deadline moved, the
// deadline rd passed or Close.
func (pc *PingConn) wait(readable <-chan struct{}, moved chan struct{}, rd time.Time) error {
	var expired <-chan time.Time
	if !rd.IsZero() {
		d := time.Until(rd)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-readable:
	case <-moved:
	case <-expired:
		return os.ErrDeadlineExceeded
	case <-pc.done:
		return net.ErrClosed
	}
	return nil
}

// Read implements net.Conn.
func (pc *PingConn) Read(p []byte) (int, error) {
	n, _, err := pc.ReadFrom(p)
	return n, err
}

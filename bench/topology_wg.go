package bench

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/netstack"
	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/wgnet"
	"github.com/ustack-dev/ustack/wgnet/wgnettest"
)

// The WireGuard links: two wireguard-go devices in this process, peers of
// each other over in-memory binds (wgnettest.Pair), with a netstack
// behind each device's TUN.
const (
	// LinkWG puts ustack behind both devices (package wgnet), with the
	// cell's qdisc, busy polling and cache.
	LinkWG = "wg"
	// LinkWGNetstack puts wireguard-go's own tun/netstack behind both:
	// gVisor on a channel endpoint with no qdisc, the baseline LinkWG is
	// compared with. Its qdisc column is sched.None and its cache "-".
	LinkWGNetstack = "wg-netstack"
)

// wgOverhead is what WireGuard adds to each packet it carries over IPv6:
// 40 (IPv6) + 8 (UDP) + 32 (WireGuard header and tag). The TUNs get the
// link MTU less this, as wireguard-go's default MTU, 1420, is 1500 less it.
const wgOverhead = 80

func isWG(l string) bool { return l == LinkWG || l == LinkWGNetstack }

// wgHost is a host made of a netstack's dial and listen functions, as
// both wgnet.Net and wireguard-go's netstack.Net have them.
type wgHost struct {
	dialTCP   func(ctx context.Context, addr netip.AddrPort) (stack.TCPConn, error)
	listenTCP func(addr netip.AddrPort) (net.Listener, error)
	dialUDP   func(laddr, raddr netip.AddrPort) (net.Conn, error)
	listenUDP func(laddr netip.AddrPort) (net.PacketConn, error)
}

var _ host = wgHost{}

func (h wgHost) DialTCP(ctx context.Context, addr netip.AddrPort) (stack.TCPConn, error) {
	return h.dialTCP(ctx, addr)
}
func (h wgHost) ListenTCP(addr netip.AddrPort) (net.Listener, error) { return h.listenTCP(addr) }
func (h wgHost) DialUDP(laddr, raddr netip.AddrPort) (net.Conn, error) {
	return h.dialUDP(laddr, raddr)
}
func (h wgHost) ListenUDP(laddr netip.AddrPort) (net.PacketConn, error) { return h.listenUDP(laddr) }

// iface returns v as an I, and a nil I (not one holding a nil pointer)
// with err.
func iface[I any, T any](v T, err error) (I, error) {
	var zero I
	if err != nil {
		return zero, err
	}
	return any(v).(I), nil
}

func wgnetHost(n *wgnet.Net) wgHost {
	return wgHost{
		dialTCP: func(ctx context.Context, a netip.AddrPort) (stack.TCPConn, error) {
			return iface[stack.TCPConn](n.DialContextTCPAddrPort(ctx, a))
		},
		listenTCP: func(a netip.AddrPort) (net.Listener, error) { return iface[net.Listener](n.ListenTCPAddrPort(a)) },
		dialUDP:   func(l, r netip.AddrPort) (net.Conn, error) { return iface[net.Conn](n.DialUDPAddrPort(l, r)) },
		listenUDP: func(l netip.AddrPort) (net.PacketConn, error) { return iface[net.PacketConn](n.ListenUDPAddrPort(l)) },
	}
}

func netstackHost(n *netstack.Net) wgHost {
	return wgHost{
		dialTCP: func(ctx context.Context, a netip.AddrPort) (stack.TCPConn, error) {
			return iface[stack.TCPConn](n.DialContextTCPAddrPort(ctx, a))
		},
		listenTCP: func(a netip.AddrPort) (net.Listener, error) { return iface[net.Listener](n.ListenTCPAddrPort(a)) },
		dialUDP:   func(l, r netip.AddrPort) (net.Conn, error) { return iface[net.Conn](n.DialUDPAddrPort(l, r)) },
		listenUDP: func(l netip.AddrPort) (net.PacketConn, error) { return iface[net.PacketConn](n.ListenUDPAddrPort(l)) },
	}
}

// countingTUN counts the packets crossing a tun.Device that has no
// counters of its own (wireguard-go's netstack): read are those the
// netstack sent (wireguard-go reads them to encrypt), written those
// wireguard-go decrypted and gave the netstack. It is safe for
// concurrent use, as tun.Device is.
type countingTUN struct {
	tun.Device
	read, written atomic.Uint64
}

// Read implements tun.Device, counting the packets read.
func (t *countingTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := t.Device.Read(bufs, sizes, offset)
	t.read.Add(uint64(n))
	return n, err
}

// Write implements tun.Device, counting the packets the device took.
func (t *countingTUN) Write(bufs [][]byte, offset int) (int, error) {
	n, err := t.Device.Write(bufs, offset)
	t.written.Add(uint64(n))
	return n, err
}

// wgTopology builds link wg or wg-netstack: a wireguard-go device for
// each host, joined in memory, the client at memClient and the server at
// memServer.
//
// The wire counters are the TUNs' on both links, so that they mean the
// same: clientTX is the packets the client's netstack sent that
// wireguard-go read from its TUN (for wg, wgnet's endpoint's ReadPackets:
// after cutting TSO super-segments to the MTU); serverRX is the packets
// wireguard-go decrypted and wrote to the server's TUN. wireLost is 0:
// bindtest's channels block rather than drop, and a packet wireguard-go
// drops from its own queues is the netstacks' to recover (TCP) or is a
// loss udp_stream measures end to end.
func wgTopology(c Config) (*topology, error) {
	mtu := c.mtu() - wgOverhead
	addrs := [2]netip.Addr{memClient, memServer}
	var tuns [2]tun.Device
	t := &topology{serverAddr: memServer, wireLost: func() uint64 { return 0 }}
	closeTUNs := func() {
		for _, d := range tuns {
			if d != nil {
				d.Close()
			}
		}
	}
	if c.Link == LinkWG {
		opts := &wgnet.Options{Qdisc: c.Qdisc, QdiscOptions: c.QdiscOptions, BusyPoll: c.BusyPoll, Cache: c.Cache}
		var nets [2]*wgnet.Net
		for i, a := range addrs {
			d, n, err := wgnet.CreateNetTUNWithOptions([]netip.Addr{a}, nil, mtu, opts)
			if err != nil {
				closeTUNs()
				return nil, err
			}
			tuns[i], nets[i] = d, n
		}
		cs, ss := nets[0].Stack(), nets[1].Stack()
		cep, sep := nets[0].Endpoint(), nets[1].Endpoint()
		t.client, t.server = wgnetHost(nets[0]), wgnetHost(nets[1])
		t.clientTX = func() uint64 { return cep.Counters().ReadPackets }
		t.serverRX = func() uint64 { return sep.LinkStats().RXPackets }
		t.qdiscs = func() (*sched.Stats, *sched.Stats) { return qdiscOf(cs, onlyNIC(cs)), qdiscOf(ss, onlyNIC(ss)) }
		t.polls = func() (*poll.Stats, *poll.Stats) { return pollOf(cs), pollOf(ss) }
	} else {
		var counted [2]*countingTUN
		var nets [2]*netstack.Net
		for i, a := range addrs {
			d, n, err := netstack.CreateNetTUN([]netip.Addr{a}, nil, mtu)
			if err != nil {
				closeTUNs()
				return nil, err
			}
			counted[i] = &countingTUN{Device: d}
			tuns[i], nets[i] = counted[i], n
		}
		t.client, t.server = netstackHost(nets[0]), netstackHost(nets[1])
		t.clientTX = counted[0].read.Load
		t.serverRX = counted[1].written.Load
		t.qdiscs = func() (*sched.Stats, *sched.Stats) { return nil, nil }
		t.polls = func() (*poll.Stats, *poll.Stats) { return nil, nil }
	}
	// Pair owns the TUNs from here, and closes them on error.
	devA, devB, err := wgnettest.Pair(tuns[0], tuns[1], addrs[0], addrs[1], nil)
	if err != nil {
		return nil, err
	}
	t.closers = append(t.closers, devA.Close, devB.Close)
	if c.Link == LinkWGNetstack {
		// Runs first: closers run last to first.
		t.closers = append(t.closers, func() { quiesce(tuns) })
	}
	return t, nil
}

// Closing wireguard-go's netstack TUN (netTun.Close) closes the channel its
// stack's WriteNotify sends each outgoing packet on without waiting for a
// send in flight: a data race, and a panic if the send comes after. The
// workload has closed its sockets when the topology closes, but the
// stacks may still be exchanging FINs and ACKs, so wgTopology first waits
// until neither TUN has carried a packet for quietFor, at most quietMax.
// The limits are generous beside an in-process round trip (tens of
// microseconds) and small beside a cell.
const (
	quietFor = 20 * time.Millisecond
	quietMax = time.Second
)

// quiesce waits until the counting TUNs in tuns stop carrying packets
// (see quietFor).
func quiesce(tuns [2]tun.Device) {
	total := func() uint64 {
		var n uint64
		for _, d := range tuns {
			if ct, ok := d.(*countingTUN); ok {
				n += ct.read.Load() + ct.written.Load()
			}
		}
		return n
	}
	deadline := time.Now().Add(quietMax)
	for last := total(); time.Now().Before(deadline); {
		time.Sleep(quietFor)
		now := total()
		if now == last {
			return
		}
		last = now
	}
}

// onlyNIC returns the ID of the stack's one NIC (a wgnet.Net has one).
func onlyNIC(s *stack.Stack) tcpip.NICID {
	for id := range s.GVisor().NICInfo() {
		return id
	}
	return 0
}

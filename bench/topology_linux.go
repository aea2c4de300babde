//go:build linux

package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/netns"
	"github.com/ustack-dev/ustack/link"
	"github.com/ustack-dev/ustack/link/afpacket"
	"github.com/ustack-dev/ustack/link/linkspec"
	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

// Addresses of the device topologies, one /24 each so that a leftover
// namespace of one kind never answers for another.
var (
	vethKernel = netip.MustParsePrefix("198.18.30.1/24")
	vethUstack = netip.MustParsePrefix("198.18.30.2/24")
	tunKernel  = netip.MustParsePrefix("198.18.40.1/24")
	tunUstack  = netip.MustParsePrefix("198.18.40.2/24")
	kvethA     = netip.MustParsePrefix("198.18.50.1/24")
	kvethB     = netip.MustParsePrefix("198.18.50.2/24")
)

var probeOnce = sync.OnceValue(netns.Probe)

// kernelHost is the Linux stack of a namespace, through Go's net: every
// socket is opened inside the namespace and stays in it.
type kernelHost struct{ ns *netns.NS }

func (k kernelHost) DialTCP(ctx context.Context, ap netip.AddrPort) (c stack.TCPConn, err error) {
	err = k.ns.Do(func() error {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			c = nc.(*net.TCPConn)
		}
		return err
	})
	return c, err
}

func (k kernelHost) ListenTCP(ap netip.AddrPort) (l net.Listener, err error) {
	err = k.ns.Do(func() error {
		lc := net.ListenConfig{}
		l, err = lc.Listen(context.Background(), "tcp", ap.String())
		return err
	})
	return l, err
}

func (k kernelHost) DialUDP(laddr, raddr netip.AddrPort) (c net.Conn, err error) {
	err = k.ns.Do(func() error {
		var la *net.UDPAddr
		if laddr.IsValid() {
			la = net.UDPAddrFromAddrPort(laddr)
		}
		c, err = net.DialUDP("udp", la, net.UDPAddrFromAddrPort(raddr))
		return err
	})
	return c, err
}

func (k kernelHost) ListenUDP(ap netip.AddrPort) (pc net.PacketConn, err error) {
	err = k.ns.Do(func() error {
		pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		return err
	})
	return pc, err
}

// ifaceCounter reads a kernel interface's packet counter in ns.
func ifaceCounter(ns *netns.NS, name string, rx bool) func() uint64 {
	return func() uint64 {
		var v uint64
		ns.Do(func() error {
			l, err := netlink.LinkByName(name)
			if err != nil || l.Attrs().Statistics == nil {
				return err
			}
			if rx {
				v = l.Attrs().Statistics.RxPackets
			} else {
				v = l.Attrs().Statistics.TxPackets
			}
			return nil
		})
		return v
	}
}

func zero() uint64 { return 0 }

// deviceTopology builds a veth, tun or kernel-to-kernel veth topology in
// fresh network namespaces, removed again by close.
func deviceTopology(c Config) (*topology, error) {
	if err := probeOnce(); err != nil {
		return nil, fmt.Errorf("link %s: %w", c.Link, err)
	}
	t := &topology{}
	ok := false
	defer func() {
		if !ok {
			t.close()
		}
	}()
	newNS := func(name string) (*netns.NS, error) {
		ns, err := netns.New(name)
		if err != nil {
			return nil, err
		}
		t.closers = append(t.closers, func() { ns.Close() })
		return ns, nil
	}
	k, err := newNS("ustack-bench-k")
	if err != nil {
		return nil, err
	}
	kernel := kernelHost{k}
	var ustack host
	var ep gstack.LinkEndpoint
	var ustackAddr, kernelAddr netip.Prefix
	var kernelIf string
	switch c.Link {
	case "kveth":
		// The baseline: the Linux stack on both ends of a veth pair.
		b, err := newNS("ustack-bench-b")
		if err != nil {
			return nil, err
		}
		if err := netns.Veth(k, "kv0", b, "kv1", c.mtu()); err != nil {
			return nil, err
		}
		if err := k.AddAddr("kv0", kvethA); err != nil {
			return nil, err
		}
		if err := b.AddAddr("kv1", kvethB); err != nil {
			return nil, err
		}
		if c.NoOffload {
			if err := k.SetOffloads("kv0", false); err != nil {
				return nil, err
			}
			if err := b.SetOffloads("kv1", false); err != nil {
				return nil, err
			}
		}
		t.client, t.server, t.serverAddr = kernelHost{k}, kernelHost{b}, kvethB.Addr()
		if c.Reverse {
			t.client, t.server, t.serverAddr = kernelHost{b}, kernelHost{k}, kvethA.Addr()
			t.clientTX, t.serverRX = ifaceCounter(b, "kv1", false), ifaceCounter(k, "kv0", true)
		} else {
			t.clientTX, t.serverRX = ifaceCounter(k, "kv0", false), ifaceCounter(b, "kv1", true)
		}
		t.wireLost = zero
		t.qdiscs = func() (*sched.Stats, *sched.Stats) { return nil, nil }
		t.polls = func() (*poll.Stats, *poll.Stats) { return nil, nil }
		ok = true
		return t, nil
	case "veth":
		u, err := newNS("ustack-bench-u")
		if err != nil {
			return nil, err
		}
		if err := netns.Veth(k, "kv0", u, "uv0", c.mtu()); err != nil {
			return nil, err
		}
		// The kernel of U must stay quiet on ustack's interface.
		if err := u.Sysctl("ipv6/conf/uv0/disable_ipv6", "1"); err != nil {
			return nil, err
		}
		kernelAddr, ustackAddr, kernelIf = vethKernel, vethUstack, "kv0"
		if err := k.AddAddr(kernelIf, kernelAddr); err != nil {
			return nil, err
		}
		if c.NoOffload {
			if err := k.SetOffloads(kernelIf, false); err != nil {
				return nil, err
			}
		}
		var ao afpacket.Options
		if c.AFPacket != nil {
			ao = *c.AFPacket
		}
		ao.NoOffload = ao.NoOffload || c.NoOffload
		ao.NoCache = noCache(c.Cache, ao.NoCache)
		err = u.Do(func() (err error) {
			ep, err = linkspec.Open(linkspec.Spec{Kind: linkspec.AFPacket, Name: "uv0"}, &linkspec.Options{AFPacket: &ao, Impair: c.Impair})
			return err
		})
		if err != nil {
			return nil, err
		}
	case "tun":
		kernelAddr, ustackAddr, kernelIf = tunKernel, tunUstack, "tun0"
		opts := tun.Options{}
		if c.Tun != nil {
			opts = *c.Tun
		}
		opts.Addrs = []netip.Prefix{kernelAddr}
		opts.NoOffload = opts.NoOffload || c.NoOffload
		opts.NoCache = noCache(c.Cache, opts.NoCache)
		if opts.MTU == 0 {
			opts.MTU = uint32(c.mtu())
		}
		err = k.Do(func() (err error) {
			ep, err = linkspec.Open(linkspec.Spec{Kind: linkspec.Tun, Name: kernelIf}, &linkspec.Options{Tun: &opts, Impair: c.Impair})
			return err
		})
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown link %q: valid links are %s", c.Link, strings.Join(Links(), ", "))
	}
	rep, _ := ep.(link.Reporter)
	s, id, err := ustackHost(c, ep, ustackAddr)
	if err != nil {
		return nil, err
	}
	t.closers = append(t.closers, func() { s.Close() })
	ustack = s
	// The kernel side counts its interface; ustack's side its endpoint.
	ustackTX := linkCounter(rep, func(st link.Stats) uint64 { return st.TXPackets })
	ustackRX := linkCounter(rep, func(st link.Stats) uint64 { return st.RXPackets })
	t.wireLost = linkCounter(rep, func(st link.Stats) uint64 { return st.ImpairLost })
	if c.Reverse {
		t.client, t.server, t.serverAddr = kernel, ustack, ustackAddr.Addr()
		t.clientTX, t.serverRX = ifaceCounter(k, kernelIf, false), ustackRX
		t.qdiscs = func() (*sched.Stats, *sched.Stats) { return nil, qdiscOf(s, id) }
		t.polls = func() (*poll.Stats, *poll.Stats) { return nil, pollOf(s) }
	} else {
		t.client, t.server, t.serverAddr = ustack, kernel, kernelAddr.Addr()
		t.clientTX, t.serverRX = ustackTX, ifaceCounter(k, kernelIf, true)
		t.qdiscs = func() (*sched.Stats, *sched.Stats) { return qdiscOf(s, id), nil }
		t.polls = func() (*poll.Stats, *poll.Stats) { return pollOf(s), nil }
	}
	ok = true
	return t, nil
}

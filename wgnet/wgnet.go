package wgnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/tun"
	"gvisor.dev/gvisor/pkg/tcpip"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/poll"
	"github.com/ustack-dev/ustack/sched"
	"github.com/ustack-dev/ustack/stack"
)

const (
	// DefaultBatchSize is the device's BatchSize: 128, wireguard-go's
	// conn.IdealBatchSize, the most packets its device moves per call to
	// the bind and so the most it hands a TUN per Write. A Read returns
	// up to that many packets, or ReadLimit(mtu) if that is fewer, rather
	// than one packet per call as wireguard-go's tun/netstack does.
	DefaultBatchSize = 128
	// DefaultQdisc is the queueing discipline between the stack and the
	// device: llist, ours, so that a device read too slowly makes the
	// senders wait (the qdisc requeues and resumes on the endpoint's
	// writability signal) instead of dropping, as gVisor's default does.
	DefaultQdisc = sched.LList
	// DefaultSocketReceiveBuffer is the receive buffer a UDP, ICMP or raw
	// socket of the Net starts with: 7 MiB, what wireguard-go asks for
	// its own UDP sockets (conn.socketBufferSize). Linux's default, 208
	// KiB (gVisor's too), holds barely more than one batch the device
	// writes (128 packets of up to 1420 bytes), so a reader that falls a
	// little behind loses datagrams the tunnel delivered. It is a limit,
	// not an allocation.
	DefaultSocketReceiveBuffer = 7 << 20
)

// Options configures CreateNetTUNWithOptions. A nil *Options means the
// defaults; a zero field means its default.
type Options struct {
	// Qdisc is the queueing discipline by name (package sched);
	// "" means DefaultQdisc.
	Qdisc string
	// QdiscOptions tunes it; nil means its defaults.
	QdiscOptions *sched.Options
	// BusyPoll makes a reader whose conn is empty drive the device's
	// receive queue from its own goroutine for a while before it parks
	// (package poll); the zero value is off.
	BusyPoll poll.Mode
	// Cache says whether the stack's conns keep their read and write
	// scratch (stack.Options.Cache); CacheDefault means stack.DefaultCache.
	Cache stack.CacheMode
	// BatchSize is what the device's BatchSize reports; 0 means
	// DefaultBatchSize.
	BatchSize int
	// Link tunes the endpoint; its MTU is ignored (the mtu argument
	// wins) and VNetHeader must be off. nil means pktio's defaults.
	Link *pktio.Options
	// TCP tunes TCP; nil means stack.DefaultTCPOptions.
	TCP *stack.TCPOptions
	// SocketReceiveBuffer is the receive buffer in bytes of every
	// non-TCP socket (TCP's are TCP.ReceiveBuffer); 0 means
	// DefaultSocketReceiveBuffer.
	SocketReceiveBuffer int
	// Transparent builds the stack with stack.Options.Transparent, so
	// that the Net can take the flows the tunnel's peers send to any
	// address, not only to its own: an exit node hands them to
	// forward.New(net.Stack(), ...), which needs it. Off by default, as
	// an endpoint that only dials and listens wants: a transparent stack
	// sends packets to its own addresses out of the device rather than
	// delivering them locally (see stack.Options.Transparent).
	Transparent bool
}

// Net is the network behind the device: dial, listen, ping and resolve
// through it. Its methods are those of wireguard-go's *netstack.Net. It is
// safe for concurrent use.
type Net struct {
	s            *stack.Stack
	ep           *pktio.Endpoint
	dnsServers   []netip.Addr
	dnsTimeout   time.Duration // dnsTimeout; tests shorten it
	hasV4, hasV6 bool
}

// CreateNetTUN returns a tun.Device for a wireguard-go device.NewDevice
// and the *Net behind it, with the given local addresses (each a host
// address, all traffic routed through the device), DNS servers for
// LookupHost, and MTU. It is wireguard-go's netstack.CreateNetTUN on
// ustack. Closing the device closes the Net.
func CreateNetTUN(localAddresses, dnsServers []netip.Addr, mtu int) (tun.Device, *Net, error) {
	return CreateNetTUNWithOptions(localAddresses, dnsServers, mtu, nil)
}

// CreateNetTUNWithOptions is CreateNetTUN with the qdisc, busy polling,
// batch size and link options chosen, and for an exit node, a
// transparent stack (Options.Transparent).
func CreateNetTUNWithOptions(localAddresses, dnsServers []netip.Addr, mtu int, opts *Options) (tun.Device, *Net, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Qdisc == "" {
		o.Qdisc = DefaultQdisc
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchSize < 1 {
		return nil, nil, fmt.Errorf("wgnet: batch size %d: must be positive", o.BatchSize)
	}
	var lo pktio.Options
	if o.Link != nil {
		lo = *o.Link
	}
	if lo.VNetHeader {
		return nil, nil, errors.New("wgnet: Link.VNetHeader must be off: wireguard-go reads and writes plain IP packets")
	}
	if mtu < pktio.MinMTU || mtu > pktio.MaxMTU {
		return nil, nil, fmt.Errorf("wgnet: MTU %d out of range: use %d to %d", mtu, pktio.MinMTU, pktio.MaxMTU)
	}
	lo.MTU = uint32(mtu)
	ep, err := pktio.New(&lo)
	if err != nil {
		return nil, nil, fmt.Errorf("wgnet: %w", err)
	}
	// The stack resolves names as the Net does (LookupContextHost), once
	// the Net exists.
	var n *Net
	lookup := func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		return n.lookupNetIP(ctx, network, host)
	}
	s, err := stack.New(&stack.Options{TCP: o.TCP, BusyPoll: o.BusyPoll, Cache: o.Cache, Transparent: o.Transparent, Lookup: lookup})
	if err != nil {
		ep.Close()
		return nil, nil, fmt.Errorf("wgnet: %w", err)
	}
	if o.SocketReceiveBuffer == 0 {
		o.SocketReceiveBuffer = DefaultSocketReceiveBuffer
	}
	rb := tcpip.ReceiveBufferSizeOption{Min: gstack.MinBufferSize, Default: o.SocketReceiveBuffer, Max: max(o.SocketReceiveBuffer, gstack.DefaultMaxBufferSize)}
	if o.SocketReceiveBuffer < gstack.MinBufferSize {
		ep.Close()
		s.Close()
		return nil, nil, fmt.Errorf("wgnet: socket receive buffer %d: must be at least %d bytes", o.SocketReceiveBuffer, gstack.MinBufferSize)
	}
	if terr := s.GVisor().SetOption(rb); terr != nil {
		ep.Close()
		s.Close()
		return nil, nil, fmt.Errorf("wgnet: set the socket receive buffer to %d bytes: %w", o.SocketReceiveBuffer, stack.TranslateError(terr))
	}
	n = &Net{s: s, ep: ep, dnsServers: append([]netip.Addr(nil), dnsServers...), dnsTimeout: dnsTimeout}
	nic, err := s.AddNIC(ep, &stack.NICOptions{Name: "wg", Qdisc: o.Qdisc, QdiscOptions: o.QdiscOptions})
	if err != nil {
		ep.Close()
		s.Close()
		return nil, nil, fmt.Errorf("wgnet: %w", err)
	}
	if err := n.addAddresses(nic, localAddresses); err != nil {
		s.Close()
		return nil, nil, err
	}
	d := &device{ep: ep, s: s, mtu: mtu, batch: o.BatchSize, readMax: ReadLimit(mtu), events: make(chan tun.Event, 1)}
	d.events <- tun.EventUp
	return d, n, nil
}

// wireguard-go sends the packets one Read returned for a peer in one
// call to its bind, which on Linux makes UDP GSO datagrams of runs of
// equal-sized transport messages (conn.StdNetBind's coalesceMessages),
// as long as a run's payload stays within 65507 bytes (IPv4) or 65527
// (IPv6). The kernel segments in software, one datagram at a time as
// without GSO, every GSO packet whose length with its link header
// reaches the device's gso_max_size, 64 KiB by default
// (GSO_LEGACY_MAX_SIZE; netif_skb_features). wireguard-go's bound
// leaves out the link header, so a run of 65494 to 65507 bytes (65474 to
// 65527 over IPv6) is split: 46 messages of 1424 bytes, for example,
// 1392-byte packets (gVisor's segments at a 1420-byte MTU before package
// pktio filled the MTU, or any such datagrams), are 65504 bytes and go
// out as 46 sends. Bounding a Read bounds the runs.
const (
	// wgMessageOverhead is what a WireGuard transport message adds to
	// its packet: 16 bytes of header (device.MessageTransportHeaderSize)
	// and the 16-byte Poly1305 tag. Its padding rounds the packet up to
	// 16 bytes, never past the MTU, so a message is at most MTU+32.
	wgMessageOverhead = 16 + 16
	// udpGSOMaxPayload is the most UDP payload one GSO send may carry for
	// the kernel to hand it to the device whole: under 64 KiB with an
	// Ethernet header (14), IPv6's (40) and UDP's (8).
	udpGSOMaxPayload = 1<<16 - 1 - 14 - 40 - 8
)

// ReadLimit is the most packets the device's Read hands wireguard-go
// on a tunnel of the given MTU: as many of the largest messages (MTU+32
// bytes) as one UDP GSO datagram the kernel sends whole can carry, 45 at
// the default MTU of 1420, so that whatever sizes the stack sends,
// wireguard-go's UDP GSO sends are never split by the kernel. Package
// pktio hands out no packet larger than the MTU.
func ReadLimit(mtu int) int { return max(udpGSOMaxPayload/(mtu+wgMessageOverhead), 1) }

// addAddresses gives the NIC each address as a host address and routes
// everything of each IP version present through it, as wireguard-go's
// netstack does: what leaves is for the tunnel to route.
func (n *Net) addAddresses(nic tcpip.NICID, addrs []netip.Addr) error {
	for _, a := range addrs {
		a = a.Unmap()
		if !a.IsValid() {
			return errors.New("wgnet: an invalid local address was given")
		}
		if err := n.s.AddAddress(nic, netip.PrefixFrom(a, a.BitLen())); err != nil {
			return fmt.Errorf("wgnet: %w", err)
		}
		if a.Is4() {
			n.hasV4 = true
		} else {
			n.hasV6 = true
		}
	}
	for _, def := range []struct {
		on  bool
		dst netip.Prefix
	}{{n.hasV4, netip.PrefixFrom(netip.IPv4Unspecified(), 0)}, {n.hasV6, netip.PrefixFrom(netip.IPv6Unspecified(), 0)}} {
		if !def.on {
			continue
		}
		if err := n.s.AddRoute(def.dst, netip.Addr{}, nic); err != nil {
			return fmt.Errorf("wgnet: %w", err)
		}
	}
	return nil
}

// Stack returns the ustack stack behind the Net, for its statistics and
// what the netstack API does not cover: an exit node, built with
// Options.Transparent, gives it to forward.New. The device owns it:
// closing the device closes it.
func (n *Net) Stack() *stack.Stack { return n.s }

// Endpoint returns the link endpoint between the stack and the device,
// for its counters.
func (n *Net) Endpoint() *pktio.Endpoint { return n.ep }

// device is the tun.Device side: wireguard-go reads what the stack sends
// and writes what the stack is to receive.
type device struct {
	ep      *pktio.Endpoint
	s       *stack.Stack
	mtu     int
	batch   int
	readMax int // ReadLimit(mtu)
	events  chan tun.Event

	closeOnce sync.Once
}

var _ tun.Device = (*device)(nil)

// File implements tun.Device: there is no file descriptor.
func (*device) File() *os.File { return nil }

// Read implements tun.Device (pktio.Endpoint.Read): it blocks until the
// stack has sent something, and returns os.ErrClosed (wrapped) after
// Close. It fills at most ReadLimit(MTU) of bufs.
func (d *device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return d.ep.Read(bufs[:min(len(bufs), d.readMax)], sizes, offset)
}

// Write implements tun.Device (pktio.Endpoint.Write).
func (d *device) Write(bufs [][]byte, offset int) (int, error) {
	return d.ep.Write(bufs, offset)
}

// MTU implements tun.Device.
func (d *device) MTU() (int, error) { return d.mtu, nil }

// Name implements tun.Device.
func (*device) Name() (string, error) { return "ustack", nil }

// Events implements tun.Device: EventUp once, closed by Close.
func (d *device) Events() <-chan tun.Event { return d.events }

// BatchSize implements tun.Device.
func (d *device) BatchSize() int { return d.batch }

// Close implements tun.Device: it closes the stack (aborting every
// connection and closing the endpoint, which wakes a blocked Read) and
// the events channel. Idempotent.
func (d *device) Close() error {
	d.closeOnce.Do(func() {
		d.s.Close()
		close(d.events)
	})
	return nil
}

package sandbox

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Router advertisements on a TAP sandbox (RFC 4861 section 6), so that
// the sandbox configures its IPv6 address and default route itself
// (SLAAC, RFC 4862), as slirp4netns's and pasta's sandboxes do: a
// rootless container tool that configures the device itself
// (NoConfigure) sets only IPv4. gVisor answers neighbour solicitations for
// the stack's addresses but sends no advertisements of its own, and drops
// router solicitations on a host that does not route, so the sandbox
// watches for them itself (tapLink).
const (
	// raInterval is how often an unsolicited advertisement goes out:
	// between the RFC's MinRtrAdvInterval and MaxRtrAdvInterval
	// defaults (200 and 600 s), which libslirp uses too.
	raInterval = 300 * time.Second
	// raMinDelay is the least time between two advertisements to the
	// all-nodes group (MIN_DELAY_BETWEEN_RAS, RFC 4861 section 10): a
	// solicitation sooner than that is answered when it has passed.
	raMinDelay = 3 * time.Second
	// raRouterLifetime is how long the sandbox keeps ustack as its
	// default router: 3 times raInterval, the RFC's AdvDefaultLifetime.
	raRouterLifetime = 3 * raInterval
	// raValidLifetime and raPreferredLifetime are the prefix's lifetimes,
	// what libslirp advertises (one day, four hours): an address outlives
	// any gap between advertisements.
	raValidLifetime     = 24 * time.Hour
	raPreferredLifetime = 4 * time.Hour
)

// allNodes is ff02::1, where advertisements go, and its Ethernet
// multicast address (RFC 2464 section 7).
var (
	allNodes    = netip.MustParseAddr("ff02::1")
	allNodesMAC = tcpip.LinkAddress("\x33\x33\x00\x00\x00\x01")
)

// linkLocal is the EUI-64 link-local address of mac (RFC 4291 appendix
// A), the source advertisements must have (RFC 4861 section 4.2), and the
// router address the sandbox learns from them.
func linkLocal(mac tcpip.LinkAddress) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	copy(a[8:11], mac[:3])
	a[8] ^= 0x02
	a[11], a[12] = 0xff, 0xfe
	copy(a[13:], mac[3:6])
	return netip.AddrFrom16(a)
}

// raOptions say what an advertisement carries.
type raOptions struct {
	src    netip.Addr        // the router's link-local address
	mac    tcpip.LinkAddress // the router's MAC (source link-layer address option)
	mtu    uint32            // 0: no MTU option
	prefix netip.Prefix      // on-link, and autonomous if /64
	dns    netip.Addr        // the recursive DNS server option (RFC 8106); invalid: none
}

// routerAdvert builds the whole IPv6 packet of one advertisement to the
// all-nodes group.
func routerAdvert(o *raOptions) []byte {
	body := make([]byte, 0, 128)
	// The advertisement's fixed part (section 4.2): type, code and
	// checksum (filled in below), current hop limit 64, no M or O flag,
	// the router lifetime, and unspecified reachable time and retransmit
	// timer.
	body = append(body, byte(header.ICMPv6RouterAdvert), 0, 0, 0, 64, 0)
	body = binary.BigEndian.AppendUint16(body, uint16(raRouterLifetime/time.Second))
	body = binary.BigEndian.AppendUint32(body, 0)
	body = binary.BigEndian.AppendUint32(body, 0)
	// Source link-layer address (type 1, 8 bytes).
	body = append(body, 1, 1)
	body = append(body, o.mac...)
	if o.mtu != 0 {
		// MTU (type 5, 8 bytes).
		body = append(body, 5, 1, 0, 0)
		body = binary.BigEndian.AppendUint32(body, o.mtu)
	}
	// Prefix information (type 3, 32 bytes): on-link (L), and autonomous
	// (A) where SLAAC can use it, a /64.
	flags := byte(0x80)
	if o.prefix.Bits() == 64 {
		flags |= 0x40
	}
	body = append(body, 3, 4, byte(o.prefix.Bits()), flags)
	body = binary.BigEndian.AppendUint32(body, uint32(raValidLifetime/time.Second))
	body = binary.BigEndian.AppendUint32(body, uint32(raPreferredLifetime/time.Second))
	body = binary.BigEndian.AppendUint32(body, 0)
	p := o.prefix.Masked().Addr().As16()
	body = append(body, p[:]...)
	if o.dns.IsValid() {
		// Recursive DNS server (type 25, 24 bytes for one address),
		// valid as long as the router.
		body = append(body, 25, 3, 0, 0)
		body = binary.BigEndian.AppendUint32(body, uint32(raRouterLifetime/time.Second))
		d := o.dns.As16()
		body = append(body, d[:]...)
	}
	src, dst := tcpip.AddrFrom16(o.src.As16()), tcpip.AddrFrom16(allNodes.As16())
	icmp := header.ICMPv6(body)
	icmp.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: icmp, Src: src, Dst: dst}))
	pkt := make([]byte, header.IPv6MinimumSize+len(body))
	header.IPv6(pkt).Encode(&header.IPv6Fields{
		PayloadLength:     uint16(len(body)),
		TransportProtocol: header.ICMPv6ProtocolNumber,
		HopLimit:          header.NDPHopLimit,
		SrcAddr:           src,
		DstAddr:           dst,
	})
	copy(pkt[header.IPv6MinimumSize:], body)
	return pkt
}

// isRouterSolicit reports whether pkt, an IPv6 packet as a link
// delivers it (network header not yet parsed), is a router solicitation
// without extension headers, as hosts send them. Only small packets are
// looked at, so the check costs bulk traffic a length comparison.
func isRouterSolicit(pkt *gstack.PacketBuffer) bool {
	const size = header.IPv6MinimumSize + header.ICMPv6MinimumSize
	if n := pkt.Data().Size(); n < size || n > 256 {
		return false
	}
	b, ok := pkt.Data().PullUp(size)
	return ok && b[6] == uint8(header.ICMPv6ProtocolNumber) && b[header.IPv6MinimumSize] == uint8(header.ICMPv6RouterSolicit)
}

// advertiser sends a TAP sandbox's router advertisements: one at start,
// one soon after each solicitation, and one every raInterval. Its
// goroutine is stopped by close.
type advertiser struct {
	st  *gstack.Stack
	nic tcpip.NICID
	pkt []byte // the advertisement, the same every time

	solicit chan struct{} // a solicitation arrived
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	sent    atomic.Uint64
}

func newAdvertiser(st *gstack.Stack, nic tcpip.NICID, o *raOptions) *advertiser {
	a := &advertiser{st: st, nic: nic, pkt: routerAdvert(o), solicit: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go a.loop()
	return a
}

// solicited notes a router solicitation; it runs in the receive path and
// never blocks.
func (a *advertiser) solicited() {
	select {
	case a.solicit <- struct{}{}:
	default:
	}
}

func (a *advertiser) loop() {
	defer close(a.done)
	var last time.Time
	t := time.NewTimer(0) // the first advertisement at once
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-a.solicit:
			wait := time.Until(last.Add(raMinDelay))
			if wait > 0 {
				t.Reset(wait) // answered once the least delay has passed
				continue
			}
		case <-t.C:
		}
		a.send()
		last = time.Now()
		t.Reset(raInterval)
	}
}

// send writes one advertisement to the all-nodes group. A refused write
// (a full queue) is not retried: the next solicitation or interval sends
// another.
func (a *advertiser) send() {
	if err := a.st.WritePacketToRemote(a.nic, allNodesMAC, header.IPv6ProtocolNumber, buffer.MakeWithData(a.pkt)); err == nil {
		a.sent.Add(1)
	}
}

// close stops the advertiser and waits for its goroutine. Idempotent.
func (a *advertiser) close() {
	a.once.Do(func() { close(a.stop) })
	<-a.done
}

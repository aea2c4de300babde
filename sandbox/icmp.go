package sandbox

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/tun"
)

// maxEchoMaps bounds the ICMP echo mappings (sandbox address and echo
// identifier) alive at once: a ping per mapping, so 1024 is far more than
// any sandbox pings in parallel, and a flood of identifiers is refused.
const maxEchoMaps = 1024

// icmpTap sits between the TUN endpoint and gVisor: echo requests to
// destinations other than ustack's own addresses go to the echo relay
// instead of gVisor, which would answer them itself (a promiscuous NIC
// takes every address for its own) and so fake reachability. Everything
// else passes through. Embedding the endpoint keeps its other interfaces
// (stats, busy polling, writability) visible to the stack.
type icmpTap struct {
	*tun.Endpoint
	s *Sandbox
	d stack.NetworkDispatcher
}

// Attach implements stack.LinkEndpoint.
// The dispatcher is set before the endpoint starts its receive goroutines
// and kept on detach, as they may still be delivering while it stops them.
func (t *icmpTap) Attach(d stack.NetworkDispatcher) {
	if d == nil {
		t.Endpoint.Attach(nil)
		return
	}
	t.d = d
	t.Endpoint.Attach(t)
}

// DeliverNetworkPacket implements stack.NetworkDispatcher. The endpoint
// keeps its reference to pkt either way.
func (t *icmpTap) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if t.s.echo.divert(proto, pkt) {
		return
	}
	t.d.DeliverNetworkPacket(proto, pkt)
}

// DeliverLinkPacket implements stack.NetworkDispatcher.
func (t *icmpTap) DeliverLinkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	t.d.DeliverLinkPacket(proto, pkt)
}

// echoRelay carries the sandbox's pings to the host's raw ICMP sockets and
// the answers back, mapping each (sandbox address, identifier) to an
// identifier of its own, as a NAT does.
type echoRelay struct {
	s *Sandbox

	mu        sync.Mutex
	conns     [2]*net.IPConn // ICMPv4, ICMPv6; opened on first use
	failed    [2]bool        // the host refused a raw socket
	bySandbox map[echoKey]*echoMap
	byHost    [2]map[uint16]*echoMap
}

type echoKey struct {
	src netip.Addr
	id  uint16
}

type echoMap struct {
	key    echoKey
	hostID uint16
	last   time.Time
}

func (e *echoRelay) init(s *Sandbox) {
	e.s = s
	e.bySandbox = map[echoKey]*echoMap{}
	e.byHost = [2]map[uint16]*echoMap{{}, {}}
}

// divert takes an echo request for the relay and reports whether it did.
func (e *echoRelay) divert(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) bool {
	b, ok := pkt.Data().PullUp(pkt.Data().Size())
	if !ok {
		return false
	}
	var src, dst netip.Addr
	var msg []byte
	v6 := false
	switch proto {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(b)
		if !ip.IsValid(len(b)) || ip.Protocol() != uint8(header.ICMPv4ProtocolNumber) || ip.More() || ip.FragmentOffset() != 0 {
			return false
		}
		msg = ip.Payload()
		if len(msg) < header.ICMPv4MinimumSize || header.ICMPv4(msg).Type() != header.ICMPv4Echo || checksum.Checksum(msg, 0) != 0xffff {
			return false
		}
		src, dst = addrOf(ip.SourceAddress()), addrOf(ip.DestinationAddress())
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(b)
		// Echo requests with extension headers are left to gVisor.
		if !ip.IsValid(len(b)) || tcpip.TransportProtocolNumber(ip.NextHeader()) != header.ICMPv6ProtocolNumber {
			return false
		}
		msg = ip.Payload()
		if len(msg) < header.ICMPv6EchoMinimumSize || header.ICMPv6(msg).Type() != header.ICMPv6EchoRequest {
			return false
		}
		x := header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: header.ICMPv6(msg[:header.ICMPv6HeaderSize]), Src: ip.SourceAddress(), Dst: ip.DestinationAddress(), PayloadCsum: checksum.Checksum(msg[header.ICMPv6HeaderSize:], 0), PayloadLen: len(msg) - header.ICMPv6HeaderSize})
		if x != header.ICMPv6(msg).Checksum() {
			return false
		}
		src, dst = addrOf(ip.SourceAddress()), addrOf(ip.DestinationAddress())
		v6 = true
	default:
		return false
	}
	c := &e.s.cfg
	if dst == c.Gateway4 || dst == c.Gateway6 || dst == c.DNS4 || dst == c.DNS6 {
		return false // ustack's own addresses: gVisor answers
	}
	if r, ok := e.s.pol.allowed(dst); !ok {
		e.s.refuse(r)
		return true
	}
	e.send(src, dst, msg, v6)
	return true
}

// send relays one echo request (msg is the ICMP message, borrowed).
func (e *echoRelay) send(src, dst netip.Addr, msg []byte, v6 bool) {
	fam := 0
	if v6 {
		fam = 1
	}
	key := echoKey{src, binary.BigEndian.Uint16(msg[4:6])}
	e.mu.Lock()
	conn := e.connLocked(fam)
	if conn == nil {
		e.mu.Unlock()
		e.s.refuse(HostError)
		return
	}
	m := e.bySandbox[key]
	now := time.Now()
	if m == nil {
		if m = e.newMapLocked(key, fam, now); m == nil {
			e.mu.Unlock()
			e.s.refuse(FlowLimit)
			return
		}
	}
	m.last = now
	hostID := m.hostID
	e.mu.Unlock()

	out := make([]byte, len(msg))
	copy(out, msg)
	binary.BigEndian.PutUint16(out[4:6], hostID)
	if !v6 {
		// The kernel fills in ICMPv6 checksums of raw sockets itself.
		out[2], out[3] = 0, 0
		binary.BigEndian.PutUint16(out[2:4], ^checksum.Checksum(out, 0))
	}
	if _, err := conn.WriteTo(out, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		e.s.refuse(HostError)
		return
	}
	e.s.c.echoUp.Add(1)
}

// connLocked returns the family's raw socket, opening it (and starting its
// receive loop) on first use.
func (e *echoRelay) connLocked(fam int) *net.IPConn {
	if e.conns[fam] != nil || e.failed[fam] {
		return e.conns[fam]
	}
	network, laddr := "ip4:icmp", "0.0.0.0"
	if fam == 1 {
		network, laddr = "ip6:ipv6-icmp", "::"
	}
	if !e.s.begin() {
		return nil
	}
	c, err := net.ListenPacket(network, laddr)
	if err != nil {
		e.s.wg.Done()
		e.failed[fam] = true
		return nil
	}
	conn := c.(*net.IPConn)
	e.conns[fam] = conn
	go e.receiveLoop(fam, conn)
	return conn
}

// newMapLocked makes a mapping with a free host identifier, first
// forgetting mappings idle longer than UDPIdleTimeout.
func (e *echoRelay) newMapLocked(key echoKey, fam int, now time.Time) *echoMap {
	if len(e.bySandbox) >= maxEchoMaps {
		for k, m := range e.bySandbox {
			if now.Sub(m.last) > e.s.cfg.UDPIdleTimeout {
				delete(e.bySandbox, k)
				delete(e.byHost[famOf(k.src)], m.hostID)
			}
		}
		if len(e.bySandbox) >= maxEchoMaps {
			return nil
		}
	}
	id := uint16(rand.Uint32())
	for e.byHost[fam][id] != nil {
		id++
	}
	m := &echoMap{key: key, hostID: id}
	e.bySandbox[key] = m
	e.byHost[fam][id] = m
	return m
}

func famOf(a netip.Addr) int {
	if a.Is6() {
		return 1
	}
	return 0
}

// receiveLoop takes echo replies from the host's raw socket (which sees
// every ICMP message the host receives) and passes on those of our
// mappings.
func (e *echoRelay) receiveLoop(fam int, conn *net.IPConn) {
	defer e.s.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, from, err := conn.ReadFromIP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		msg := buf[:n]
		if len(msg) < 8 {
			continue
		}
		if fam == 0 && msg[0] != byte(header.ICMPv4EchoReply) || fam == 1 && msg[0] != byte(header.ICMPv6EchoReply) {
			continue
		}
		e.mu.Lock()
		m := e.byHost[fam][binary.BigEndian.Uint16(msg[4:6])]
		var key echoKey
		if m != nil {
			m.last = time.Now()
			key = m.key
		}
		e.mu.Unlock()
		if m == nil {
			continue // someone else's ping
		}
		fromAP, _ := netip.AddrFromSlice(from.IP)
		src, ok := e.s.pol.source(netip.AddrPortFrom(fromAP.Unmap(), 0), false, fam == 1)
		if !ok {
			continue
		}
		e.reply(src.Addr(), key, msg)
	}
}

// reply writes an echo reply from src to the sandbox.
func (e *echoRelay) reply(src netip.Addr, key echoKey, msg []byte) {
	v6 := key.src.Is6()
	hlen := header.IPv4MinimumSize
	if v6 {
		hlen = header.IPv6MinimumSize
	}
	if hlen+len(msg) > int(e.s.cfg.MTU) {
		return
	}
	v := buffer.NewViewSize(hlen + len(msg))
	b := v.AsSlice()
	icmp := b[hlen:]
	copy(icmp, msg)
	binary.BigEndian.PutUint16(icmp[4:6], key.id)
	icmp[2], icmp[3] = 0, 0
	s, d := tcpip.AddrFromSlice(src.AsSlice()), tcpip.AddrFromSlice(key.src.AsSlice())
	proto := header.IPv4ProtocolNumber
	if v6 {
		proto = header.IPv6ProtocolNumber
		header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(len(msg)), TransportProtocol: header.ICMPv6ProtocolNumber, HopLimit: 64, SrcAddr: s, DstAddr: d})
		h := header.ICMPv6(icmp)
		h.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: h[:header.ICMPv6HeaderSize], Src: s, Dst: d, PayloadCsum: checksum.Checksum(icmp[header.ICMPv6HeaderSize:], 0), PayloadLen: len(icmp) - header.ICMPv6HeaderSize}))
	} else {
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber), SrcAddr: s, DstAddr: d})
		ip.SetChecksum(^ip.CalculateChecksum())
		binary.BigEndian.PutUint16(icmp[2:4], ^checksum.Checksum(icmp, 0))
	}
	if terr := e.s.st.GVisor().WriteRawPacket(e.s.nic, proto, buffer.MakeWithView(v)); terr == nil {
		e.s.c.echoDown.Add(1)
	}
}

// close closes the raw sockets, ending the receive loops.
func (e *echoRelay) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, c := range e.conns {
		if c != nil {
			c.Close()
			e.conns[i] = nil
		}
		e.failed[i] = true
	}
}

package forward

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/stack"
)

// PingRequest is an ICMP echo request to an address the stack does not
// own, for a PingHandler. It may be kept and replied to later, any number
// of times, from any goroutine.
type PingRequest struct {
	f        *Forwarder
	nic      tcpip.NICID
	src, dst netip.Addr
	msg      []byte
}

// Src is the address that sent the request (replies go there).
func (p *PingRequest) Src() netip.Addr { return p.src }

// Dst is the address the request was sent to.
func (p *PingRequest) Dst() netip.Addr { return p.dst }

// Message is the ICMP message: type, code, checksum, identifier, sequence
// number, data. It is the request's own copy; do not modify it.
func (p *PingRequest) Message() []byte { return p.msg }

// ID is the request's echo identifier.
func (p *PingRequest) ID() uint16 { return binary.BigEndian.Uint16(p.msg[4:6]) }

// Reply sends the peer an echo reply from from (of the peer's IP
// version). msg is an ICMP echo reply message as a host receives it (type,
// code, checksum, identifier, sequence, data): Reply sets its identifier
// to the request's and its checksum, on its own copy.
func (p *PingRequest) Reply(from netip.Addr, msg []byte) error {
	from = from.Unmap()
	v6 := p.src.Is6()
	hlen := header.IPv4MinimumSize
	if v6 {
		hlen = header.IPv6MinimumSize
	}
	switch {
	case len(msg) < header.ICMPv4MinimumSize:
		return errors.New("forward: ping reply: message shorter than an ICMP header")
	case from.Is6() != v6:
		return fmt.Errorf("forward: ping reply from %v: not of the peer's IP version", from)
	case hlen+len(msg) > int(p.f.mtu(p.nic)):
		return fmt.Errorf("forward: ping reply of %d bytes: %w", len(msg), errTooBig)
	}
	v := buffer.NewViewSize(hlen + len(msg))
	b := v.AsSlice()
	icmp := b[hlen:]
	copy(icmp, msg)
	binary.BigEndian.PutUint16(icmp[4:6], p.ID())
	icmp[2], icmp[3] = 0, 0
	s, d := tcpip.AddrFromSlice(from.AsSlice()), tcpip.AddrFromSlice(p.src.AsSlice())
	proto := header.IPv4ProtocolNumber
	if v6 {
		proto = header.IPv6ProtocolNumber
		icmp[0] = byte(header.ICMPv6EchoReply)
		header.IPv6(b).Encode(&header.IPv6Fields{PayloadLength: uint16(len(msg)), TransportProtocol: header.ICMPv6ProtocolNumber, HopLimit: 64, SrcAddr: s, DstAddr: d})
		h := header.ICMPv6(icmp)
		h.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: h[:header.ICMPv6HeaderSize], Src: s, Dst: d, PayloadCsum: checksum.Checksum(icmp[header.ICMPv6HeaderSize:], 0), PayloadLen: len(icmp) - header.ICMPv6HeaderSize}))
	} else {
		icmp[0] = byte(header.ICMPv4EchoReply)
		ip := header.IPv4(b)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber), SrcAddr: s, DstAddr: d})
		ip.SetChecksum(^ip.CalculateChecksum())
		binary.BigEndian.PutUint16(icmp[2:4], ^checksum.Checksum(icmp, 0))
	}
	if terr := p.f.gs.WriteRawPacket(p.nic, proto, buffer.MakeWithView(v)); terr != nil {
		return fmt.Errorf("forward: ping reply: %w", stack.TranslateError(terr))
	}
	p.f.c.pingsDown.Add(1)
	return nil
}

// handlePing takes ICMP messages no endpoint wanted, in the receive path.
// Echo requests to addresses the stack does not own go to the
// PingHandler (or nowhere); everything else is left to gVisor, which
// answers pings of its own addresses.
func (f *Forwarder) handlePing(id gstack.TransportEndpointID, pkt *gstack.PacketBuffer) bool {
	th := pkt.TransportHeader().Slice()
	if len(th) < 1 {
		return false
	}
	v6 := pkt.NetworkProtocolNumber == header.IPv6ProtocolNumber
	if v6 && th[0] != byte(header.ICMPv6EchoRequest) || !v6 && th[0] != byte(header.ICMPv4Echo) {
		return false
	}
	if f.owns(pkt.NICID, id.LocalAddress) {
		return false
	}
	if f.ping == nil || !f.begin() {
		return true // dropped: answering would fake reachability
	}
	defer f.wg.Done()
	v := gstack.PayloadSince(pkt.TransportHeader())
	msg := append([]byte(nil), v.AsSlice()...)
	v.Release()
	if len(msg) < header.ICMPv4MinimumSize {
		return true
	}
	f.ping.HandlePing(&PingRequest{f: f, nic: pkt.NICID, src: addrOf(id.RemoteAddress), dst: addrOf(id.LocalAddress), msg: msg})
	return true
}

// owns reports whether a is one of the NIC's own addresses (spoofing
// makes gVisor's own check say yes to every address).
func (f *Forwarder) owns(nic tcpip.NICID, a tcpip.Address) bool {
	for _, pa := range f.gs.AllAddresses()[nic] {
		if pa.AddressWithPrefix.Address == a {
			return true
		}
	}
	return false
}

// Quoting limits of ICMP errors: an ICMPv4 error fits in 576 bytes (RFC
// 1812 section 4.3.2.3), an ICMPv6 one in the IPv6 minimum MTU, 1280
// (RFC 4443 section 2.4 (c)), as much of the offending packet as fits.
const (
	icmpv4ErrorMax = 576
	icmpv6ErrorMax = header.IPv6MinimumMTU
)

// portUnreachable tells peer, through nic, that the datagram b it sent to
// dst was refused: an ICMP port unreachable from dst quoting it, what a
// host answers for a port nobody listens on, so the peer's socket fails
// with ECONNREFUSED rather than wait for an answer that will not come.
// b stays the caller's.
func (f *Forwarder) portUnreachable(nic tcpip.NICID, peer, dst netip.AddrPort, b []byte) {
	v6 := peer.Addr().Is6()
	if dst.Addr().Is6() != v6 {
		return
	}
	// The datagram as the peer sent it.
	orig := make([]byte, udpHeaderLen(peer)+len(b))
	copy(orig[udpHeaderLen(peer):], b)
	encodeUDP(orig, peer, dst, len(b))
	hlen, limit, icmpHdr := header.IPv4MinimumSize, icmpv4ErrorMax, header.ICMPv4MinimumSize
	if v6 {
		hlen, limit, icmpHdr = header.IPv6MinimumSize, icmpv6ErrorMax, header.ICMPv6MinimumSize
	}
	limit = min(limit, int(f.mtu(nic)))
	quoted := orig[:min(len(orig), limit-hlen-icmpHdr)]
	v := buffer.NewViewSize(hlen + icmpHdr + len(quoted))
	pkt := v.AsSlice()
	msg := pkt[hlen:]
	copy(msg[icmpHdr:], quoted)
	s, d := tcpip.AddrFromSlice(dst.Addr().AsSlice()), tcpip.AddrFromSlice(peer.Addr().AsSlice())
	proto := header.IPv4ProtocolNumber
	if v6 {
		proto = header.IPv6ProtocolNumber
		h := header.ICMPv6(msg)
		h.SetType(header.ICMPv6DstUnreachable)
		h.SetCode(header.ICMPv6PortUnreachable)
		header.IPv6(pkt).Encode(&header.IPv6Fields{PayloadLength: uint16(len(msg)), TransportProtocol: header.ICMPv6ProtocolNumber, HopLimit: 64, SrcAddr: s, DstAddr: d})
		h.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: h[:header.ICMPv6HeaderSize], Src: s, Dst: d, PayloadCsum: checksum.Checksum(msg[header.ICMPv6HeaderSize:], 0), PayloadLen: len(msg) - header.ICMPv6HeaderSize}))
	} else {
		h := header.ICMPv4(msg)
		h.SetType(header.ICMPv4DstUnreachable)
		h.SetCode(header.ICMPv4PortUnreachable)
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber), SrcAddr: s, DstAddr: d})
		ip.SetChecksum(^ip.CalculateChecksum())
		h.SetChecksum(^checksum.Checksum(msg, 0))
	}
	// Best effort, as ICMP errors are: a NIC that refuses it refuses the
	// datagram's answer too.
	_ = f.gs.WriteRawPacket(nic, proto, buffer.MakeWithView(v))
}

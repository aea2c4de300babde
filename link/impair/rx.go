package impair

import (
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// rxTap is the dispatcher the wrapped endpoint delivers to.
type rxTap struct{ e *Endpoint }

// DeliverLinkPacket passes link-level copies through untouched.
func (t rxTap) DeliverLinkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if d := t.e.upper(); d != nil {
		d.DeliverLinkPacket(proto, pkt)
	}
}

// DeliverNetworkPacket applies the receive impairments. The caller keeps
// its reference to pkt; anything delivered later is a private copy.
func (t rxTap) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	e := t.e
	im := &e.opts.RX
	d := e.upper()
	if d == nil {
		e.rx.detached.Add(1)
		return
	}
	if !im.Active() {
		d.DeliverNetworkPacket(proto, pkt)
		return
	}
	e.rxMu.Lock()
	r := e.rxRand
	lose := im.Loss > 0 && r.Float64() < im.Loss
	corrupt := !lose && im.Corrupt > 0 && r.Float64() < im.Corrupt
	if corrupt && e.rxOffload {
		// The stack will not check: drop it, as a NIC drops a bad FCS.
		e.rxMu.Unlock()
		e.rx.corruptDropped.Add(1)
		return
	}
	bit := r.Uint64()
	dup := !lose && im.Duplicate > 0 && r.Float64() < im.Duplicate
	var release *stack.PacketBuffer
	var releaseProto tcpip.NetworkProtocolNumber
	switch {
	case lose:
		e.rxMu.Unlock()
		e.rx.lost.Add(1)
		return
	case im.Reorder > 0 && e.rxHeld == nil && r.Float64() < im.Reorder:
		e.rxHeld, e.rxHeldProto = e.copyOf(pkt, corrupt, bit), proto
		e.rxMu.Unlock()
		e.rx.reordered.Add(1)
		if corrupt {
			e.rx.corrupted.Add(1)
		}
		return
	case e.rxHeld != nil:
		release, releaseProto = e.rxHeld, e.rxHeldProto
		e.rxHeld = nil
	}
	copies := 1
	if dup {
		copies = 2
		e.rx.duplicated.Add(1)
	}
	if im.Delay > 0 || im.Jitter > 0 {
		// Everything goes through the delay line, even a packet whose
		// draw came out at zero, and in order: the line keeps equal due
		// times in the order they were added, and the due time never
		// goes back, so neither jitter nor a concurrent delivery
		// reorders. The held packet leaves right after this one.
		due := nextDue(im, r, &e.rxLastDue)
		for range copies {
			if corrupt {
				e.rx.corrupted.Add(1)
			}
			e.delays.add(due, delayedPacket{rx: true, proto: proto, pkt: e.copyOf(pkt, corrupt, bit)})
		}
		if release != nil {
			e.delays.add(due, delayedPacket{rx: true, proto: releaseProto, pkt: release})
		}
		e.rxMu.Unlock()
		return
	}
	e.rxMu.Unlock()
	for i := range copies {
		if corrupt || i > 0 {
			c := e.copyOf(pkt, corrupt, bit)
			if corrupt {
				e.rx.corrupted.Add(1)
			}
			d.DeliverNetworkPacket(proto, c)
			c.DecRef()
			continue
		}
		d.DeliverNetworkPacket(proto, pkt)
	}
	if release != nil {
		d.DeliverNetworkPacket(releaseProto, release)
		release.DecRef()
	}
}

// copyOf returns a fresh inbound packet with pkt's bytes (a private copy,
// with bit number bit, modulo the packet's bits, flipped if corrupt), its
// link header parsed again. The caller owns the returned reference.
func (e *Endpoint) copyOf(pkt *stack.PacketBuffer, corrupt bool, bit uint64) *stack.PacketBuffer {
	b := pkt.ToBuffer()
	var payload buffer.Buffer
	if corrupt {
		data := b.Flatten()
		b.Release()
		if len(data) > 0 {
			bit %= uint64(len(data) * 8)
			data[bit/8] ^= 1 << (bit % 8)
		}
		payload = buffer.MakeWithData(data)
	} else {
		payload = b
	}
	c := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: payload})
	e.LinkEndpoint.ParseHeader(c)
	return c
}

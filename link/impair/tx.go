package impair

import (
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/link/internal/linkutil"
)

// WritePackets implements stack.LinkWriter: it applies the send
// impairments and writes what survives. The caller keeps its references
// and the list; the wrapper takes its own for what it holds or delays. A
// lost or delayed packet counts as written: the wire took it (a delayed
// one the wrapped endpoint later refuses is counted in Drops). If the
// wrapped endpoint takes only part of the batch, the originals it did not
// fully take are returned as unsent.
func (e *Endpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	im := &e.opts.TX
	if !im.Active() {
		n, err := e.LinkEndpoint.WritePackets(pkts)
		if n < pkts.Len() {
			linkutil.Refused(&e.Passthrough)
		}
		return n, err
	}
	list := pkts.AsSlice()
	delaying := im.Delay > 0 || im.Jitter > 0
	var out stack.PacketBufferList
	// done[i] is how many entries of out must be written for original i
	// to count as sent.
	done := make([]int, len(list))
	var extra []*stack.PacketBuffer // references we took for out
	e.txMu.Lock()
	r := e.txRand
	for i, pkt := range list {
		switch {
		case im.Loss > 0 && r.Float64() < im.Loss:
			e.tx.lost.Add(1)
		case im.Reorder > 0 && e.txHeld == nil && r.Float64() < im.Reorder:
			e.txHeld = pkt.IncRef()
			e.tx.reordered.Add(1)
		default:
			copies := 1
			if im.Duplicate > 0 && r.Float64() < im.Duplicate {
				copies = 2
				e.tx.duplicated.Add(1)
			}
			held := e.txHeld
			e.txHeld = nil
			if delaying {
				// As on receive: in order, the held packet right after.
				due := nextDue(im, r, &e.txLastDue)
				for range copies {
					e.delays.add(due, delayedPacket{pkt: pkt.IncRef()})
				}
				if held != nil {
					e.delays.add(due, delayedPacket{pkt: held})
				}
				break
			}
			for range copies {
				out.PushBack(pkt)
			}
			if held != nil {
				out.PushBack(held)
				extra = append(extra, held)
			}
		}
		done[i] = out.Len()
	}
	e.txMu.Unlock()
	defer func() {
		for _, p := range extra {
			p.DecRef()
		}
	}()
	if out.Len() == 0 {
		return len(list), nil
	}
	n, err := e.LinkEndpoint.WritePackets(out)
	if n >= out.Len() {
		return len(list), nil
	}
	linkutil.Refused(&e.Passthrough)
	sent := 0
	for sent < len(list) && done[sent] <= n {
		sent++
	}
	return sent, err
}

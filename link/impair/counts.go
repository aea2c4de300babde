package impair

import (
	"sync/atomic"

	"github.com/ustack-dev/ustack/link"
)

// Counts are what the wrapper did, per direction.
type Counts struct {
	// Lost counts packets dropped on purpose; CorruptDropped those that
	// were to be corrupted on a link whose stack verifies no checksums.
	Lost, CorruptDropped uint64
	// Duplicated, Reordered, Corrupted and Delayed count packets the
	// wrapper still delivered (or wrote), twice, late, damaged or late.
	Duplicated, Reordered, Corrupted, Delayed uint64
	// Dropped counts packets the wrapper took and then could hand to
	// nobody, by reason. These are not faults it meant to inject.
	Dropped Drops
}

// Drops are packets the wrapper took but could not deliver or write, by
// reason. Every one of them is also in the wrapper's link.Stats (see
// Endpoint.LinkStats).
type Drops struct {
	// Full counts delayed sent packets the wrapped endpoint refused for
	// lack of room when they fell due: no writer is left to retry them.
	Full uint64
	// Closed counts delayed sent packets the wrapped endpoint refused as
	// closed, and packets of either direction the wrapper still held
	// (delayed, or held back for reordering) when it was closed.
	Closed uint64
	// Failed counts delayed sent packets the wrapped endpoint failed with
	// any other error.
	Failed uint64
	// Detached counts received packets that found no stack attached when
	// they were to be delivered.
	Detached uint64
	// Limit counts packets dropped because the delay line held DelayLimit
	// packets already.
	Limit uint64
}

// Total returns how many packets were dropped, all reasons together.
func (d Drops) Total() uint64 { return d.Full + d.Closed + d.Failed + d.Detached + d.Limit }

type counts struct {
	lost, duplicated, reordered, corrupted, corruptDropped, delayed atomic.Uint64
	full, closed, failed, detached, limit                           atomic.Uint64
}

func (c *counts) snapshot() Counts {
	return Counts{
		Lost: c.lost.Load(), CorruptDropped: c.corruptDropped.Load(),
		Duplicated: c.duplicated.Load(), Reordered: c.reordered.Load(), Corrupted: c.corrupted.Load(), Delayed: c.delayed.Load(),
		Dropped: Drops{Full: c.full.Load(), Closed: c.closed.Load(), Failed: c.failed.Load(), Detached: c.detached.Load(), Limit: c.limit.Load()},
	}
}

// Counts returns what the wrapper did to received and to sent packets.
func (e *Endpoint) Counts() (rx, tx Counts) { return e.rx.snapshot(), e.tx.snapshot() }

// LinkStats implements link.Reporter: the wrapped endpoint's counters, if
// it keeps them (so RXPackets counts what it handed the wrapper), with the
// impairment counters of both directions added together, and the packets
// the wrapper dropped (Counts.Dropped) added where they belong: delayed
// sent packets refused as full or failed to TXErrors (the wrapped endpoint
// may also count a refusal in TXFull: it refused them to the wrapper, and
// nobody was left to retry them), refused as closed to TXClosed; received
// ones that found no stack to RXDetached; and those still held at Close to
// RXClosed or TXClosed. Delay-limit drops count as ImpairLost.
func (e *Endpoint) LinkStats() link.Stats {
	s := e.Passthrough.LinkStats()
	rx, tx := e.Counts()
	s.ImpairLost += rx.Lost + tx.Lost + rx.CorruptDropped + rx.Dropped.Limit + tx.Dropped.Limit
	s.ImpairDuplicated += rx.Duplicated + tx.Duplicated
	s.ImpairReordered += rx.Reordered + tx.Reordered
	s.ImpairCorrupted += rx.Corrupted + rx.CorruptDropped
	s.ImpairDelayed += rx.Delayed + tx.Delayed
	s.TXErrors += tx.Dropped.Full + tx.Dropped.Failed
	s.TXClosed += tx.Dropped.Closed
	s.RXDetached += rx.Dropped.Detached
	s.RXClosed += rx.Dropped.Closed
	return s
}

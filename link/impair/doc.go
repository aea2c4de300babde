// Package impair is ustack's one fault injector: it wraps any link
// endpoint (mem, afpacket, tun) and injects seeded faults, so that a run
// can be repeated: loss, duplication, reordering, corruption and delay
// with jitter on what the endpoint receives, and loss, duplication,
// reordering and delay with jitter on what it sends. It stands in for
// Linux's netem, which a userspace stack's traffic never passes through;
// mem is a plain wire and has none of its own.
//
// Faults follow link.Impairments: jitter alone never reorders (a delayed
// packet is never due before the one delayed ahead of it), reordering holds
// one packet back until the next one passes, and every packet the wrapper
// takes is delivered, written, or counted (Counts, Drops, and the
// wrapper's link.Stats).
//
// Corruption applies to received packets only: it flips one bit of a
// private copy. If the wrapped endpoint tells the stack that checksums were
// verified (RX checksum offload), nobody would catch the flipped bit, so the
// wrapper drops the packet instead, as a NIC drops a frame whose FCS fails,
// and counts it in CorruptDropped.
//
// The wrapper is transparent: every optional interface of the wrapped
// endpoint that link/doc.go lists (busy-poll source, writability signal,
// receive rounds, link and cache counters, GSO, Err, coalescing) is passed
// through, so wrapping a link never switches a feature off. Users: ustack bench -impair (mem and device links), ustack
// serve -impair, stack/stacktest.Impaired, and the fault tests.
package impair

// Package pcap is a capture wrapper: it wraps any link endpoint and writes
// every packet the endpoint receives and sends to an io.Writer in the
// libpcap file format, which tcpdump -r, Wireshark and tshark read, as
// tcpdump -w would write it from the device. It is how a userspace
// stack's traffic, which no kernel capture point sees, gets captured.
//
// The link type follows the wrapped endpoint: Ethernet (LINKTYPE_ETHERNET)
// for an endpoint whose ARPHardwareType is Ethernet (afpacket), raw IP
// (LINKTYPE_RAW, IPv4 and IPv6 told apart by the version nibble) for
// every other (tun, mem, pktio). Packets are captured as they cross the
// link: a TCP super-segment that goes to the device whole (GSO) or that
// receive offload merged (GRO) is one record, cut at the snap length
// (Options.SnapLen, 65535 by default) with its whole length recorded, as
// the kernel's capture shows super-segments. Sent packets are captured
// once the wrapped endpoint took them, so a write it refused and the
// discipline retried is captured once. Timestamps have nanosecond
// resolution.
//
// Capturing never blocks the data path. Records are copied into a buffer
// of Options.BufferSize bytes (2 MiB by default) that one goroutine
// drains into the writer, a whole batch per Write; a packet whose record
// does not fit, because the writer fell behind, is left out of the
// capture and counted (Counts.Dropped), and the packet itself goes on
// untouched. A writer that fails stops the capture (WriteErr); the link
// goes on. Close flushes what is buffered, calls the writer's Flush if it
// has one (bufio.Writer), and joins the goroutine; it does not close the
// writer, which stays the caller's.
//
// The wrapper is transparent (link/doc.go): it passes every optional
// interface of the wrapped endpoint through, so capturing a link never
// switches a feature (busy polling, GSO, round flushes, counters) off.
// Its own counts are in Counts, not in the link's Stats.
package pcap

// Package mem is an in-memory NIC pair: two connected link endpoints for
// running two ustack stacks in one process, with no privileges and no
// kernel in the path.
//
// Each direction is a bounded ring, written by the sender's WritePackets
// and drained by a device goroutine owned by the receiving endpoint, which
// delivers to its stack in batches, like NAPI. A sender therefore never runs
// the peer's receive path inline, and a full ring is backpressure returned
// to the writer, never a silent drop: every packet is counted in link.Stats.
//
// Options model what distinguishes real devices in a benchmark: ring and
// batch sizes, MTU, checksum offload, GSO (whole TCP super-segments carried
// in-process, like veth with TSO and GRO), and a busy cost per WritePackets
// call and per packet that stands for a syscall.
//
// The pair is a plain wire: it injects no faults. For loss, duplication,
// reordering, corruption or delay, wrap an endpoint with package impair,
// ustack's one fault injector (stack/stacktest.Impaired does it for
// tests, ustack bench -impair for benchmarks).
//
// The endpoints carry raw IP packets (no link header, like TUN), so no
// link address resolution is needed.
package mem

// Package metrics exports ustack's counters as Prometheus metrics: every
// counter of any stack (gVisor's, each NIC's link and qdisc counters, the
// qdisc contention profile and WritePacket latency, busy polling), served
// over HTTP with the Go runtime's and the process's.
//
// It is the one package of the tree that imports Prometheus, so that an
// embedder of the library packages (stack, link/..., sched, poll, cache,
// forward) never links it in. Packages with counters of their own (serve's
// services, sandbox's relay) describe them with Family and NewFunc, which
// need no Prometheus import.
package metrics

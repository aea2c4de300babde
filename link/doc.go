// Package link holds what every ustack link endpoint shares: the counters
// each endpoint reports, and the interface through which package stack
// collects them without knowing the endpoint's type.
//
// The endpoints themselves live in the sub-packages: link/mem (an
// in-memory NIC pair for in-process benchmarks and tests), and, as they
// land, link/afpacket and link/tun.
package link

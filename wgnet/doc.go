// Package wgnet is a drop-in for wireguard-go's tun/netstack on ustack:
// CreateNetTUN has the same signature and *Net the same methods, so a
// program that embeds wireguard-go with a userspace network (wireproxy,
// wiretap, onetun and the like) switches by changing an import.
//
// Underneath is a ustack stack on a link/pktio endpoint: the device's
// Write coalesces TCP segments with GRO before the stack sees them, its
// Read cuts the stack's TSO super-segments into packets that fill the
// MTU, both move batches of packets per call (wireguard-go's
// tun/netstack moves one; a Read moves at most ReadLimit, so that the
// kernel sends wireguard-go's UDP GSO datagrams whole), and a qdisc of
// package sched turns a device that is not read fast enough into
// backpressure on the senders instead of drops.
//
// The conns are the stack's own (TCPConn is stack.TCPConn, PingConn the
// stack's ICMP echo socket), so their errors are translated once, by
// stack.TranslateError: a refused dial satisfies errors.Is(err,
// syscall.ECONNREFUSED). Names resolve through the tunnel's DNS servers
// as wireguard-go resolves them (LookupContextHost).
//
// With Options.Transparent the Net is an exit node's: its stack takes
// the flows the tunnel's peers send to any address, and
// forward.New(net.Stack(), forward.Relay(...), nil) relays them to the
// host's sockets, with no root and no kernel module (Example_exitNode).
package wgnet

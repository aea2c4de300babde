// Package stack builds a ready ustack host: a gVisor network stack with
// IPv4, IPv6, ARP, ICMPv4/v6, TCP and UDP, NICs over any link endpoint with
// a queueing discipline chosen by name (package sched), addresses, routes,
// TCP tuned as documented on TCPOptions, and Go's net interfaces on top
// (net.Conn, net.Listener, net.PacketConn through gVisor's gonet), in
// Go's net shapes: DialContext, Dial, Listen and ListenPacket take Go's
// network names and "host:port" addresses, Resolver resolves names
// through the stack (Options.DNS), and a *Stack is an x/net/proxy
// ContextDialer, so http.Transport and anything else that takes a
// dialer runs over it; ListenPacket also gives ICMP echo sockets. With
// Options.Cache on (the default) the conns keep the scratch gonet
// allocates on every call, so reads and writes that need not wait
// allocate nothing in our layer.
//
// Stats returns one snapshot of everything the host counts: gVisor's
// counters and those of our links. Close stops every goroutine the host
// started and releases every packet it held.
package stack

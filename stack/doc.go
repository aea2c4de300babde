// Package stack builds a ready ustack host: a gVisor network stack with
// IPv4, IPv6, ARP, ICMPv4/v6, TCP and UDP, NICs over any link endpoint with
// a queueing discipline chosen by name (package sched), addresses, routes,
// TCP tuned as documented on TCPOptions, and Go's net interfaces on top
// (net.Conn, net.Listener, net.PacketConn), in Go's net shapes:
// DialContext, Dial, Listen and ListenPacket take Go's network names and
// "host:port" addresses, Resolver resolves names through the stack
// (Options.DNS), and a *Stack is an x/net/proxy ContextDialer, so
// http.Transport and anything else that takes a dialer runs over it;
// ListenPacket also gives ICMP echo sockets, which Ping uses.
//
// The conns (TCP, UDP, ICMP echo) and listeners drive gVisor's endpoints
// themselves, as gVisor's gonet adapters do, with one deadline per
// direction; a listener's Accept has one too (SetDeadline). Their errors
// are *net.OpError whose Err is the errno a Linux socket gives
// (TranslateError), os.ErrDeadlineExceeded for a deadline, net.ErrClosed
// after Close, and io.EOF for a read past the end. With Options.Cache on
// (the default) the conns keep the scratch gonet allocates on every call,
// so reads and writes that need not wait allocate nothing in our layer.
//
// Stats returns one snapshot of everything the host counts: gVisor's
// counters and those of our links. Close stops every goroutine the host
// started and releases every packet it held.
package stack

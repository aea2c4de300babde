// Package forward takes the flows a stack's peers address to anything the
// stack does not own, and hands each one to a Handler before it is
// established: a TCP connection before its handshake completes (the
// handler may dial upstream first, then Accept or Reject), a UDP flow per
// peer socket with endpoint-independent mapping (full cone: replies may
// come from any address), and, optionally, ICMP echo requests. It is the
// engine of transparent proxies, VPN endpoints and of package sandbox.
//
// A Forwarder turns on promiscuous and spoofing mode on the stack's NICs
// and plugs gVisor's TCP forwarder and the stack's transparent handlers in;
// the stack must be built with stack.Options{Transparent: true}. Limits
// (flows in total, per protocol, TCP handshakes half-open, and a global
// buffer budget) refuse a flow rather than hang it: a TCP peer gets a
// reset, a UDP peer an ICMP port unreachable, and every refusal is
// counted by Reason (Stats). Flows lists what is open.
//
// The half-open limit exists so that SYNs to destinations that never
// answer cannot hold every slot; it must not refuse a burst to one that
// does. So a handshake (SYN to the handler's answer) counts against
// Options.MaxHalfOpen only while its destination has not shown that it
// answers, or once it has taken longer than Options.SlowHandshake (1 s,
// the initial retransmission timeout); each handshake answered in time
// lets two more to that destination run uncounted, as slow start grows a
// window. One destination holds a quarter of the counted slots at most,
// one peer (source address) half, so a dead destination, or one peer's
// flood, leaves room for the rest. A handshake that finds no room waits
// for it, up to SlowHandshake, and is then refused. A SYN with RST or FIN
// also set opens nothing: it is dropped, as Linux drops it, and counted
// (Malformed).
//
// Errors of the Forwarder's conns and dials are the errno where gVisor's
// error has one (stack.TranslateError: a reset is syscall.ECONNREFUSED),
// and a *RefusedError, with its Reason, where the Forwarder refused a
// flow itself.
//
// Relay is a ready Handler: it dials each flow's destination with any
// proxy.ContextDialer and relays, subject to a Policy. Every host socket
// it opens (TCP, UDP, pings, DNS over TCP) is opened as its *net.Dialer
// opens its own, with its Control and LocalAddr; UDP goes over any
// dialer that has packet sockets (PacketListener, or a userspace
// network's ListenUDP). When the dialer returns host sockets
// (*net.TCPConn, as &net.Dialer{} does), TCP is relayed without a buffer
// of ours: gVisor's receive buffer is written
// straight into the host socket and the host socket read straight into
// gVisor's send buffer. Nor does an idle flow hold a goroutine: each
// direction parks, the peer's on a callback in the endpoint's waiter
// queue and the host's in one epoll instance per Forwarder, and a
// goroutine runs only while data moves (and briefly after, for the next
// exchange). Other conns (a proxy's) are copied generically, in two
// goroutines per flow. Splice relays a conn of the Forwarder's the same
// way for a handler of its own, blocking until the flow ends;
// SpliceAsync leaves the flow to the Forwarder instead, so that flows the
// caller opened (Forwarder.DialTCP, as a port forward does) hold no
// goroutine while idle either.
package forward

// Package sandbox gives a network namespace its network through ustack:
// the namespace's only route is a TUN device whose other end is a ustack
// stack in this process, and every flow the sandbox opens is terminated
// there and relayed to a host socket, as slirp4netns and pasta do for
// rootless containers and as a TUN-based VPN endpoint does.
//
// What the sandbox sees: its address (198.18.0.100/24 and
// fd00:198:18::100/64 by default), a gateway (198.18.0.1, fd00:198:18::1)
// that stands for the host's loopback when AllowHostLoopback is set, and a
// DNS server (198.18.0.3) that relays to the host's resolver. TCP is
// accepted by gVisor's forwarder only after the host-side connection
// succeeded, so a refused or unreachable destination is a reset to the
// sandbox, as from the real peer. UDP goes through a NAT with
// endpoint-independent mapping: one host socket per sandbox socket, kept
// until it has been idle for UDPIdleTimeout. Port forwards carry host
// connections into the sandbox.
//
// An embedder calls sandbox.Init first thing in main: a sandboxed command
// with Config.ResolvConf is started through this program re-executed as a
// helper, which Init turns into the command (and which otherwise returns
// at once).
//
// The relaying itself is package forward's: a Forwarder on the stack with
// forward.Relay over host sockets (&net.Dialer{}), its policy built from
// the Config. The sandbox adds the namespace, the TUN device, the DNS
// relay's addresses, port forwards, configuration and metrics. With
// Config.Proxy the relay dials through a SOCKS5 or HTTP CONNECT proxy
// instead (package forward/upstream); UDP is then refused or, with
// Config.ProxyUDPDirect, relayed to host sockets, and DNS queries go to
// the upstream resolver over TCP through the proxy.
//
// Policy is secure by default: the host's loopback is unreachable without
// AllowHostLoopback, link-local, multicast and unspecified destinations
// are refused unless an Allow prefix covers them, Deny prefixes always
// win, and flows are limited in total, per protocol and while half-open.
// Every refusal is counted by reason (Stats).
//
// The relay copies each byte once per direction: from gVisor's receive
// buffer straight into the host socket, and from the host socket straight
// into gVisor's send buffer; no flow holds a buffer of its own. Port
// forwards are relayed the same way (forward.Splice).
package sandbox

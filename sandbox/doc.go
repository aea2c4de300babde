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
// The layouts of the programs rootless container tools start fit in the
// same Config: slirp4netns's (10.0.2.0/24, a TAP device, the device
// created or attached to as its creator left it with NoConfigure, router
// advertisements for SLAAC) and pasta's (the host's own addressing, a
// link-local IPv6 gateway, DNS at an address outside the prefix or none,
// the gateway relayed as the host's real one rather than standing for its
// loopback, guest address aliases that reach the host's own address,
// outbound addresses).
//
// An embedder calls sandbox.Init first thing in main: a sandboxed command
// with Config.ResolvConf is started through this program re-executed as a
// helper, which Init turns into the command (and which otherwise returns
// at once).
//
// Without root (effective uid not 0), New goes through a user namespace,
// as slirp4netns, pasta and rootlesskit do. Go cannot unshare a user
// namespace in its multithreaded process, nor setns into one, so a child
// does it: this program re-executed as a helper (Init), cloned into new
// user, network and mount namespaces (exec.Cmd's Cloneflags), the
// caller's uid and gid mapped to root inside (UsernsMapSelf, `unshare -r`)
// or, where newuidmap and /etc/subuid ranges exist, the caller's full
// range (UsernsMapAuto: the helper waits for newuidmap, then executes
// itself again to gain its capabilities as the namespace's root). With
// NetNS, the helper is started through nsenter(1) into the namespace and
// the user namespace that owns it (or UserNS), since setns into a user
// namespace is refused to a multithreaded process. The helper, root of
// the namespace, creates and configures the TUN device and passes its
// descriptor back over a unix socket (SCM_RIGHTS), which New adopts
// (tun.OpenFD): the descriptor keeps working outside the namespace, and
// this process never leaves its own. The helper then waits on the socket
// and, in Run, receives the command's standard files, binds the private
// resolv.conf in its mount namespace and executes the command, so the
// command is root of the user namespace, not of the host; closing the
// socket without a command ends it. Without root the device has one
// queue (Queues must be 1) and /dev/net/tun must be usable by everyone
// (mode 0666, as distributions ship it).
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
// With Config.Dialer the relay dials through the caller's own network
// instead of host sockets, such as a WireGuard tunnel's
// (wgnet.Net.Dialer): the sandbox's only way out is then the tunnel, and
// UDP and pings go through it where the dialer has packet and echo
// sockets (forward.PacketListener, forward.PingListener). With
// Config.Host no namespace is made: the device is served in this
// process's own namespace, as tun2socks does, and Interface and Mark keep
// the relay's host sockets off a route through it.
//
// New does it all in one process. A supervisor that serves from a
// process of its own splits it: OpenNamespace makes or joins the
// namespace and its device, Namespace.TakeDevice hands the device's
// queues over (to another process, as descriptors), and Serve serves them
// there; Isolate gives that process an empty root and Sandbox.Confine (or
// ConfineProcess, for a process that serves something else) confines it
// once its sockets are open. PortForwarder carries host connections to
// any dialer, for servers that are not a sandbox.
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

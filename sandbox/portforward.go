package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ustack-dev/ustack/forward"
)

// UnprivilegedPortStart is the lowest host port this process may bind
// without CAP_NET_BIND_SERVICE: the sysctl
// net.ipv4.ip_unprivileged_port_start, 1024 where it cannot be read (the
// kernel's default), 0 as root.
func UnprivilegedPortStart() int {
	if os.Geteuid() == 0 {
		return 0
	}
	start := 1024
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			start = n
		}
	}
	return start
}

// checkForwardPrivilege refuses, before anything is created, a forward
// from a host port this process may not bind (UnprivilegedPortStart).
func checkForwardPrivilege(fwds []PortForward) error {
	start := UnprivilegedPortStart()
	for _, f := range fwds {
		if p := int(f.Host.Port()); p != 0 && p < start {
			return fmt.Errorf("sandbox: port forward %v: binding host port %d needs CAP_NET_BIND_SERVICE (ports below %d, sysctl net.ipv4.ip_unprivileged_port_start): use a host port from %d up, run as root, or lower the sysctl", f, p, start, start)
		}
	}
	return nil
}

// hostForward is the PortForwarder's forward for one of the sandbox's:
// to the sandbox's address of the host client's IP version.
func (s *Sandbox) hostForward(f PortForward) HostForward {
	h := HostForward{UDP: f.UDP, Host: f.Host, To: netip.AddrPortFrom(s.cfg.Addr4.Addr(), f.Port).String()}
	if s.cfg.NoIPv6 {
		return h
	}
	to6 := netip.AddrPortFrom(s.cfg.Addr6.Addr(), f.Port).String()
	switch host := f.Host.Addr(); {
	case host.IsUnspecified():
		h.To6 = to6
	case host.Is6():
		h.To = to6
	}
	return h
}

// portForward is the sandbox's forward a HostForward of its stands for.
func portForward(h HostForward) PortForward {
	to, _ := netip.ParseAddrPort(h.To)
	return PortForward{UDP: h.UDP, Host: h.Host, Port: to.Port()}
}

// PortForwardInfo is a port forward added at run time (AddPortForward).
type PortForwardInfo struct {
	ID          int
	PortForward PortForward
	// Addr is where the host listens (the port picked, for port 0).
	Addr netip.AddrPort
}

// AddPortForward starts a port forward while the sandbox runs, as
// slirp4netns's add_hostfwd does, and returns its ID for RemovePortForward.
func (s *Sandbox) AddPortForward(f PortForward) (PortForwardInfo, error) {
	if f.Port == 0 || !f.Host.Addr().IsValid() {
		return PortForwardInfo{}, fmt.Errorf("sandbox: port forward %v: needs a host address and a sandbox port", f)
	}
	if f.Host.Addr().Is6() && s.cfg.NoIPv6 {
		return PortForwardInfo{}, fmt.Errorf("sandbox: port forward %v: IPv6 is off in the sandbox", f)
	}
	if err := checkForwardPrivilege([]PortForward{f}); err != nil {
		return PortForwardInfo{}, err
	}
	info, err := s.pf.Add(s.hostForward(f))
	if err != nil {
		return PortForwardInfo{}, fmt.Errorf("sandbox: port forward %v: %w", f, err)
	}
	return PortForwardInfo{ID: info.ID, PortForward: f, Addr: info.Addr}, nil
}

// startForward listens on the host for f (one of Config.PortForwards) and
// carries what arrives into the sandbox.
func (s *Sandbox) startForward(f PortForward) error {
	if _, err := s.pf.Listen(s.hostForward(f)); err != nil {
		return fmt.Errorf("sandbox: port forward %v: %w", f, err)
	}
	return nil
}

// RemovePortForward stops listening for the forward AddPortForward returned id
// for; connections it carried already go on.
func (s *Sandbox) RemovePortForward(id int) error {
	if err := s.pf.Remove(id); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}

// PortForwards lists the forwards added with AddPortForward, by ID.
func (s *Sandbox) PortForwards() []PortForwardInfo {
	var out []PortForwardInfo
	for _, info := range s.pf.List() {
		out = append(out, PortForwardInfo{ID: info.ID, PortForward: portForward(info.HostForward), Addr: info.Addr})
	}
	return out
}

// PortForwardAddrs returns where the host listens for each of
// Config.PortForwards, in order (a forward given port 0 gets one picked).
func (s *Sandbox) PortForwardAddrs() []netip.AddrPort { return s.pf.Addrs() }

// PortForwarder listens on host sockets and carries the TCP connections
// and UDP datagrams that arrive there to a destination behind a stack: a
// sandbox's port forwards (slirp4netns's hostfwd, pasta's -t and -u) and
// `ustack wg`'s forwards into its tunnel are its users. It dials either
// through a Forwarder, whose flows count against its limits and whose
// idle TCP flows hold no goroutine (forward.SpliceAsync), or through any
// dialer (a tunnel's wgnet.Net), relaying those in goroutines of its own.
// Each UDP client of a forward gets a socket of its own on the far side,
// which ends after the idle timeout. Safe for concurrent use.
type PortForwarder struct {
	fw             *forward.Forwarder
	dial           DialFunc
	connectTimeout time.Duration
	udpIdle        time.Duration

	ctx    context.Context // cancelled by Close: ends connects
	cancel context.CancelFunc
	// conns counts TCP connections and UDP mappings made, failed those
	// refused (the far side's dial failed, or the limits).
	conns, failed atomic.Uint64

	mu      sync.Mutex
	closed  bool
	fixed   []io.Closer      // Listen's listeners, and the API's
	addrs   []netip.AddrPort // where Listen's listen, in order
	runtime map[int]*runtimeForward
	nextID  int                       // the last ID Add gave
	relayed map[*relayedFlow]struct{} // TCP flows a DialFunc's, relayed by our goroutines
	udp     map[*udpForward]struct{}  // every UDP forward's mappings, ended by Close
	wg      sync.WaitGroup            // every goroutine of ours
	once    sync.Once
}

// DialFunc connects to address ("host:port") over network ("tcp" or
// "udp"), as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// PortForwarderOptions configures NewPortForwarder. Exactly one of
// Forwarder and Dial is set; a zero duration means its default.
type PortForwarderOptions struct {
	// Forwarder carries the flows as its own (Forwarder.DialTCP and
	// DialUDP): counted against its limits, in its counters, and aborted
	// by its Close. Every forward's To is then an IP address and port.
	Forwarder *forward.Forwarder
	// Dial carries them otherwise; a forward's To may then name a host,
	// which Dial resolves.
	Dial DialFunc
	// ConnectTimeout bounds the connect of one TCP connection
	// (DefaultConnectTimeout); UDPIdleTimeout ends a UDP client's mapping
	// idle that long (forward.DefaultUDPIdleTimeout).
	ConnectTimeout, UDPIdleTimeout time.Duration
}

// HostForward is one forward of a PortForwarder.
type HostForward struct {
	// UDP forwards datagrams; otherwise TCP connections.
	UDP bool
	// Host is where the host listens; port 0 picks one.
	Host netip.AddrPort
	// To is where the flows go, "host:port": an IP address and port
	// through a Forwarder, and through a Dial also a name it resolves.
	To string
	// To6, if not empty, is where the flows of IPv6 clients go instead
	// (a sandbox's IPv6 address, for a forward on a wildcard Host).
	To6 string
}

// String formats f for messages: HOST->TO[/udp].
func (f HostForward) String() string {
	s := f.Host.String() + "->" + f.To
	if f.To6 != "" {
		s += "," + f.To6
	}
	if f.UDP {
		s += "/udp"
	}
	return s
}

// HostForwardInfo is a forward added at run time (PortForwarder.Add).
type HostForwardInfo struct {
	ID int
	HostForward
	// Addr is where the host listens (the port picked, for port 0).
	Addr netip.AddrPort
}

// errClosed is what a closed PortForwarder answers.
var errClosed = errors.New("the port forwarder is closed")

// runtimeForward is a forward added by Add, with its listener.
type runtimeForward struct {
	info HostForwardInfo
	c    io.Closer
}

// NewPortForwarder returns a PortForwarder with no forward yet.
func NewPortForwarder(o *PortForwarderOptions) (*PortForwarder, error) {
	var opts PortForwarderOptions
	if o != nil {
		opts = *o
	}
	if (opts.Forwarder == nil) == (opts.Dial == nil) {
		return nil, errors.New("sandbox: a PortForwarder dials through a Forwarder or a Dial function: give one of them")
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.UDPIdleTimeout <= 0 {
		opts.UDPIdleTimeout = forward.DefaultUDPIdleTimeout
	}
	p := &PortForwarder{
		fw: opts.Forwarder, dial: opts.Dial, connectTimeout: opts.ConnectTimeout, udpIdle: opts.UDPIdleTimeout,
		runtime: map[int]*runtimeForward{}, relayed: map[*relayedFlow]struct{}{}, udp: map[*udpForward]struct{}{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Listen starts f for the PortForwarder's lifetime and returns where the
// host listens.
func (p *PortForwarder) Listen(f HostForward) (netip.AddrPort, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return netip.AddrPort{}, errClosed
	}
	c, addr, err := p.listenLocked(f)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p.fixed = append(p.fixed, c)
	p.addrs = append(p.addrs, addr)
	return addr, nil
}

// Add starts f while the PortForwarder runs and returns its ID for
// Remove.
func (p *PortForwarder) Add(f HostForward) (HostForwardInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return HostForwardInfo{}, errClosed
	}
	c, addr, err := p.listenLocked(f)
	if err != nil {
		return HostForwardInfo{}, err
	}
	p.nextID++
	info := HostForwardInfo{ID: p.nextID, HostForward: f, Addr: addr}
	p.runtime[info.ID] = &runtimeForward{info: info, c: c}
	return info, nil
}

// Remove stops listening for the forward Add returned id for;
// connections it carried already go on.
func (p *PortForwarder) Remove(id int) error {
	p.mu.Lock()
	rf := p.runtime[id]
	delete(p.runtime, id)
	p.mu.Unlock()
	if rf == nil {
		return fmt.Errorf("no port forward with id %d", id)
	}
	return rf.c.Close()
}

// List lists the forwards added with Add, by ID.
func (p *PortForwarder) List() []HostForwardInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []HostForwardInfo
	for _, rf := range p.runtime {
		out = append(out, rf.info)
	}
	slices.SortFunc(out, func(a, b HostForwardInfo) int { return a.ID - b.ID })
	return out
}

// Addrs returns where the host listens for each forward Listen started,
// in order.
func (p *PortForwarder) Addrs() []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.addrs)
}

// Counts returns the TCP connections and UDP mappings the forwards made,
// and those they refused because the far side could not be reached (or,
// through a Forwarder, its limits refused them).
func (p *PortForwarder) Counts() (conns, failed uint64) {
	if p == nil {
		return 0, 0
	}
	return p.conns.Load(), p.failed.Load()
}

// Close stops every forward, resets the TCP connections it relays itself
// (a Forwarder's are its own to close), ends the UDP mappings and waits
// for every goroutine it started. Idempotent.
func (p *PortForwarder) Close() error {
	var errs []error
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		closers := p.fixed
		for _, rf := range p.runtime {
			closers = append(closers, rf.c)
		}
		p.runtime = nil
		relayed := p.relayed
		p.relayed = nil
		udp := p.udp
		p.udp = nil
		p.mu.Unlock()
		p.cancel()
		for _, c := range closers {
			if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		for fl := range relayed {
			fl.reset()
		}
		for u := range udp {
			u.closeAll()
		}
		p.wg.Wait()
	})
	return errors.Join(errs...)
}

// begin registers a goroutine of ours, or reports that the forwarder is
// closing.
func (p *PortForwarder) begin() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// listenLocked listens on the host for f and starts the goroutine that
// carries what arrives (one of p.wg's, added under p.mu while not
// closed). Closing the returned listener ends it.
func (p *PortForwarder) listenLocked(f HostForward) (io.Closer, netip.AddrPort, error) {
	if !f.Host.Addr().IsValid() || f.To == "" {
		return nil, netip.AddrPort{}, errors.New("a forward needs a host address and a destination")
	}
	if p.fw != nil {
		for _, to := range []string{f.To, f.To6} {
			if _, err := netip.ParseAddrPort(to); to != "" && err != nil {
				return nil, netip.AddrPort{}, fmt.Errorf("destination %q: through a Forwarder, a destination is an IP address and port", to)
			}
		}
	}
	if f.UDP {
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(f.Host))
		if err != nil {
			return nil, netip.AddrPort{}, err
		}
		u := &udpForward{p: p, f: f, pc: pc, peers: map[netip.AddrPort]net.Conn{}}
		p.udp[u] = struct{}{}
		p.wg.Add(1)
		go u.loop()
		return pc, pc.LocalAddr().(*net.UDPAddr).AddrPort(), nil
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(f.Host))
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	p.wg.Add(1)
	go acceptEach(p, ln.AcceptTCP, func(c *net.TCPConn) { p.forwardTCP(f, c) })
	return ln, ln.Addr().(*net.TCPAddr).AddrPort(), nil
}

// to is where a flow of f from client goes.
func (f HostForward) to(client netip.Addr) string {
	if client = client.Unmap(); f.To6 != "" && client.Is6() {
		return f.To6
	}
	return f.To
}

// acceptEach is the forwarder's one accept loop (port forwards, the API
// socket): it accepts until the listener is closed and serves each conn
// on a goroutine counted in p.wg, as is the loop itself (the caller has
// added it). Once the forwarder is closing it closes what it accepts.
func acceptEach[C io.Closer](p *PortForwarder, accept func() (C, error), serve func(C)) {
	defer p.wg.Done()
	for {
		c, err := accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: back off, as net/http does.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if !p.begin() {
			c.Close()
			return
		}
		go func() {
			defer p.wg.Done()
			serve(c)
		}()
	}
}

// forwardTCP connects to f's destination for one host connection and
// relays it. Through a Forwarder the relay belongs to the Forwarder from
// then on, which closes it: this goroutine returns once the connection
// goes idle, and an idle forwarded connection holds no goroutine
// (forward.SpliceAsync). Through a Dial, this goroutine relays the
// connection until it ends, and Close resets it.
func (p *PortForwarder) forwardTCP(f HostForward, c *net.TCPConn) {
	to := f.to(c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr())
	ctx, cancel := context.WithTimeout(p.ctx, p.connectTimeout)
	var far net.Conn
	var err error
	if p.fw != nil {
		far, err = p.fw.DialTCP(ctx, netip.MustParseAddrPort(to))
	} else {
		far, err = p.dial(ctx, "tcp", to)
	}
	cancel()
	if err != nil {
		p.failed.Add(1)
		c.SetLinger(0)
		c.Close()
		return
	}
	p.conns.Add(1)
	if p.fw != nil {
		// An error means the Forwarder closed meanwhile; it reset both.
		forward.SpliceAsync(far, c)
		return
	}
	fl := &relayedFlow{host: c, far: far}
	p.mu.Lock()
	if p.relayed == nil { // closing
		p.mu.Unlock()
		fl.reset()
		return
	}
	p.relayed[fl] = struct{}{}
	p.mu.Unlock()
	forward.Splice(far, c)
	p.mu.Lock()
	delete(p.relayed, fl)
	p.mu.Unlock()
}

// relayedFlow is a TCP connection a DialFunc made, relayed by one of our
// goroutines until it ends or Close resets it.
type relayedFlow struct {
	host *net.TCPConn
	far  net.Conn
}

// reset ends the flow at once, with a reset to the host's client (the
// far conn's Close aborts it if it can).
func (fl *relayedFlow) reset() {
	fl.host.SetLinger(0)
	fl.host.Close()
	fl.far.Close()
}

// dialUDP opens a UDP mapping to to for one host client.
func (p *PortForwarder) dialUDP(to string) (net.Conn, error) {
	if p.fw != nil {
		return p.fw.DialUDP(netip.MustParseAddrPort(to))
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.connectTimeout)
	defer cancel()
	return p.dial(ctx, "udp", to)
}

// udpForward maps each host client of a UDP forward to a socket of its
// own on the far side, connected to the forward's destination.
type udpForward struct {
	p  *PortForwarder
	f  HostForward
	pc *net.UDPConn

	mu    sync.Mutex
	peers map[netip.AddrPort]net.Conn
}

func (u *udpForward) loop() {
	p := u.p
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.udp, u)
		p.mu.Unlock()
		u.closeAll()
	}()
	buf := make([]byte, 1<<16)
	for {
		n, client, err := u.pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
		c := u.peer(client)
		if c == nil {
			continue
		}
		c.Write(buf[:n])
	}
}

// peer returns client's mapping, making it if need be.
func (u *udpForward) peer(client netip.AddrPort) net.Conn {
	p := u.p
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.peers[client]; c != nil {
		return c
	}
	c, err := p.dialUDP(u.f.to(client.Addr()))
	if err != nil || !p.begin() {
		if c != nil {
			c.Close()
		}
		p.failed.Add(1)
		return nil
	}
	u.peers[client] = c
	p.conns.Add(1)
	go u.replyLoop(client, c)
	return c
}

// replyLoop carries the far side's answers back to one host client
// until the mapping has been idle for the idle timeout.
func (u *udpForward) replyLoop(client netip.AddrPort, c net.Conn) {
	p := u.p
	defer p.wg.Done()
	defer func() {
		u.mu.Lock()
		delete(u.peers, client)
		u.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, 1<<16)
	for {
		c.SetReadDeadline(time.Now().Add(p.udpIdle))
		n, err := c.Read(buf)
		if err != nil {
			return // idle for the timeout, or closed
		}
		u.pc.WriteToUDPAddrPort(buf[:n], client)
	}
}

// closeAll ends every mapping (their loops exit on the closed conns).
func (u *udpForward) closeAll() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.peers {
		c.Close()
	}
}

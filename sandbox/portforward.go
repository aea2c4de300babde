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
	"time"

	"github.com/ustack-dev/ustack/forward"
)

// checkForwardPrivilege refuses, before anything is created, a forward
// from a host port this process may not bind: below the sysctl
// net.ipv4.ip_unprivileged_port_start (1024 by default) without root.
func checkForwardPrivilege(fwds []PortForward) error {
	if os.Geteuid() == 0 {
		return nil
	}
	start := 1024
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			start = n
		}
	}
	for _, f := range fwds {
		if p := int(f.Host.Port()); p != 0 && p < start {
			return fmt.Errorf("sandbox: port forward %v: binding host port %d needs CAP_NET_BIND_SERVICE (ports below %d, sysctl net.ipv4.ip_unprivileged_port_start): use a host port from %d up, run as root, or lower the sysctl", f, p, start, start)
		}
	}
	return nil
}

// startForward listens on the host for f (one of Config.PortForwards) and
// carries what arrives into the sandbox.
func (s *Sandbox) startForward(f PortForward) error {
	c, addr, err := s.listenForward(f)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, c)
	s.fwdAddrs = append(s.fwdAddrs, addr)
	return nil
}

// listenForward listens on the host for f and starts the goroutine that
// carries what arrives into the sandbox (one of s.wg's: the caller makes
// sure Close is not waiting yet). Closing the returned listener ends it.
func (s *Sandbox) listenForward(f PortForward) (io.Closer, netip.AddrPort, error) {
	if f.UDP {
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(f.Host))
		if err != nil {
			return nil, netip.AddrPort{}, fmt.Errorf("sandbox: port forward %v: %w", f, err)
		}
		fw := &udpForward{s: s, f: f, pc: pc, peers: map[netip.AddrPort]net.Conn{}}
		s.wg.Add(1)
		go fw.loop()
		return pc, pc.LocalAddr().(*net.UDPAddr).AddrPort(), nil
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(f.Host))
	if err != nil {
		return nil, netip.AddrPort{}, fmt.Errorf("sandbox: port forward %v: %w", f, err)
	}
	s.wg.Add(1)
	go acceptEach(s, ln.AcceptTCP, func(c *net.TCPConn) { s.forwardTCP(f, c) })
	return ln, ln.Addr().(*net.TCPAddr).AddrPort(), nil
}

// PortForwardInfo is a port forward added at run time (AddPortForward).
type PortForwardInfo struct {
	ID          int
	PortForward PortForward
	// Addr is where the host listens (the port picked, for port 0).
	Addr netip.AddrPort
}

// runtimeForward is a forward added by AddPortForward, with its listener.
type runtimeForward struct {
	info PortForwardInfo
	c    io.Closer
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return PortForwardInfo{}, errors.New("sandbox: closed")
	}
	c, addr, err := s.listenForward(f)
	if err != nil {
		return PortForwardInfo{}, err
	}
	if s.runtime == nil {
		s.runtime = map[int]*runtimeForward{}
	}
	s.nextFwd++
	info := PortForwardInfo{ID: s.nextFwd, PortForward: f, Addr: addr}
	s.runtime[info.ID] = &runtimeForward{info: info, c: c}
	return info, nil
}

// RemovePortForward stops listening for the forward AddPortForward returned id
// for; connections it carried already go on.
func (s *Sandbox) RemovePortForward(id int) error {
	s.mu.Lock()
	rf := s.runtime[id]
	delete(s.runtime, id)
	s.mu.Unlock()
	if rf == nil {
		return fmt.Errorf("sandbox: no port forward with id %d", id)
	}
	return rf.c.Close()
}

// PortForwards lists the forwards added with AddPortForward, by ID.
func (s *Sandbox) PortForwards() []PortForwardInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PortForwardInfo
	for _, rf := range s.runtime {
		out = append(out, rf.info)
	}
	slices.SortFunc(out, func(a, b PortForwardInfo) int { return a.ID - b.ID })
	return out
}

// PortForwardAddrs returns where the host listens for each of
// Config.PortForwards, in order (a forward given port 0 gets one picked).
func (s *Sandbox) PortForwardAddrs() []netip.AddrPort {
	return append([]netip.AddrPort(nil), s.fwdAddrs...)
}

// sandboxAddr is the sandbox address a forward from a host client goes to:
// the family of the listening address, or of the client for a wildcard.
func (s *Sandbox) sandboxAddr(f PortForward, client netip.Addr) netip.Addr {
	v6 := f.Host.Addr().Is6()
	if f.Host.Addr().IsUnspecified() {
		v6 = client.Is6() && !client.Is4In6()
	}
	if v6 && !s.cfg.NoIPv6 {
		return s.cfg.Addr6.Addr()
	}
	return s.cfg.Addr4.Addr()
}

// acceptEach is the sandbox's one accept loop (port forwards, the API
// socket): it accepts until the listener is closed and serves each conn on
// a goroutine counted in s.wg, as is the loop itself (the caller has
// added it). Once the sandbox is closing it closes what it accepts.
func acceptEach[C io.Closer](s *Sandbox, accept func() (C, error), serve func(C)) {
	defer s.wg.Done()
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
		if !s.begin() {
			c.Close()
			return
		}
		go func() {
			defer s.wg.Done()
			serve(c)
		}()
	}
}

// forwardTCP connects into the sandbox for one host connection and
// starts relaying it (a flow of the Forwarder's, within its limits). The
// relay belongs to the Forwarder from then on, which Close closes: this
// goroutine returns once the connection goes idle, and an idle forwarded
// connection holds no goroutine (forward.SpliceAsync).
func (s *Sandbox) forwardTCP(f PortForward, c *net.TCPConn) {
	client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	dst := netip.AddrPortFrom(s.sandboxAddr(f, client), f.Port)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ConnectTimeout)
	sc, err := s.fw.DialTCP(ctx, dst)
	cancel()
	if err != nil {
		s.c.fwdFailed.Add(1)
		c.SetLinger(0)
		c.Close()
		return
	}
	s.c.fwdConns.Add(1)
	// An error means the Forwarder closed meanwhile; it reset both.
	forward.SpliceAsync(sc, c)
}

// udpForward maps each host client of a UDP forward to a gVisor socket
// connected to the sandbox port.
type udpForward struct {
	s  *Sandbox
	f  PortForward
	pc *net.UDPConn

	mu    sync.Mutex
	peers map[netip.AddrPort]net.Conn
}

func (u *udpForward) loop() {
	s := u.s
	defer s.wg.Done()
	defer u.closeAll()
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

// peer returns client's mapping, making it (a UDP flow of the
// Forwarder's, within its limits) if need be.
func (u *udpForward) peer(client netip.AddrPort) net.Conn {
	s := u.s
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.peers[client]; c != nil {
		return c
	}
	dst := netip.AddrPortFrom(s.sandboxAddr(u.f, client.Addr()), u.f.Port)
	c, err := s.fw.DialUDP(dst)
	if err != nil || !s.begin() {
		if c != nil {
			c.Close()
		}
		s.c.fwdFailed.Add(1)
		return nil
	}
	u.peers[client] = c
	s.c.fwdConns.Add(1)
	go u.replyLoop(client, c)
	return c
}

// replyLoop carries the sandbox's answers back to one host client until
// the mapping has been idle for UDPIdleTimeout.
func (u *udpForward) replyLoop(client netip.AddrPort, c net.Conn) {
	s := u.s
	defer s.wg.Done()
	defer func() {
		u.mu.Lock()
		delete(u.peers, client)
		u.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, 1<<16)
	for {
		c.SetReadDeadline(time.Now().Add(s.cfg.UDPIdleTimeout))
		n, err := c.Read(buf)
		if err != nil {
			return // idle for UDPIdleTimeout, or closed
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

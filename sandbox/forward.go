package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// startForward listens on the host for f and carries what arrives into
// the sandbox.
func (s *Sandbox) startForward(f Forward) error {
	if f.UDP {
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(f.Host))
		if err != nil {
			return fmt.Errorf("sandbox: port forward %v: %w", f, err)
		}
		fw := &udpForward{s: s, f: f, pc: pc, peers: map[netip.AddrPort]*gonet.UDPConn{}}
		s.closers = append(s.closers, pc)
		s.fwdAddrs = append(s.fwdAddrs, pc.LocalAddr().(*net.UDPAddr).AddrPort())
		s.wg.Add(1)
		go fw.loop()
		return nil
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(f.Host))
	if err != nil {
		return fmt.Errorf("sandbox: port forward %v: %w", f, err)
	}
	s.closers = append(s.closers, ln)
	s.fwdAddrs = append(s.fwdAddrs, ln.Addr().(*net.TCPAddr).AddrPort())
	s.wg.Add(1)
	go s.acceptLoop(f, ln)
	return nil
}

// ForwardAddrs returns where the host listens for each of
// Config.Forwards, in order (a forward given port 0 gets one picked).
func (s *Sandbox) ForwardAddrs() []netip.AddrPort {
	return append([]netip.AddrPort(nil), s.fwdAddrs...)
}

// sandboxAddr is the sandbox address a forward from a host client goes to:
// the family of the listening address, or of the client for a wildcard.
func (s *Sandbox) sandboxAddr(f Forward, client netip.Addr) netip.Addr {
	v6 := f.Host.Addr().Is6()
	if f.Host.Addr().IsUnspecified() {
		v6 = client.Is6() && !client.Is4In6()
	}
	if v6 && !s.cfg.NoIPv6 {
		return s.cfg.Addr6.Addr()
	}
	return s.cfg.Addr4.Addr()
}

func (s *Sandbox) acceptLoop(f Forward, ln *net.TCPListener) {
	defer s.wg.Done()
	for {
		c, err := ln.AcceptTCP()
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
			s.forwardTCP(f, c)
		}()
	}
}

// forwardTCP connects into the sandbox for one host connection.
func (s *Sandbox) forwardTCP(f Forward, c *net.TCPConn) {
	if r, ok := s.reserveFlow(&s.c.tcpFlows, s.cfg.MaxTCP, TCPLimit); !ok {
		s.refuse(r)
		c.SetLinger(0)
		c.Close()
		return
	}
	client := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	dst := netip.AddrPortFrom(s.sandboxAddr(f, client), f.Port)
	ep, wq, err := s.connectSandbox(dst)
	if err != nil {
		s.c.tcpFlows.Add(-1)
		s.c.fwdFailed.Add(1)
		c.SetLinger(0)
		c.Close()
		return
	}
	s.c.fwdConns.Add(1)
	s.c.tcpOpened.Add(1)
	s.relay(ep, wq, c)
}

// connectSandbox opens a TCP connection from ustack to dst in the sandbox.
func (s *Sandbox) connectSandbox(dst netip.AddrPort) (tcpip.Endpoint, *waiter.Queue, error) {
	proto := header.IPv4ProtocolNumber
	if dst.Addr().Is6() {
		proto = header.IPv6ProtocolNumber
	}
	wq := new(waiter.Queue)
	ep, terr := s.st.GVisor().NewEndpoint(tcp.ProtocolNumber, proto, wq)
	if terr != nil {
		return nil, nil, errors.New(terr.String())
	}
	entry, ch := waiter.NewChannelEntry(waiter.WritableEvents | waiter.EventHUp | waiter.EventErr)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	terr = ep.Connect(tcpip.FullAddress{NIC: s.nic, Addr: tcpip.AddrFromSlice(dst.Addr().AsSlice()), Port: dst.Port()})
	if _, started := terr.(*tcpip.ErrConnectStarted); started {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ConnectTimeout)
		select {
		case <-ch:
			terr = ep.LastError()
		case <-ctx.Done():
			terr = &tcpip.ErrTimeout{}
		}
		cancel()
	}
	if terr != nil {
		ep.Abort()
		ep.Close()
		return nil, nil, errors.New(terr.String())
	}
	return ep, wq, nil
}

// udpForward maps each host client of a UDP forward to a gVisor socket
// connected to the sandbox port.
type udpForward struct {
	s  *Sandbox
	f  Forward
	pc *net.UDPConn

	mu    sync.Mutex
	peers map[netip.AddrPort]*gonet.UDPConn
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
		if _, err := c.Write(buf[:n]); err == nil {
			s.c.udpPktUp.Add(1)
		}
	}
}

// peer returns client's mapping, making it if the limits allow.
func (u *udpForward) peer(client netip.AddrPort) *gonet.UDPConn {
	s := u.s
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.peers[client]; c != nil {
		return c
	}
	if r, ok := s.reserveFlow(&s.c.udpFlows, s.cfg.MaxUDP, UDPLimit); !ok {
		s.refuse(r)
		return nil
	}
	dst := netip.AddrPortFrom(s.sandboxAddr(u.f, client.Addr()), u.f.Port)
	proto := header.IPv4ProtocolNumber
	if dst.Addr().Is6() {
		proto = header.IPv6ProtocolNumber
	}
	c, err := gonet.DialUDP(s.st.GVisor(), nil, &tcpip.FullAddress{NIC: s.nic, Addr: tcpip.AddrFromSlice(dst.Addr().AsSlice()), Port: dst.Port()}, proto)
	if err != nil || !s.begin() {
		if c != nil {
			c.Close()
		}
		s.c.udpFlows.Add(-1)
		s.c.fwdFailed.Add(1)
		return nil
	}
	u.peers[client] = c
	s.c.fwdConns.Add(1)
	s.c.udpOpened.Add(1)
	go u.replyLoop(client, c)
	return c
}

// replyLoop carries the sandbox's answers back to one host client until
// the mapping has been idle for UDPIdleTimeout.
func (u *udpForward) replyLoop(client netip.AddrPort, c *gonet.UDPConn) {
	s := u.s
	defer s.wg.Done()
	defer func() {
		u.mu.Lock()
		delete(u.peers, client)
		u.mu.Unlock()
		c.Close()
		s.c.udpFlows.Add(-1)
	}()
	buf := make([]byte, 1<<16)
	for {
		c.SetReadDeadline(time.Now().Add(s.cfg.UDPIdleTimeout))
		n, err := c.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return
			}
			return
		}
		if _, err := u.pc.WriteToUDPAddrPort(buf[:n], client); err == nil {
			s.c.udpPktDn.Add(1)
		}
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

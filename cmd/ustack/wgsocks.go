package main

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ustack-dev/ustack/forward"
)

// SOCKS5's numbers (RFC 1928, and RFC 1929 for the user and password).
const (
	socksVersion     = 5
	socksAuthVersion = 1 // of RFC 1929's subnegotiation

	socksNoAuth       = 0
	socksUserPass     = 2
	socksNoAcceptable = 0xff

	socksConnect      = 1
	socksBind         = 2
	socksUDPAssociate = 3

	socksIPv4   = 1
	socksDomain = 3
	socksIPv6   = 4

	socksSucceeded        = 0
	socksGeneralFailure   = 1
	socksNetUnreachable   = 3
	socksHostUnreachable  = 4
	socksConnRefused      = 5
	socksCmdNotSupported  = 7
	socksAddrNotSupported = 8
)

// socksHandshakeTimeout bounds a client's greeting, authentication and
// request: a limit for a client that stalls, far above any real one's
// round trips.
const socksHandshakeTimeout = 30 * time.Second

// socksMaxNames bounds the names one UDP association keeps resolved:
// a client sends to a handful; more are looked up again.
const socksMaxNames = 64

// socksAddr is a destination in a SOCKS5 request or datagram header: an
// address, or a name to resolve, and a port.
type socksAddr struct {
	ip   netip.Addr // valid for socksIPv4 and socksIPv6
	name string     // for socksDomain
	port uint16
}

// String returns a as host:port, for a dialer.
func (a socksAddr) String() string {
	host := a.name
	if a.ip.IsValid() {
		host = a.ip.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(int(a.port)))
}

// socksError is a request the server refuses, with the reply code that
// says why.
type socksError struct {
	code byte
	msg  string
}

func (e *socksError) Error() string { return "socks5: " + e.msg }

// readSOCKSGreeting reads the client's version and offered methods.
func readSOCKSGreeting(r io.Reader) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if h[0] != socksVersion {
		return nil, fmt.Errorf("socks5: version %d: only SOCKS5 is served", h[0])
	}
	methods := make([]byte, h[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return nil, err
	}
	return methods, nil
}

// readSOCKSAuth reads RFC 1929's user and password.
func readSOCKSAuth(r io.Reader) (user, pass string, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", "", err
	}
	if h[0] != socksAuthVersion {
		return "", "", fmt.Errorf("socks5: user/password version %d: want 1", h[0])
	}
	u := make([]byte, int(h[1])+1) // the name, then the password's length
	if _, err := io.ReadFull(r, u); err != nil {
		return "", "", err
	}
	p := make([]byte, u[h[1]])
	if _, err := io.ReadFull(r, p); err != nil {
		return "", "", err
	}
	return string(u[:h[1]]), string(p), nil
}

// readSOCKSRequest reads a request: VER CMD RSV ATYP DST.ADDR DST.PORT.
// A *socksError carries the reply code for what it cannot take.
func readSOCKSRequest(r io.Reader) (cmd byte, dst socksAddr, err error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, dst, err
	}
	if h[0] != socksVersion {
		return 0, dst, &socksError{socksGeneralFailure, fmt.Sprintf("request version %d: want 5", h[0])}
	}
	dst, err = readSOCKSAddr(r, h[3])
	return h[1], dst, err
}

// readSOCKSAddr reads an address of type atyp and its port.
func readSOCKSAddr(r io.Reader, atyp byte) (socksAddr, error) {
	var a socksAddr
	var b []byte
	switch atyp {
	case socksIPv4:
		b = make([]byte, 4+2)
	case socksIPv6:
		b = make([]byte, 16+2)
	case socksDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return a, err
		}
		if n[0] == 0 {
			return a, &socksError{socksAddrNotSupported, "an empty domain name"}
		}
		b = make([]byte, int(n[0])+2)
	default:
		return a, &socksError{socksAddrNotSupported, fmt.Sprintf("address type %d: want 1 (IPv4), 3 (domain) or 4 (IPv6)", atyp)}
	}
	if _, err := io.ReadFull(r, b); err != nil {
		return a, err
	}
	host := b[:len(b)-2]
	a.port = binary.BigEndian.Uint16(b[len(b)-2:])
	if atyp == socksDomain {
		a.name = string(host)
		if ip, err := netip.ParseAddr(a.name); err == nil {
			// Some clients send addresses as names.
			a.ip, a.name = ip.Unmap(), ""
		}
		return a, nil
	}
	a.ip, _ = netip.AddrFromSlice(host)
	a.ip = a.ip.Unmap()
	return a, nil
}

// parseSOCKSDatagram reads a UDP ASSOCIATE datagram's header, RSV(2)
// FRAG ATYP DST.ADDR DST.PORT, and returns its destination and payload.
// A fragment (FRAG not 0) is an error: fragmentation is optional and
// not served.
func parseSOCKSDatagram(b []byte) (socksAddr, []byte, error) {
	if len(b) < 4 {
		return socksAddr{}, nil, errors.New("socks5: datagram shorter than its header")
	}
	if b[2] != 0 {
		return socksAddr{}, nil, errors.New("socks5: a fragment: fragmentation is not served")
	}
	r := strings.NewReader(string(b[4:])) // headers are short: the copy is small beside the lookup
	a, err := readSOCKSAddr(r, b[3])
	if err != nil {
		return socksAddr{}, nil, err
	}
	return a, b[len(b)-r.Len():], nil
}

// appendSOCKSAddr appends a's type, address and port.
func appendSOCKSAddr(b []byte, a netip.AddrPort) []byte {
	ip := a.Addr().Unmap()
	if ip.Is4() {
		b = append(b, socksIPv4)
	} else {
		b = append(b, socksIPv6)
	}
	b = append(b, ip.AsSlice()...)
	return binary.BigEndian.AppendUint16(b, a.Port())
}

// socksReply is a reply to a request: code, and the bound address.
func socksReply(code byte, bound netip.AddrPort) []byte {
	if !bound.IsValid() {
		bound = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	}
	return appendSOCKSAddr([]byte{socksVersion, code, 0}, bound)
}

// socksCode is the reply code for a failed dial.
func socksCode(err error) byte {
	var ne net.Error
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return socksConnRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return socksNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &dns), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return socksHostUnreachable
	}
	return socksGeneralFailure
}

// socksServer is a SOCKS5 server (RFC 1928) whose connections and
// datagrams go into the tunnel: CONNECT and UDP ASSOCIATE (BIND is
// refused), with no authentication or, given auth, a user and password
// (RFC 1929). Close stops it and ends every connection and association.
type socksServer struct {
	ln             net.Listener
	d              *tunnelDialer
	auth           string // "USER:PASSWORD"; "" for none
	connectTimeout time.Duration

	// conns counts CONNECTs made, failed those the tunnel refused, and
	// assocs UDP associations.
	conns, failed, assocs atomic.Uint64

	mu     sync.Mutex
	closed bool
	active map[io.Closer]struct{} // the clients' connections and sockets
	wg     sync.WaitGroup         // every goroutine of ours
}

// newSOCKSServer serves SOCKS5 on ln, which it takes over, until Close.
func newSOCKSServer(ln net.Listener, d *tunnelDialer, auth string, connectTimeout time.Duration) *socksServer {
	s := &socksServer{ln: ln, d: d, auth: auth, connectTimeout: connectTimeout, active: map[io.Closer]struct{}{}}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// track registers c to close at Close; it reports false once the server
// is closing (c is closed then).
func (s *socksServer) track(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.active[c] = struct{}{}
	return true
}

// begin registers n goroutines of ours, or reports that the server is
// closing.
func (s *socksServer) begin(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(n)
	return true
}

func (s *socksServer) untrack(c io.Closer) {
	s.mu.Lock()
	delete(s.active, c)
	s.mu.Unlock()
	c.Close()
}

func (s *socksServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // out of descriptors: back off, as net/http does
			continue
		}
		if !s.track(c) {
			return
		}
		if !s.begin(1) {
			s.untrack(c)
			return
		}
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			s.serve(c)
		}()
	}
}

// Close stops accepting, closes every connection and socket the server
// holds and waits for its goroutines. Idempotent.
func (s *socksServer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	active := s.active
	s.active = nil
	s.mu.Unlock()
	err := s.ln.Close()
	for c := range active {
		c.Close()
	}
	s.wg.Wait()
	return err
}

// serve answers one client: method, authentication, request, then the
// CONNECT's relay or the association, until either ends.
func (s *socksServer) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(socksHandshakeTimeout))
	methods, err := readSOCKSGreeting(c)
	if err != nil {
		return
	}
	want := byte(socksNoAuth)
	if s.auth != "" {
		want = socksUserPass
	}
	if !strings.Contains(string(methods), string([]byte{want})) {
		c.Write([]byte{socksVersion, socksNoAcceptable})
		return
	}
	if _, err := c.Write([]byte{socksVersion, want}); err != nil {
		return
	}
	if want == socksUserPass {
		user, pass, err := readSOCKSAuth(c)
		if err != nil {
			return
		}
		ok := subtle.ConstantTimeCompare([]byte(user+":"+pass), []byte(s.auth)) == 1
		status := byte(1)
		if ok {
			status = 0
		}
		if _, err := c.Write([]byte{socksAuthVersion, status}); err != nil || !ok {
			return
		}
	}
	cmd, dst, err := readSOCKSRequest(c)
	if err != nil {
		var se *socksError
		if errors.As(err, &se) {
			c.Write(socksReply(se.code, netip.AddrPort{}))
		}
		return
	}
	switch cmd {
	case socksConnect:
		s.connect(c, dst)
	case socksUDPAssociate:
		s.associate(c, dst)
	default:
		c.Write(socksReply(socksCmdNotSupported, netip.AddrPort{}))
	}
}

// connect dials dst through the tunnel and relays c to it.
func (s *socksServer) connect(c net.Conn, dst socksAddr) {
	ctx, cancel := context.WithTimeout(context.Background(), s.connectTimeout)
	tc, err := s.d.DialContext(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		s.failed.Add(1)
		c.Write(socksReply(socksCode(err), netip.AddrPort{}))
		return
	}
	if !s.track(tc) {
		return
	}
	defer s.untrack(tc)
	s.conns.Add(1)
	bound, _ := netip.ParseAddrPort(tc.LocalAddr().String())
	if _, err := c.Write(socksReply(socksSucceeded, bound)); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	forward.Splice(tc, c)
}

// associate serves a UDP ASSOCIATE: a host UDP socket, on the address
// the client reached the server at, takes the client's datagrams (from
// its address only), sends their payloads through the tunnel from a
// socket of the association's, and returns the answers with their
// source in the header; the association ends with c.
func (s *socksServer) associate(c net.Conn, want socksAddr) {
	local := addrPortOf(c.LocalAddr()).Addr()
	client := addrPortOf(c.RemoteAddr()).Addr()
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		c.Write(socksReply(socksGeneralFailure, netip.AddrPort{}))
		return
	}
	if !s.track(pc) {
		return
	}
	defer s.untrack(pc)
	tun, err := s.d.net.ListenUDPAddrPort(netip.AddrPort{})
	if err != nil {
		c.Write(socksReply(socksGeneralFailure, netip.AddrPort{}))
		return
	}
	if !s.track(tun) {
		return
	}
	defer s.untrack(tun)
	if _, err := c.Write(socksReply(socksSucceeded, addrPortOf(pc.LocalAddr()))); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	s.assocs.Add(1)

	// The client's UDP address: the one the request named, or its
	// first datagram's (from the control connection's host).
	var mu sync.Mutex
	var peer netip.AddrPort
	if want.ip.IsValid() && !want.ip.IsUnspecified() && want.port != 0 {
		peer = netip.AddrPortFrom(want.ip, want.port)
	}
	if !s.begin(2) {
		return
	}
	down, control := make(chan struct{}), make(chan struct{})
	go func() {
		defer s.wg.Done()
		defer close(down)
		// Each answer is read behind room for its header, which is then
		// written in front of it.
		const room = 3 + 1 + 16 + 2
		buf := make([]byte, room+1<<16)
		for {
			n, from, err := tun.ReadFrom(buf[room:])
			if err != nil {
				return
			}
			mu.Lock()
			to := peer
			mu.Unlock()
			if !to.IsValid() {
				continue
			}
			var h [room]byte
			hdr := appendSOCKSAddr(append(h[:0], 0, 0, 0), addrPortOf(from))
			copy(buf[room-len(hdr):], hdr)
			pc.WriteToUDPAddrPort(buf[room-len(hdr):room+n], to)
		}
	}()
	go func() {
		defer s.wg.Done()
		defer close(control)
		// The association ends when the control connection does.
		io.Copy(io.Discard, c)
		pc.Close()
	}()
	names := map[string]netip.Addr{}
	buf := make([]byte, 1<<16)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			break
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if from.Addr() != client {
			continue
		}
		mu.Lock()
		if !peer.IsValid() {
			peer = from
		}
		ok := peer == from
		mu.Unlock()
		if !ok {
			continue
		}
		dst, payload, err := parseSOCKSDatagram(buf[:n])
		if err != nil {
			continue
		}
		to := netip.AddrPortFrom(dst.ip, dst.port)
		if !dst.ip.IsValid() {
			a, ok := names[dst.name]
			if !ok {
				ctx, cancel := context.WithTimeout(context.Background(), s.connectTimeout)
				ap, err := s.d.resolveOne(ctx, dst.name, dst.port)
				cancel()
				if err != nil {
					continue
				}
				if len(names) >= socksMaxNames {
					clear(names)
				}
				a = ap.Addr()
				names[dst.name] = a
			}
			to = netip.AddrPortFrom(a, dst.port)
		}
		tun.WriteTo(payload, net.UDPAddrFromAddrPort(to))
	}
	c.Close()
	tun.Close()
	<-control
	<-down
}

// addrPortOf returns a TCP or UDP address as an address and port, the
// address unmapped.
func addrPortOf(a net.Addr) netip.AddrPort {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(a.String())
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

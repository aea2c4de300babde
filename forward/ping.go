package forward

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// maxPingMaps bounds the ICMP echo mappings (peer address and echo
// identifier) alive at once: a ping per mapping, so 1024 is far more than
// any peer pings in parallel, and a flood of identifiers is refused.
const maxPingMaps = 1024

// pingRelay carries pings to the host's raw ICMP sockets and the answers
// back, mapping each (peer address, identifier) to an identifier of its
// own, as a NAT does.
//
// Where the host refuses a raw socket (no CAP_NET_RAW: a rootless
// sandbox), it falls back to an ICMP datagram socket ("ping socket"),
// which Linux gives to the groups in net.ipv4.ping_group_range. The kernel
// sets the identifier of a datagram socket's echoes to the socket's own,
// so there the relay tells replies apart by sequence number instead: it
// gives each request a sequence number of its own and restores the
// peer's in the reply.
type pingRelay struct {
	r *relay

	mu    sync.Mutex
	f     *Forwarder        // the one the relay serves, set on first use
	conns [2]net.PacketConn // ICMPv4, ICMPv6; opened on first use
	dgram [2]bool           // conns[fam] is a datagram socket
	// ipPeers: conns[fam] is the dialer's (PingListener), which takes
	// its peers as *net.IPAddr, where a host's datagram socket takes
	// *net.UDPAddr.
	ipPeers [2]bool
	failed  [2]error // why the host refused both sockets, or closed
	byPeer  map[pingKey]*pingMap
	byHost  [2]map[uint16]*pingMap
	// bySeq maps a datagram socket's sequence numbers to the request
	// they stand for (at most 65536 per family: a number is reused when
	// the counter wraps); nextSeq is the last one given.
	bySeq   [2]map[uint16]pingSeq
	nextSeq [2]uint16
}

// pingSeq is a request in flight on a datagram socket.
type pingSeq struct {
	m   *pingMap
	seq uint16 // the peer's
}

type pingKey struct {
	src netip.Addr
	id  uint16
}

type pingMap struct {
	key    pingKey
	hostID uint16
	last   time.Time
	req    *PingRequest // the latest, to reply through
}

func (e *pingRelay) init(r *relay) {
	e.r = r
	e.byPeer = map[pingKey]*pingMap{}
	e.byHost = [2]map[uint16]*pingMap{{}, {}}
	e.bySeq = [2]map[uint16]pingSeq{{}, {}}
}

func famOf(a netip.Addr) int {
	if a.Is6() {
		return 1
	}
	return 0
}

// send relays one echo request.
func (e *pingRelay) send(req *PingRequest) {
	f := req.f
	fam := famOf(req.src)
	key := pingKey{req.src, req.ID()}
	e.mu.Lock()
	conn, dgram := e.connLocked(f, fam)
	if conn == nil {
		e.mu.Unlock()
		f.refuse(HostError)
		return
	}
	m := e.byPeer[key]
	now := time.Now()
	if m == nil {
		if m = e.newMapLocked(key, fam, now, f.o.UDPIdleTimeout); m == nil {
			e.mu.Unlock()
			f.refuse(FlowLimit)
			return
		}
	}
	m.last, m.req = now, req
	hostID := m.hostID
	out := append([]byte(nil), req.msg...)
	var dst net.Addr = &net.IPAddr{IP: req.dst.AsSlice()}
	if dgram {
		e.nextSeq[fam]++
		seq := e.nextSeq[fam]
		e.bySeq[fam][seq] = pingSeq{m: m, seq: binary.BigEndian.Uint16(out[6:8])}
		binary.BigEndian.PutUint16(out[6:8], seq)
		if !e.ipPeers[fam] {
			// Package net makes a host's ICMP datagram socket a UDP conn.
			dst = &net.UDPAddr{IP: req.dst.AsSlice()}
		}
	}
	e.mu.Unlock()

	binary.BigEndian.PutUint16(out[4:6], hostID)
	if fam == 0 {
		// The kernel fills in ICMPv6 checksums of raw sockets itself.
		out[2], out[3] = 0, 0
		binary.BigEndian.PutUint16(out[2:4], ^checksum.Checksum(out, 0))
	}
	if _, err := conn.WriteTo(out, dst); err != nil {
		f.refuse(HostError)
		return
	}
	f.c.pingsUp.Add(1)
}

// connLocked returns the family's raw socket, or its ICMP datagram
// socket (dgram) where the host refuses a raw one, opening it (and
// starting its receive loop, a goroutine of f's) on first use.
func (e *pingRelay) connLocked(f *Forwarder, fam int) (conn net.PacketConn, dgram bool) {
	if e.f == nil {
		e.f = f
		f.atClose(e.close)
	}
	if e.f != f || e.conns[fam] != nil || e.failed[fam] != nil {
		return e.conns[fam], e.dgram[fam]
	}
	if !f.begin() {
		return nil, false
	}
	var err error
	if e.r.pinger != nil {
		network := "ip4:icmp"
		if fam == 1 {
			network = "ip6:ipv6-icmp"
		}
		// The dialer's echo sockets behave as datagram ones, their peers
		// *net.IPAddr.
		conn, err = e.r.pinger.ListenPing(f.ctx, network)
		dgram, e.ipPeers[fam] = true, true
	} else {
		conn, dgram, err = listenPing(f.ctx, e.r.host, fam == 1)
	}
	if err != nil {
		f.wg.Done()
		e.failed[fam] = err
		return nil, false
	}
	e.conns[fam], e.dgram[fam] = conn, dgram
	go e.receiveLoop(f, fam, conn, dgram)
	return conn, dgram
}

// ListenPing opens the host socket the ping relay sends pings through: a
// raw ICMP socket, which takes CAP_NET_RAW, or else an ICMP datagram
// socket (dgram), which takes membership of a group in
// net.ipv4.ping_group_range (both families use that sysctl). The error,
// when neither is allowed, names both and what to do. Relay opens its
// own as its *net.Dialer would (Forwarder.OpenPing).
func ListenPing(v6 bool) (conn net.PacketConn, dgram bool, err error) {
	return listenPing(context.Background(), nil, v6)
}

// listenPing is ListenPing opening the sockets as d opens its own: with
// its Control (or ControlContext, with ctx) and bound to the address of
// its LocalAddr, which must then be of the family's IP version.
func listenPing(ctx context.Context, d *net.Dialer, v6 bool) (conn net.PacketConn, dgram bool, err error) {
	network, laddr := "ip4:icmp", netip.IPv4Unspecified()
	if v6 {
		network, laddr = "ip6:ipv6-icmp", netip.IPv6Unspecified()
	}
	if la := dialerLocalIP(d); la.IsValid() {
		if la.Is6() != v6 {
			return nil, false, fmt.Errorf("forward: ping relay: %s: the dialer's local address %v is of the other IP version", network, la)
		}
		laddr = la
	}
	c, rawErr := listenConfig(ctx, d).ListenPacket(ctx, network, laddr.String())
	if rawErr == nil {
		return c, false, nil
	}
	pc, err := listenPingDgram(dialerControl(ctx, d), network, laddr)
	if err == nil {
		return pc, true, nil
	}
	return nil, false, fmt.Errorf("forward: ping relay: a raw ICMP socket is refused (%w: needs CAP_NET_RAW) and so is an ICMP datagram socket (%w: needs one of this process's groups in sysctl net.ipv4.ping_group_range): run as root, or widen the range, e.g. sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"", rawErr, err)
}

// newMapLocked makes a mapping with a free host identifier, first
// forgetting mappings idle longer than idle.
func (e *pingRelay) newMapLocked(key pingKey, fam int, now time.Time, idle time.Duration) *pingMap {
	if len(e.byPeer) >= maxPingMaps {
		for k, m := range e.byPeer {
			if now.Sub(m.last) > idle {
				delete(e.byPeer, k)
				delete(e.byHost[famOf(k.src)], m.hostID)
			}
		}
		if len(e.byPeer) >= maxPingMaps {
			return nil
		}
	}
	id := uint16(rand.Uint32())
	for e.byHost[fam][id] != nil {
		id++
	}
	m := &pingMap{key: key, hostID: id}
	e.byPeer[key] = m
	e.byHost[fam][id] = m
	return m
}

// receiveLoop takes echo replies from the host's raw socket (which sees
// every ICMP message the host receives) and passes on those of our
// mappings.
func (e *pingRelay) receiveLoop(f *Forwarder, fam int, conn net.PacketConn, dgram bool) {
	defer f.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, fromAddr, err := conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		msg := buf[:n]
		if len(msg) < 8 {
			continue
		}
		if fam == 0 && msg[0] != byte(header.ICMPv4EchoReply) || fam == 1 && msg[0] != byte(header.ICMPv6EchoReply) {
			continue
		}
		var fromIP net.IP
		switch a := fromAddr.(type) {
		case *net.IPAddr:
			fromIP = a.IP
		case *net.UDPAddr:
			fromIP = a.IP
		}
		e.mu.Lock()
		var m *pingMap
		if dgram {
			seq := binary.BigEndian.Uint16(msg[6:8])
			if s, ok := e.bySeq[fam][seq]; ok {
				delete(e.bySeq[fam], seq)
				m = s.m
				binary.BigEndian.PutUint16(msg[6:8], s.seq)
			}
		} else {
			m = e.byHost[fam][binary.BigEndian.Uint16(msg[4:6])]
		}
		var req *PingRequest
		if m != nil {
			m.last = time.Now()
			req = m.req
		}
		e.mu.Unlock()
		if req == nil {
			continue // someone else's ping
		}
		fromAP, _ := netip.AddrFromSlice(fromIP)
		src, _, ok := e.r.pol.source(netip.AddrPortFrom(fromAP.Unmap(), 0), netip.Addr{}, fam == 1)
		if !ok {
			continue
		}
		req.Reply(src.Addr(), msg)
	}
}

// close closes the raw sockets, ending the receive loops.
func (e *pingRelay) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, c := range e.conns {
		if c != nil {
			c.Close()
			e.conns[i] = nil
		}
		e.failed[i] = errClosed
	}
}

// errClosed is why the ping relay of a closed Forwarder has no sockets.
var errClosed = errors.New("forward: ping relay: the Forwarder is closed")

// OpenPing opens the ping relay's host sockets now rather than on the
// first ping, for a process about to confine itself (a seccomp filter
// that refuses new raw sockets), and reports whether pings can be
// relayed: an error says why not (no privilege for either kind of ICMP
// socket, say, with what to do), for the caller to tell its user at
// start. A Forwarder whose handler is Relay's keeps relaying pings
// through the sockets opened here. For a handler of another kind it
// opens nothing: it reports an error if that handler takes no pings (it
// is no PingHandler), nil if it takes them its own way.
func (f *Forwarder) OpenPing() error {
	r, ok := f.h.(*relay)
	if !ok {
		if f.ping == nil {
			return errors.New("forward: pings are not relayed: the Handler is no PingHandler")
		}
		return nil
	}
	if r.host == nil && r.pinger == nil {
		return fmt.Errorf("forward: pings are not relayed: the relay's dialer (%T) makes no host sockets and has no echo sockets of its own (PingListener)", r.d)
	}
	e := &r.ping
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	for fam := range e.conns {
		if c, _ := e.connLocked(f, fam); c != nil {
			continue
		}
		err := e.failed[fam]
		if err == nil {
			err = errClosed // begin refused: Close has begun
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

package forward

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// maxEchoMaps bounds the ICMP echo mappings (peer address and echo
// identifier) alive at once: a ping per mapping, so 1024 is far more than
// any peer pings in parallel, and a flood of identifiers is refused.
const maxEchoMaps = 1024

// echoRelay carries pings to the host's raw ICMP sockets and the answers
// back, mapping each (peer address, identifier) to an identifier of its
// own, as a NAT does.
type echoRelay struct {
	r *relay

	mu     sync.Mutex
	f      *Forwarder     // the one the relay serves, set on first use
	conns  [2]*net.IPConn // ICMPv4, ICMPv6; opened on first use
	failed [2]bool        // the host refused a raw socket, or closed
	byPeer map[echoKey]*echoMap
	byHost [2]map[uint16]*echoMap
}

type echoKey struct {
	src netip.Addr
	id  uint16
}

type echoMap struct {
	key    echoKey
	hostID uint16
	last   time.Time
	req    *PingRequest // the latest, to reply through
}

func (e *echoRelay) init(r *relay) {
	e.r = r
	e.byPeer = map[echoKey]*echoMap{}
	e.byHost = [2]map[uint16]*echoMap{{}, {}}
}

func famOf(a netip.Addr) int {
	if a.Is6() {
		return 1
	}
	return 0
}

// send relays one echo request.
func (e *echoRelay) send(req *PingRequest) {
	f := req.f
	fam := famOf(req.src)
	key := echoKey{req.src, req.ID()}
	e.mu.Lock()
	conn := e.connLocked(f, fam)
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
	e.mu.Unlock()

	out := append([]byte(nil), req.msg...)
	binary.BigEndian.PutUint16(out[4:6], hostID)
	if fam == 0 {
		// The kernel fills in ICMPv6 checksums of raw sockets itself.
		out[2], out[3] = 0, 0
		binary.BigEndian.PutUint16(out[2:4], ^checksum.Checksum(out, 0))
	}
	if _, err := conn.WriteTo(out, &net.IPAddr{IP: req.dst.AsSlice()}); err != nil {
		f.refuse(HostError)
		return
	}
	f.c.echoUp.Add(1)
}

// connLocked returns the family's raw socket, opening it (and starting its
// receive loop, a goroutine of f's) on first use.
func (e *echoRelay) connLocked(f *Forwarder, fam int) *net.IPConn {
	if e.f == nil {
		e.f = f
		f.atClose(e.close)
	}
	if e.f != f || e.conns[fam] != nil || e.failed[fam] {
		return e.conns[fam]
	}
	network, laddr := "ip4:icmp", "0.0.0.0"
	if fam == 1 {
		network, laddr = "ip6:ipv6-icmp", "::"
	}
	if !f.begin() {
		return nil
	}
	c, err := net.ListenPacket(network, laddr)
	if err != nil {
		f.wg.Done()
		e.failed[fam] = true
		return nil
	}
	conn := c.(*net.IPConn)
	e.conns[fam] = conn
	go e.receiveLoop(f, fam, conn)
	return conn
}

// newMapLocked makes a mapping with a free host identifier, first
// forgetting mappings idle longer than idle.
func (e *echoRelay) newMapLocked(key echoKey, fam int, now time.Time, idle time.Duration) *echoMap {
	if len(e.byPeer) >= maxEchoMaps {
		for k, m := range e.byPeer {
			if now.Sub(m.last) > idle {
				delete(e.byPeer, k)
				delete(e.byHost[famOf(k.src)], m.hostID)
			}
		}
		if len(e.byPeer) >= maxEchoMaps {
			return nil
		}
	}
	id := uint16(rand.Uint32())
	for e.byHost[fam][id] != nil {
		id++
	}
	m := &echoMap{key: key, hostID: id}
	e.byPeer[key] = m
	e.byHost[fam][id] = m
	return m
}

// receiveLoop takes echo replies from the host's raw socket (which sees
// every ICMP message the host receives) and passes on those of our
// mappings.
func (e *echoRelay) receiveLoop(f *Forwarder, fam int, conn *net.IPConn) {
	defer f.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, from, err := conn.ReadFromIP(buf)
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
		e.mu.Lock()
		m := e.byHost[fam][binary.BigEndian.Uint16(msg[4:6])]
		var req *PingRequest
		if m != nil {
			m.last = time.Now()
			req = m.req
		}
		e.mu.Unlock()
		if req == nil {
			continue // someone else's ping
		}
		fromAP, _ := netip.AddrFromSlice(from.IP)
		src, _, ok := e.r.pol.source(netip.AddrPortFrom(fromAP.Unmap(), 0), netip.Addr{}, fam == 1)
		if !ok {
			continue
		}
		req.Reply(src.Addr(), msg)
	}
}

// close closes the raw sockets, ending the receive loops.
func (e *echoRelay) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, c := range e.conns {
		if c != nil {
			c.Close()
			e.conns[i] = nil
		}
		e.failed[i] = true
	}
}

package forward

import (
	"context"
	"encoding/binary"
	"io"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	// dnsTCPTimeout bounds one query relayed over TCP, connect included:
	// glibc's resolver waits 5 s for an answer (RES_TIMEOUT) before it
	// asks again, so a later answer would find nobody waiting.
	dnsTCPTimeout = 5 * time.Second
	// dnsTCPInFlight bounds the queries of one flow relayed at once,
	// each a goroutine and a connection: resolvers send two at a time
	// (A and AAAA, glibc's and Go's alike). More are dropped
	// (UDPDropped), and the client asks again.
	dnsTCPInFlight = 8
	// dnsUDPMin is the largest answer every client takes over UDP (RFC
	// 1035 section 4.2.1); an EDNS0 OPT record in the query may raise it
	// (RFC 6891).
	dnsUDPMin = 512
	// dnsHeaderLen is a DNS message's fixed header.
	dnsHeaderLen = 12
)

// tcpDNS serves a UDP flow the relay does not carry (Policy.NoUDP, or a
// dialer with no UDP): queries to a DNS relay address go to its upstream
// over TCP through the dialer (RFC 7766 framing: each message after its
// length), one connection per query, and each answer comes back as a
// datagram from the relay address. Any other datagram is refused
// (Unsupported); a flow whose first datagram is not such a query is
// refused at once, which ends it. The queries' goroutines are this
// one's: it stops them when the flow closes and joins them.
func (r *relay) tcpDNS(u *UDPFlow) {
	f := u.f
	buf := make([]byte, 1<<16)
	n, dst, err := u.ReadFromAddrPort(buf)
	if err != nil {
		return
	}
	if _, dns, reason, ok := r.pol.target(dst); !ok || !dns.IsValid() {
		if ok {
			reason = Unsupported
		}
		u.refuseDatagram(reason, buf[:n], dst)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	u.atClose(cancel)
	inFlight := make(chan struct{}, dnsTCPInFlight)
	for {
		to, dns, reason, ok := r.pol.target(dst)
		switch {
		case !ok:
			u.refuseDatagram(reason, buf[:n], dst)
		case !dns.IsValid():
			u.refuseDatagram(Unsupported, buf[:n], dst)
		case n < dnsHeaderLen:
			f.c.udpDropped.Add(1)
		default:
			select {
			case inFlight <- struct{}{}:
				q := append([]byte(nil), buf[:n]...)
				f.c.dns.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-inFlight }()
					if !r.dnsQuery(ctx, u, q, to, dst) {
						f.c.udpDropped.Add(1)
					}
				}()
			default:
				f.c.udpDropped.Add(1)
			}
		}
		if n, dst, err = u.ReadFromAddrPort(buf); err != nil {
			return
		}
	}
}

// dnsQuery asks upstream the query q (which it takes) over TCP through
// the relay's dialer and sends the answer to u's peer from relayAddr,
// truncated (TC set) if the peer cannot take it over UDP. It reports
// whether an answer went back.
func (r *relay) dnsQuery(ctx context.Context, u *UDPFlow, q []byte, upstream, relayAddr netip.AddrPort) bool {
	ctx, cancel := context.WithTimeout(ctx, dnsTCPTimeout)
	defer cancel()
	c, err := r.d.DialContext(ctx, "tcp", upstream.String())
	if err != nil {
		return false
	}
	defer c.Close()
	// Closing the conn is what interrupts its reads and writes at the
	// deadline or when the flow closes.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	msg := make([]byte, 2+len(q))
	binary.BigEndian.PutUint16(msg, uint16(len(q)))
	copy(msg[2:], q)
	if _, err := c.Write(msg); err != nil {
		return false
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return false
	}
	ans := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, ans); err != nil || len(ans) < dnsHeaderLen || ans[0] != q[0] || ans[1] != q[1] {
		return false
	}
	f := u.f
	limit := min(udpAnswerLimit(q), int(f.mtu(u.nic))-udpHeaderLen(u.src))
	if len(ans) > limit {
		if ans, err = truncated(ans); err != nil {
			return false
		}
	}
	_, err = u.WriteToAddrPort(ans, relayAddr)
	return err == nil
}

// udpAnswerLimit is the largest answer the sender of query q takes over
// UDP: 512 bytes, or the payload size of its EDNS0 OPT record.
func udpAnswerLimit(q []byte) int {
	var p dnsmessage.Parser
	if _, err := p.Start(q); err != nil {
		return dnsUDPMin
	}
	if p.SkipAllQuestions() != nil || p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return dnsUDPMin
	}
	for {
		h, err := p.AdditionalHeader()
		if err != nil {
			return dnsUDPMin
		}
		if h.Type == dnsmessage.TypeOPT {
			// An OPT record's class is the sender's UDP payload size.
			return max(dnsUDPMin, int(h.Class))
		}
		if p.SkipAdditional() != nil {
			return dnsUDPMin
		}
	}
}

// truncated returns answer a cut to its header and question with TC set,
// which tells the client to ask again over TCP (RFC 7766 section 5).
func truncated(a []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(a)
	if err != nil {
		return nil, err
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil, err
	}
	h.Truncated = true
	b := dnsmessage.NewBuilder(make([]byte, 0, dnsUDPMin), h)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	for _, q := range qs {
		if err := b.Question(q); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

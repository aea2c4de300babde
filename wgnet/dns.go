package wgnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	// dnsTimeout bounds one query to one server: 5 s, the timeout of
	// wireguard-go's netstack, glibc's resolver and Go's (resolv.conf's
	// default "timeout:5").
	dnsTimeout = 5 * time.Second
	// dnsAttempts is how many times each server is tried: 2, as
	// wireguard-go's netstack does and resolv.conf's default "attempts:2".
	dnsAttempts = 2
	// dnsMaxUDP is the largest UDP response read: 1232 bytes, the EDNS
	// buffer size DNS Flag Day 2020 settled on; a longer answer comes
	// truncated and is asked again over TCP.
	dnsMaxUDP = 1232
)

// expire gives c ctx's deadline, and a past one if ctx is cancelled
// first, so that a read or write in progress returns then, until the
// returned stop is called.
func expire(ctx context.Context, c net.Conn) (stop func() bool) {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	// After the deadline above, so that it cannot undo a cancellation.
	return context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
}

var errNoSuchHost = errors.New("no such host")

// LookupHost resolves host through the tunnel with the DNS servers given
// to CreateNetTUN and returns its addresses as strings.
func (n *Net) LookupHost(host string) ([]string, error) {
	return n.LookupContextHost(context.Background(), host)
}

// LookupContextHost resolves host until ctx ends, as wireguard-go's
// netstack does. An IP literal is returned as it is. A name is asked for
// A records if the Net has an IPv4 address and AAAA if it has an IPv6
// one, of each server in turn (each up to dnsAttempts times, dnsTimeout
// each), over UDP through the stack and over TCP when the answer was
// truncated; the answers keep the server's order, IPv6 first when the
// Net has an IPv6 address. A name that does not exist is a
// *net.DNSError with IsNotFound.
//
// It is not the stack's Resolver (Go's resolver asking Options.DNS),
// which reads the host's configuration: /etc/hosts answers first
// ("localhost" and the host's own names would be dialed through the
// tunnel at the host's addresses), resolv.conf's search list, timeout
// and attempts apply, addresses are sorted by the host's routes (RFC
// 6724), and its errors name the host's resolver. The host's files
// describe the host's network, not the tunnel's.
func (n *Net) LookupContextHost(ctx context.Context, host string) ([]string, error) {
	if host == "" || (!n.hasV4 && !n.hasV6) {
		return nil, &net.DNSError{Err: errNoSuchHost.Error(), Name: host, IsNotFound: true}
	}
	literal := host
	if i := strings.LastIndexByte(literal, '%'); i >= 0 && strings.Contains(literal, ":") {
		literal = literal[:i]
	}
	if ip, err := netip.ParseAddr(literal); err == nil {
		return []string{ip.String()}, nil
	}
	name, err := dnsmessage.NewName(strings.TrimSuffix(host, ".") + ".")
	if err == nil {
		_, err = newQuery(0, dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	}
	if err != nil {
		return nil, &net.DNSError{Err: "not a valid domain name: " + err.Error(), Name: host, IsNotFound: true}
	}
	type result struct {
		addrs []netip.Addr
		err   error
	}
	var types []dnsmessage.Type
	if n.hasV6 {
		types = append(types, dnsmessage.TypeAAAA)
	}
	if n.hasV4 {
		types = append(types, dnsmessage.TypeA)
	}
	results := make([]chan result, len(types))
	for i, t := range types {
		results[i] = make(chan result, 1)
		go func() {
			a, err := n.query(ctx, host, name, t)
			results[i] <- result{a, err}
		}()
	}
	var addrs []string
	var firstErr error
	for _, ch := range results {
		r := <-ch
		if r.err != nil && firstErr == nil {
			firstErr = r.err
		}
		for _, a := range r.addrs {
			addrs = append(addrs, a.String())
		}
	}
	if len(addrs) == 0 {
		if firstErr == nil {
			firstErr = &net.DNSError{Err: errNoSuchHost.Error(), Name: host, IsNotFound: true}
		}
		return nil, firstErr
	}
	return addrs, nil
}

// query asks the servers for name's records of type t, each up to
// dnsAttempts times, and returns the first answer.
func (n *Net) query(ctx context.Context, host string, name dnsmessage.Name, t dnsmessage.Type) ([]netip.Addr, error) {
	if len(n.dnsServers) == 0 {
		return nil, &net.DNSError{Err: "no DNS servers configured: pass them to CreateNetTUN", Name: host}
	}
	var lastErr error
	for range dnsAttempts {
		for _, server := range n.dnsServers {
			addrs, err := n.exchange(ctx, server, name, t)
			if err == nil {
				return addrs, nil
			}
			dnsErr := &net.DNSError{Err: err.Error(), Name: host, Server: server.String()}
			var ne net.Error
			dnsErr.IsTimeout = errors.As(err, &ne) && ne.Timeout()
			if errors.Is(err, errNoSuchHost) {
				dnsErr.IsNotFound = true
				return nil, dnsErr
			}
			lastErr = dnsErr
			if ctx.Err() != nil {
				return nil, lastErr
			}
		}
	}
	return nil, lastErr
}

// exchange asks one server once: over UDP, and over TCP if the answer
// was truncated.
func (n *Net) exchange(ctx context.Context, server netip.Addr, name dnsmessage.Name, t dnsmessage.Type) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, n.dnsTimeout)
	defer cancel()
	id := uint16(rand.Uint32())
	q := dnsmessage.Question{Name: name, Type: t, Class: dnsmessage.ClassINET}
	req, err := newQuery(id, q)
	if err != nil {
		return nil, fmt.Errorf("pack DNS query: %w", err)
	}
	addr := netip.AddrPortFrom(server.Unmap(), 53)
	resp, err := n.udpExchange(ctx, addr, req)
	if err != nil {
		return nil, err
	}
	addrs, truncated, err := parseAnswer(resp, id, q)
	if err != nil || !truncated {
		return addrs, err
	}
	if resp, err = n.tcpExchange(ctx, addr, req); err != nil {
		return nil, err
	}
	addrs, _, err = parseAnswer(resp, id, q)
	return addrs, err
}

// newQuery packs a recursive query with the given ID for q.
func newQuery(id uint16, q dnsmessage.Question) ([]byte, error) {
	msg := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true}, Questions: []dnsmessage.Question{q}}
	return msg.Pack()
}

// udpExchange sends req to server over UDP and returns the first datagram
// that carries its ID, until ctx ends.
func (n *Net) udpExchange(ctx context.Context, server netip.AddrPort, req []byte) ([]byte, error) {
	c, err := n.DialUDPAddrPort(netip.AddrPort{}, server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer expire(ctx, c)()
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	buf := make([]byte, dnsMaxUDP)
	for {
		k, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		// Skip datagrams that are not the answer to this query (a late
		// answer to an earlier one); parseAnswer checks the rest.
		if k >= 2 && binary.BigEndian.Uint16(buf) == binary.BigEndian.Uint16(req) {
			return buf[:k], nil
		}
	}
}

// tcpExchange sends req to server over TCP (RFC 7766 framing) and
// returns the answer, until ctx ends.
func (n *Net) tcpExchange(ctx context.Context, server netip.AddrPort, req []byte) ([]byte, error) {
	c, err := n.DialContextTCPAddrPort(ctx, server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer expire(ctx, c)()
	framed := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(req)), uint16(len(req)))
	if _, err := c.Write(append(framed, req...)); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// parseAnswer checks that resp answers the query id about q and returns
// the addresses in it and whether it was truncated. A name that does not
// exist is errNoSuchHost.
func parseAnswer(resp []byte, id uint16, q dnsmessage.Question) ([]netip.Addr, bool, error) {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return nil, false, fmt.Errorf("malformed DNS response: %w", err)
	}
	if !h.Response || h.ID != id {
		return nil, false, errors.New("DNS response to another query")
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || qs[0].Type != q.Type || qs[0].Class != q.Class || !strings.EqualFold(qs[0].Name.String(), q.Name.String()) {
		return nil, false, errors.New("DNS response to another question")
	}
	if h.Truncated {
		return nil, true, nil
	}
	switch h.RCode {
	case dnsmessage.RCodeSuccess:
	case dnsmessage.RCodeNameError:
		return nil, false, errNoSuchHost
	default:
		return nil, false, fmt.Errorf("DNS server answered %v", h.RCode)
	}
	var addrs []netip.Addr
	for {
		ah, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("malformed DNS answer: %w", err)
		}
		switch {
		case ah.Type == dnsmessage.TypeA && q.Type == dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return nil, false, fmt.Errorf("malformed A record: %w", err)
			}
			addrs = append(addrs, netip.AddrFrom4(r.A))
		case ah.Type == dnsmessage.TypeAAAA && q.Type == dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return nil, false, fmt.Errorf("malformed AAAA record: %w", err)
			}
			addrs = append(addrs, netip.AddrFrom16(r.AAAA))
		default:
			if err := p.SkipAnswer(); err != nil {
				return nil, false, fmt.Errorf("malformed DNS answer: %w", err)
			}
		}
	}
	return addrs, false, nil
}

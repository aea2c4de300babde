// Package dnstest is the one in-test DNS server of ustack's tests: an
// authoritative server for a fixed zone that answers A and AAAA queries
// from a map and NXDOMAIN for every name the map lacks, over any
// net.PacketConn (UDP) and net.Listener (TCP, RFC 7766 framing) it is
// given, whether host sockets or a ustack stack's. It counts the queries
// it gets, so a test can tell which transport a client used, and Close
// stops it with no goroutine left.
package dnstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/dns/dnsmessage"
)

// MaxUDP is the largest answer a Server sends over UDP: the 512 bytes of
// RFC 1035 4.2.1. It ignores a client's EDNS0 offer, as a server without
// EDNS0 does (RFC 6891 7), so an answer longer than this goes out
// truncated (TC set, no records) and the client must ask again over TCP.
const MaxUDP = 512

// TTL is the time to live of every record a Server answers with, in
// seconds: a minute, longer than any test runs.
const TTL = 60

// Zone maps a name (any case, with or without its final dot) to its
// addresses: the IPv4 ones answer A queries, the IPv6 ones AAAA queries.
// A name with no address of the asked family gets an answer with no
// records (NODATA); a name not in the Zone gets NXDOMAIN.
type Zone map[string][]netip.Addr

// Server is an authoritative DNS server for one Zone. Its methods are
// safe for concurrent use.
type Server struct {
	zone map[string][]netip.Addr // keys lower case, ending in a dot

	udp, tcp atomic.Int64 // queries received, by transport

	wg      sync.WaitGroup // every goroutine serving a socket or a stream
	mu      sync.Mutex
	closed  bool                  // guarded by mu
	sockets []io.Closer           // guarded by mu: every PacketConn and Listener served
	streams map[net.Conn]struct{} // guarded by mu: accepted and not yet done
}

// New returns a Server that answers from zone, which it copies. It
// serves nothing until given a socket by ServePacket or ServeStream.
func New(zone Zone) *Server {
	s := &Server{zone: make(map[string][]netip.Addr, len(zone)), streams: make(map[net.Conn]struct{})}
	for name, addrs := range zone {
		s.zone[canonical(name)] = append([]netip.Addr(nil), addrs...)
	}
	return s
}

// canonical is name in lower case, ending in a dot, as Zone keys are
// compared.
func canonical(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

// ServePacket answers the queries that arrive on pc, one datagram each,
// until Close. The Server owns pc from now on: Close closes it. If the
// Server is already closed, pc is closed at once.
func (s *Server) ServePacket(pc net.PacketConn) {
	if !s.own(pc) {
		return
	}
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 1<<16)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.udp.Add(1)
			if reply := s.answer(buf[:n], MaxUDP); reply != nil {
				pc.WriteTo(reply, from)
			}
		}
	}()
}

// ServeStream accepts connections on ln and answers the queries on each,
// every message after its length in two bytes, until the client closes
// it or Close. The Server owns ln from now on: Close closes it and every
// connection it accepted. If the Server is already closed, ln is closed
// at once.
func (s *Server) ServeStream(ln net.Listener) {
	if !s.own(ln) {
		return
	}
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !s.track(c) {
				return
			}
			go func() {
				defer s.wg.Done()
				defer s.untrack(c)
				s.serveConn(c)
			}()
		}
	}()
}

// serveConn answers the queries on one stream until it ends or a query
// cannot be parsed.
func (s *Server) serveConn(c net.Conn) {
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		s.tcp.Add(1)
		reply := s.answer(q, 0)
		if reply == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...)); err != nil {
			return
		}
	}
}

// own records sock to be closed by Close and counts the goroutine that
// serves it, or closes sock and reports false if the Server is closed.
func (s *Server) own(sock io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		sock.Close()
		return false
	}
	s.sockets = append(s.sockets, sock)
	s.wg.Add(1)
	return true
}

// track records an accepted stream to be closed by Close and counts the
// goroutine that serves it, or closes c and reports false if the Server
// is closed.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.streams[c] = struct{}{}
	s.wg.Add(1)
	return true
}

// untrack closes a stream that is done and forgets it.
func (s *Server) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.streams, c)
	s.mu.Unlock()
}

// Close stops the Server: it closes every socket and stream it serves
// and returns once every goroutine it started has ended. It may be
// called more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var errs []error
	for _, sock := range s.sockets {
		if err := sock.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.sockets = nil
	for c := range s.streams {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return errors.Join(errs...)
}

// UDPQueries is how many datagrams the Server has received, answered or
// not.
func (s *Server) UDPQueries() int64 { return s.udp.Load() }

// TCPQueries is how many messages the Server has read from streams,
// answered or not.
func (s *Server) TCPQueries() int64 { return s.tcp.Load() }

// answer builds the reply to query, or returns nil for a query that is
// not one well-formed question. If limit is not zero, an answer longer
// than limit bytes is replaced by a truncated one.
func (s *Server) answer(query []byte, limit int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	q := qs[0]
	addrs, found := s.zone[canonical(q.Name.String())]
	reply, err := build(h, q, addrs, found, false)
	if err == nil && limit > 0 && len(reply) > limit {
		reply, err = build(h, q, nil, found, true)
	}
	if err != nil {
		return nil // the builder fails only for a name it cannot write back
	}
	return reply
}

// build writes the reply to question q of header h: the records of addrs
// of the asked family, none if truncated, NXDOMAIN if the name was not
// found.
func build(h dnsmessage.Header, q dnsmessage.Question, addrs []netip.Addr, found, truncated bool) ([]byte, error) {
	rh := dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, Truncated: truncated,
	}
	if !found {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	res := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: TTL}
	for _, a := range addrs {
		var err error
		switch {
		case truncated:
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(res, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
			err = b.AAAAResource(res, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

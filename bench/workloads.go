package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"
)

const (
	tcpPort     = 5001  // netperf's data port
	udpBasePort = 20000 // session i's server socket listens on udpBasePort+i
	// drainQuiet is how long a receive count must stay still before the
	// harness decides nothing more is in flight.
	drainQuiet = 50 * time.Millisecond
	// drainMax bounds the drain: what has not arrived by then is lost.
	drainMax = 2 * time.Second
	// stopGrace is how long workers get to notice the stop on their own
	// before the harness closes their sockets under them.
	stopGrace = time.Second
)

// closeAll closes every conn and listener in cs.
func closeAll[T io.Closer](cs []T) {
	for _, c := range cs {
		c.Close()
	}
}

// expected reports whether err is how a worker learns that the cell is over.
func expected(r *cell, err error) bool {
	return r.phase.Load() == phaseStop || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}

// dialAll opens n TCP connections from the client to the server's listener
// and returns both ends of each.
func dialAll(r *cell, n int) (clients, servers []net.Conn, ln net.Listener, err error) {
	ln, err = r.topo.server.ListenTCP(netip.AddrPortFrom(r.topo.serverAddr, tcpPort))
	if err != nil {
		return nil, nil, nil, err
	}
	accepted := make(chan net.Conn, n)
	acceptErr := make(chan error, 1)
	go func() {
		for range n {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fail := func(err error) ([]net.Conn, []net.Conn, net.Listener, error) {
		ln.Close()
		closeAll(clients)
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return nil, nil, nil, err
			}
		}
	}
	for i := range n {
		c, err := r.topo.client.DialTCP(ctx, netip.AddrPortFrom(r.topo.serverAddr, tcpPort))
		if err != nil {
			return fail(fmt.Errorf("dial session %d: %w", i, err))
		}
		clients = append(clients, c)
	}
	for range n {
		select {
		case c := <-accepted:
			servers = append(servers, c)
		case err := <-acceptErr:
			closeAll(servers)
			return fail(fmt.Errorf("accept: %w", err))
		case <-ctx.Done():
			closeAll(servers)
			return fail(fmt.Errorf("accept: %w", ctx.Err()))
		}
	}
	return clients, servers, ln, nil
}

// udpPairs opens n connected client sockets, each to its own server socket.
func udpPairs(r *cell, n int) (clients []net.Conn, servers []net.PacketConn, err error) {
	for i := range n {
		addr := netip.AddrPortFrom(r.topo.serverAddr, uint16(udpBasePort+i))
		s, err := r.topo.server.ListenUDP(addr)
		if err != nil {
			closeAll(clients)
			closeAll(servers)
			return nil, nil, err
		}
		servers = append(servers, s)
		c, err := r.topo.client.DialUDP(netip.AddrPort{}, addr)
		if err != nil {
			closeAll(clients)
			closeAll(servers)
			return nil, nil, err
		}
		clients = append(clients, c)
	}
	return clients, servers, nil
}

// udpStream: each sender writes datagrams whose first byte is the phase it
// was sent in, so the receivers count exactly the datagrams sent inside the
// window, and loss is exact.
type udpStream struct {
	r        *cell
	clients  []net.Conn
	servers  []net.PacketConn
	sendWG   sync.WaitGroup
	recvWG   sync.WaitGroup
	sent     []uint64
	received []counter
}

func (u *udpStream) start(r *cell) error {
	u.r = r
	n := r.c.Senders
	var err error
	if u.clients, u.servers, err = udpPairs(r, n); err != nil {
		return err
	}
	u.sent = make([]uint64, n)
	u.received = make([]counter, n)
	for i := range n {
		u.recvWG.Add(1)
		go u.receive(u.servers[i], &u.received[i])
		u.sendWG.Add(1)
		go u.send(u.clients[i], &u.sent[i])
	}
	return nil
}

func (u *udpStream) send(c net.Conn, sent *uint64) {
	defer u.sendWG.Done()
	msg := make([]byte, u.r.size)
	var n uint64
	for {
		ph := u.r.phase.Load()
		if ph == phaseStop {
			break
		}
		msg[0] = byte(ph)
		if _, err := c.Write(msg); err != nil {
			if expected(u.r, err) {
				break
			}
			// The stack or link is full (ENOBUFS): back off and retry,
			// as netperf does.
			runtime.Gosched()
			continue
		}
		if ph == phaseMeasure {
			n++
		}
	}
	*sent = n
}

func (u *udpStream) receive(c net.PacketConn, marked *counter) {
	defer u.recvWG.Done()
	buf := make([]byte, 65536)
	var n uint64
	for {
		k, _, err := c.ReadFrom(buf)
		if err != nil {
			if !expected(u.r, err) {
				u.r.fail(fmt.Errorf("udp receive: %w", err))
			}
			return
		}
		if k > 0 && buf[0] == byte(phaseMeasure) {
			n++
			marked.Store(n)
		}
	}
}

func (u *udpStream) snapshot() uint64 { return 0 }

func (u *udpStream) sumReceived() uint64 {
	var s uint64
	for i := range u.received {
		s += u.received[i].Load()
	}
	return s
}

func (u *udpStream) finish() tally {
	if !waitTimeout(&u.sendWG, stopGrace) {
		closeAll(u.clients)
	}
	u.sendWG.Wait()
	drain(u.sumReceived)
	// Clients first: a datagram reaching a closed server socket draws an
	// ICMP error, which an open client would have to queue.
	closeAll(u.clients)
	closeAll(u.servers)
	u.recvWG.Wait()
	var t tally
	for _, s := range u.sent {
		t.sent += s
	}
	t.recv = u.sumReceived()
	return t
}

// drain waits until count stops changing: what is still in flight when
// the window closes gets its chance to arrive.
func drain(count func() uint64) {
	deadline := time.Now().Add(drainMax)
	last, still := count(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		if c := count(); c != last {
			last, still = c, time.Now()
		} else if time.Since(still) >= drainQuiet {
			return
		}
	}
}

// tcpStream: each connection writes messages as fast as TCP takes them;
// the receivers count bytes, sampled at the window's edges.
type tcpStream struct {
	r        *cell
	clients  []net.Conn
	servers  []net.Conn
	ln       net.Listener
	sendWG   sync.WaitGroup
	recvWG   sync.WaitGroup
	received []counter
}

func (s *tcpStream) start(r *cell) error {
	s.r = r
	var err error
	if s.clients, s.servers, s.ln, err = dialAll(r, r.c.Senders); err != nil {
		return err
	}
	s.received = make([]counter, len(s.servers))
	for i := range s.servers {
		s.recvWG.Add(1)
		go s.receive(s.servers[i], &s.received[i])
		s.sendWG.Add(1)
		go s.send(s.clients[i])
	}
	return nil
}

func (s *tcpStream) send(c net.Conn) {
	defer s.sendWG.Done()
	msg := make([]byte, s.r.size)
	for s.r.phase.Load() != phaseStop {
		if _, err := c.Write(msg); err != nil {
			if !expected(s.r, err) {
				s.r.fail(fmt.Errorf("tcp write: %w", err))
			}
			return
		}
	}
}

func (s *tcpStream) receive(c net.Conn, got *counter) {
	defer s.recvWG.Done()
	buf := make([]byte, 256<<10)
	var n uint64
	for {
		k, err := c.Read(buf)
		n += uint64(k)
		got.Store(n)
		if err != nil {
			if !expected(s.r, err) {
				s.r.fail(fmt.Errorf("tcp read: %w", err))
			}
			return
		}
	}
}

func (s *tcpStream) snapshot() uint64 {
	var sum uint64
	for i := range s.received {
		sum += s.received[i].Load()
	}
	return sum
}

func (s *tcpStream) finish() tally {
	// A writer may be blocked on a full send buffer: closing its conn is
	// what unblocks it.
	if !waitTimeout(&s.sendWG, 100*time.Millisecond) {
		closeAll(s.clients)
	}
	s.sendWG.Wait()
	closeAll(s.clients)
	closeAll(s.servers)
	if s.ln != nil {
		s.ln.Close()
	}
	s.recvWG.Wait()
	return tally{}
}

// tcpRR: each session sends a request and waits for the whole response.
type tcpRR struct {
	r       *cell
	clients []net.Conn
	servers []net.Conn
	ln      net.Listener
	cliWG   sync.WaitGroup
	srvWG   sync.WaitGroup
	results []rrResult
}

// rrResult is one session's count, written by its goroutine before it
// exits and read after the join.
type rrResult struct {
	transactions, started, lost uint64
	hist                        histogram
}

func (t *tcpRR) start(r *cell) error {
	t.r = r
	var err error
	if t.clients, t.servers, t.ln, err = dialAll(r, r.c.Senders); err != nil {
		return err
	}
	t.results = make([]rrResult, len(t.clients))
	for i := range t.clients {
		t.srvWG.Add(1)
		go t.serve(t.servers[i])
		t.cliWG.Add(1)
		go t.client(t.clients[i], &t.results[i])
	}
	return nil
}

func (t *tcpRR) serve(c net.Conn) {
	defer t.srvWG.Done()
	buf := make([]byte, t.r.size)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if !expected(t.r, err) {
				t.r.fail(fmt.Errorf("tcp_rr server read: %w", err))
			}
			return
		}
		if _, err := c.Write(buf); err != nil {
			if !expected(t.r, err) {
				t.r.fail(fmt.Errorf("tcp_rr server write: %w", err))
			}
			return
		}
	}
}

func (t *tcpRR) client(c net.Conn, res *rrResult) {
	defer t.cliWG.Done()
	req, resp := make([]byte, t.r.size), make([]byte, t.r.size)
	for {
		ph := t.r.phase.Load()
		if ph == phaseStop {
			return
		}
		start := time.Now()
		if _, err := c.Write(req); err != nil {
			if !expected(t.r, err) {
				t.r.fail(fmt.Errorf("tcp_rr client write: %w", err))
			}
			return
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			if !expected(t.r, err) {
				t.r.fail(fmt.Errorf("tcp_rr client read: %w", err))
			}
			return
		}
		if ph == phaseMeasure {
			res.hist.record(time.Since(start))
			res.transactions++
		}
	}
}

func (t *tcpRR) snapshot() uint64 { return 0 }

func (t *tcpRR) finish() tally {
	if !waitTimeout(&t.cliWG, stopGrace) {
		closeAll(t.clients)
	}
	t.cliWG.Wait()
	closeAll(t.clients)
	closeAll(t.servers)
	if t.ln != nil {
		t.ln.Close()
	}
	t.srvWG.Wait()
	return sumRR(t.results)
}

func sumRR(rs []rrResult) tally {
	var t tally
	for i := range rs {
		t.transactions += rs[i].transactions
		t.sent += rs[i].started
		t.recv += rs[i].transactions
		t.lost += rs[i].lost
		t.hist.merge(&rs[i].hist)
	}
	return t
}

// udpRR: each session sends a request datagram and waits for the echo.
// The first byte numbers the transaction so that a late answer to a timed
// out request is not taken for the current one.
type udpRR struct {
	r        *cell
	clients  []net.Conn
	servers  []net.PacketConn
	cliWG    sync.WaitGroup
	srvWG    sync.WaitGroup
	results  []rrResult
	timeouts bool // retry lost transactions (faults are injected)
}

// The udp_rr retry timeout adapts like TCP's RTO (RFC 6298: SRTT + 4 *
// RTTVAR, doubled after each timeout until an answer comes), within these
// bounds: the floor keeps scheduling delays on a loaded machine from
// passing for losses.
const (
	rrMinTimeout = 10 * time.Millisecond
	rrMaxTimeout = time.Second
)

// rto estimates a session's retry timeout from its round trips.
type rto struct {
	srtt, rttvar time.Duration
	initial      time.Duration // before any round trip is measured
	backoff      uint
}

func (e *rto) observe(rtt time.Duration) {
	e.backoff = 0
	if e.srtt == 0 {
		e.srtt, e.rttvar = rtt, rtt/2
		return
	}
	diff := e.srtt - rtt
	if diff < 0 {
		diff = -diff
	}
	e.rttvar = (3*e.rttvar + diff) / 4
	e.srtt = (7*e.srtt + rtt) / 8
}

func (e *rto) expired() { e.backoff = min(e.backoff+1, 7) }

func (e *rto) timeout() time.Duration {
	t := e.initial
	if e.srtt != 0 {
		t = e.srtt + 4*e.rttvar
	}
	return min(max(t, rrMinTimeout)<<e.backoff, rrMaxTimeout)
}

func (u *udpRR) start(r *cell) error {
	u.r = r
	// Faults can lose a request or its answer, and so can a kernel (a full
	// socket buffer); only two ustack hosts in memory without faults lose
	// nothing, and there a session waits as netperf's does.
	u.timeouts = r.c.Link != "mem" || r.c.Impair.Active()
	var err error
	if u.clients, u.servers, err = udpPairs(r, r.c.Senders); err != nil {
		return err
	}
	u.results = make([]rrResult, len(u.clients))
	for i := range u.clients {
		u.srvWG.Add(1)
		go u.serve(u.servers[i])
		u.cliWG.Add(1)
		go u.client(u.clients[i], &u.results[i])
	}
	return nil
}

func (u *udpRR) serve(c net.PacketConn) {
	defer u.srvWG.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if !expected(u.r, err) {
				u.r.fail(fmt.Errorf("udp_rr server read: %w", err))
			}
			return
		}
		if _, err := c.WriteTo(buf[:n], from); err != nil && expected(u.r, err) {
			return
		}
		// Any other write error (ENOBUFS) loses this answer; the client's
		// timeout accounts for it.
	}
}

func (u *udpRR) client(c net.Conn, res *rrResult) {
	defer u.cliWG.Done()
	req, resp := make([]byte, u.r.size), make([]byte, 65536)
	var seq byte
	est := rto{initial: rrMinTimeout + 2*(u.r.c.Impair.Delay+u.r.c.Impair.Jitter)}
	for {
		ph := u.r.phase.Load()
		if ph == phaseStop {
			return
		}
		seq++
		req[0] = seq
		start := time.Now()
		if _, err := c.Write(req); err != nil {
			if expected(u.r, err) {
				return
			}
			// Refused (ENOBUFS): nothing was sent, so nothing to wait for.
			runtime.Gosched()
			continue
		}
		if ph == phaseMeasure {
			res.started++
		}
		if u.timeouts {
			c.SetReadDeadline(start.Add(est.timeout()))
		}
		for {
			n, err := c.Read(resp)
			if err != nil {
				if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
					est.expired()
					if ph == phaseMeasure {
						res.lost++
					}
					break
				}
				if !expected(u.r, err) {
					u.r.fail(fmt.Errorf("udp_rr client read: %w", err))
				}
				return
			}
			if n == len(req) && resp[0] == seq {
				rtt := time.Since(start)
				est.observe(rtt)
				if ph == phaseMeasure {
					res.hist.record(rtt)
					res.transactions++
				}
				break
			}
		}
	}
}

func (u *udpRR) snapshot() uint64 { return 0 }

func (u *udpRR) finish() tally {
	// Without a timeout, a session whose datagram was lost would wait
	// forever: closing its socket ends it.
	if !waitTimeout(&u.cliWG, stopGrace) {
		closeAll(u.clients)
	}
	u.cliWG.Wait()
	closeAll(u.clients)
	closeAll(u.servers)
	u.srvWG.Wait()
	return sumRR(u.results)
}

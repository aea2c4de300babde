package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// What the four tests (udp_stream.go, tcp_stream.go, tcp_rr.go, udp_rr.go)
// share: ports, connection setup, the drain after a window and the
// request/response tallies.

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

// rrResult is one session's count, written by its goroutine before it
// exits and read after the join.
type rrResult struct {
	transactions, started, lost uint64
	hist                        histogram
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

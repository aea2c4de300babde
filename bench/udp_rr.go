package bench

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"
)

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

package bench

import (
	"fmt"
	"net"
	"runtime"
	"sync"
)

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

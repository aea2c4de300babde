package bench

import (
	"fmt"
	"net"
	"sync"
	"time"
)

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

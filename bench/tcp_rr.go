package bench

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

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

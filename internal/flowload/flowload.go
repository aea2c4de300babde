// Package flowload opens and serves many idle TCP flows, to measure what
// a relay costs per flow: scripts/flows.sh and the integration test
// TestSandboxFlows drive it through its command, internal/flowload/flowload.
// Each flow carries one byte each way (so it is established end to end and
// served) and is then held idle.
package flowload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// noKeepAlive, as a Dialer's or ListenConfig's KeepAlive, turns TCP
// keepalive off on both ends of the flows, which Go turns on by default
// (a probe after 15 s idle): an idle flow then sends nothing at all, and
// the tool, which shares the machine with the relay it measures, spares
// four setsockopt calls per connection on each end.
const noKeepAlive = -1

// Listen listens on the TCP address addr for Serve, with keepalive off on
// the connections it accepts.
func Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: noKeepAlive}
	return lc.Listen(context.Background(), "tcp", addr)
}

// Serve accepts connections on ln until ln is closed: each echoes the
// first byte it reads and is then held until its peer closes it. Serve
// returns once ln is closed and every connection it accepted has ended;
// close ln (and let the peers close theirs) to stop it.
func Serve(ln net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return
			}
			if _, err := c.Write(b[:]); err != nil {
				return
			}
			io.Copy(io.Discard, c) // hold until the peer closes
		}()
	}
}

// Open opens n TCP flows to addr, at most conc connecting at once: each
// sends one byte and waits for it to come back. It returns the flows,
// held open for the caller to close, and how long opening them all took.
// The first failure stops it; the flows opened so far are closed then.
func Open(ctx context.Context, addr string, n, conc int) ([]net.Conn, time.Duration, error) {
	d := net.Dialer{KeepAlive: noKeepAlive}
	dial := func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	return OpenWith(ctx, dial, addr, n, conc)
}

// OpenWith is Open with the connections made by dial (through a stack of
// ours, say) instead of the host's dialer; to names their destination in
// errors.
func OpenWith(ctx context.Context, dial func(context.Context) (net.Conn, error), to string, n, conc int) ([]net.Conn, time.Duration, error) {
	conc = max(1, min(conc, n))
	conns := make([]net.Conn, n)
	next := make(chan int)
	errs := make(chan error, conc)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := openOne(ctx, dial, byte(i))
				if err != nil {
					errs <- fmt.Errorf("flow %d of %d to %s: %w", i+1, n, to, err)
					cancel()
					return
				}
				conns[i] = c
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil || ctx.Err() != nil {
		Close(conns)
		if err == nil {
			err = ctx.Err()
		}
		return nil, took, err
	}
	return conns, took, nil
}

// openOne connects and exchanges the byte b.
func openOne(ctx context.Context, dial func(context.Context) (net.Conn, error), b byte) (net.Conn, error) {
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	var got [1]byte
	if _, err := c.Write([]byte{b}); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := io.ReadFull(c, got[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("waiting for the echo: %w", err)
	}
	if got[0] != b {
		c.Close()
		return nil, fmt.Errorf("echo %#x, sent %#x", got[0], b)
	}
	return c, nil
}

func collect(errs <-chan error) []error {
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return all
}

// Close closes every flow of conns that is open.
func Close(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// Package xfer moves checked bytes for ustack's tests: deterministic
// streams, their sha256, and a full-duplex exchange over a connected pair
// that says which direction failed and how.
package xfer

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// Pattern returns a reader of n deterministic pseudo-random bytes (n < 0:
// endless): ChaCha8 seeded with seed, fast enough not to limit a transfer.
func Pattern(seed byte, n int64) io.Reader {
	var s [32]byte
	s[0] = seed
	return &pattern{rng: rand.NewChaCha8(s), left: n}
}

type pattern struct {
	rng  *rand.ChaCha8
	left int64
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	if p.left > 0 && int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n, _ := p.rng.Read(b)
	if p.left > 0 {
		p.left -= int64(n)
	}
	return n, nil
}

// Sum reads r to the end and returns the sha256 and length of what it read.
func Sum(r io.Reader) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, n, err
}

// Timeout is a generous bound for moving size bytes each way: a hang is a
// failure, slowness is not.
func Timeout(size int64) time.Duration {
	return 30*time.Second + time.Duration(size>>20)*200*time.Millisecond
}

// Exchange sends size bytes each way at once over the connected pair
// (a sends Pattern(1, size), b sends Pattern(2, size)); each side
// half-closes after writing and hashes what it reads. It checks that both
// streams arrive whole and intact and returns how long it took. On timeout
// it closes both conns and says which direction had not finished.
func Exchange(a, b net.Conn, size int64, timeout time.Duration) (time.Duration, error) {
	type result struct {
		sum [32]byte
		n   int64
		err error
	}
	run := func(c net.Conn, seed byte, out chan<- result) {
		wErr := make(chan error, 1)
		go func() {
			_, err := io.Copy(c, Pattern(seed, size))
			if err == nil {
				if cw, ok := c.(interface{ CloseWrite() error }); ok {
					err = cw.CloseWrite()
				}
			}
			wErr <- err
		}()
		s, n, err := Sum(c)
		if werr := <-wErr; err == nil {
			err = werr
		}
		out <- result{s, n, err}
	}
	start := time.Now()
	atA, atB := make(chan result, 1), make(chan result, 1)
	go run(a, 1, atA)
	go run(b, 2, atB)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var errs []error
	for _, w := range []struct {
		name string
		ch   chan result
		seed byte
	}{{"b->a", atA, 2}, {"a->b", atB, 1}} {
		select {
		case r := <-w.ch:
			want, _, _ := Sum(Pattern(w.seed, size))
			switch {
			case r.err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", w.name, r.err))
			case r.n != size:
				errs = append(errs, fmt.Errorf("%s: received %d bytes, want %d", w.name, r.n, size))
			case r.sum != want:
				errs = append(errs, fmt.Errorf("%s: sha256 of the received bytes differs from the sent", w.name))
			}
		case <-timer.C:
			a.Close()
			b.Close()
			<-atA
			<-atB
			return 0, fmt.Errorf("%s: transfer of %d bytes each way did not finish in %v", w.name, size, timeout)
		}
	}
	return time.Since(start), errors.Join(errs...)
}

// EchoPackets sends every datagram pc receives back to its sender until
// pc is closed or a read fails, and returns that error: the body of every
// UDP echo server of the tests, which start it on a goroutine and stop it
// by closing pc. A datagram it cannot send back is dropped, as a network
// would, and the echo goes on.
func EchoPackets(pc net.PacketConn) error {
	buf := make([]byte, 1<<16) // the largest datagram
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		if _, err := pc.WriteTo(buf[:n], from); errors.Is(err, net.ErrClosed) {
			return err
		}
	}
}

// EchoStreams accepts connections on ln until it is closed or Accept
// fails, and returns that error: each connection gets back everything it
// sends, from a goroutine of its own that closes it at the sender's EOF.
// The body of every TCP echo server of the tests, as EchoPackets is of the
// UDP ones; a test starts it on a goroutine and stops it by closing ln
// and its clients.
func EchoStreams(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			io.Copy(c, c)
			c.Close()
		}()
	}
}

// RoundTrip writes msg to first, reads it whole from second, writes it
// back and reads it whole from first again: one request and its echo
// over a pair of connected streams, the way a parked relay is woken from
// either side in tests. It fails naming the leg that went wrong.
func RoundTrip(first, second io.ReadWriter, msg []byte) error {
	got := make([]byte, len(msg))
	for _, leg := range []struct {
		name     string
		from, to io.ReadWriter
	}{{"there", first, second}, {"back", second, first}} {
		if _, err := leg.from.Write(msg); err != nil {
			return fmt.Errorf("round trip %s: write: %w", leg.name, err)
		}
		if _, err := io.ReadFull(leg.to, got); err != nil {
			return fmt.Errorf("round trip %s: read: %w", leg.name, err)
		}
		if string(got) != string(msg) {
			return fmt.Errorf("round trip %s: read %q, wrote %q", leg.name, got, msg)
		}
	}
	return nil
}

// PingPong is the body of a request/response benchmark: b.Loop writes
// size bytes to c and reads as many back (c's peer echoes), reporting
// allocations, bytes both ways and microseconds per round trip (us/rtt).
func PingPong(b *testing.B, c net.Conn, size int) {
	msg := make([]byte, size)
	b.ReportAllocs()
	b.SetBytes(int64(2 * len(msg)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, msg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "us/rtt")
}

package stack_test

import (
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/stack/stacktest"
)

// pattern is a deterministic pseudo-random byte stream of n bytes.
type pattern struct {
	rng *rand.ChaCha8
	n   int64
}

func newPattern(seed byte, n int64) *pattern {
	var s [32]byte
	s[0] = seed
	return &pattern{rng: rand.NewChaCha8(s), n: n}
}

func (p *pattern) Read(b []byte) (int, error) {
	if p.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.n {
		b = b[:p.n]
	}
	n, _ := p.rng.Read(b)
	p.n -= int64(n)
	return n, nil
}

func sum(r io.Reader) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, n, err
}

// transferBothWays sends size bytes from a to b and size bytes from b to a
// at the same time over one connection, and checks both arrive intact.
func transferBothWays(t *testing.T, p *stacktest.Pair, server netip.Addr, size int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ln, err := p.B.ListenTCP(netip.AddrPortFrom(server, 5001))
	require.NoError(t, err)
	defer ln.Close()

	type result struct {
		sum [32]byte
		n   int64
		err error
	}
	// Each side writes its pattern and hashes what it reads.
	run := func(c net.Conn, seed byte, out chan<- result) {
		wErr := make(chan error, 1)
		go func() {
			_, err := io.Copy(c, newPattern(seed, size))
			if err == nil {
				err = c.(interface{ CloseWrite() error }).CloseWrite()
			}
			wErr <- err
		}()
		s, n, err := sum(c)
		if werr := <-wErr; err == nil {
			err = werr
		}
		out <- result{s, n, err}
	}
	fromB, fromA := make(chan result, 1), make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			fromA <- result{err: err}
			return
		}
		defer c.Close()
		run(c, 2, fromA)
	}()
	c, err := p.A.DialTCP(ctx, netip.AddrPortFrom(server, 5001))
	require.NoError(t, err)
	defer c.Close()
	go run(c, 1, fromB)

	want1, _, _ := sum(newPattern(1, size))
	want2, _, _ := sum(newPattern(2, size))
	for _, w := range []struct {
		name string
		ch   chan result
		want [32]byte
	}{{"a->b", fromA, want1}, {"b->a", fromB, want2}} {
		select {
		case r := <-w.ch:
			require.NoError(t, r.err, w.name)
			require.Equal(t, size, r.n, "%s: bytes received", w.name)
			require.Equal(t, w.want, r.sum, "%s: sha256 of received bytes", w.name)
		case <-ctx.Done():
			t.Fatalf("%s: transfer did not finish: %v", w.name, ctx.Err())
		}
	}
}

func TestTCPTransferBothWays(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server netip.Addr
	}{{"ipv4", stacktest.B4}, {"ipv6", stacktest.B6}} {
		t.Run(tc.name, func(t *testing.T) {
			p := stacktest.New(t, nil)
			transferBothWays(t, p, tc.server, transferSize)
		})
	}
}

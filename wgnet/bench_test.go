package wgnet_test

import (
	"io"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/xfer"
)

// The benchmarks run the same traffic through two wireguard-go devices
// joined in memory (conn/bindtest), with ustack (wgnet) behind both, and
// with wireguard-go's own tun/netstack behind both. Each top-level
// benchmark runs its two cases one after the other, so with -count=N they
// alternate:
//
//	go test ./wgnet -run '^$' -bench . -benchtime 1x -count 5   (stream)
//
// and compare with benchstat, or by the ratio of the reported metrics.

// impls are the two netstacks compared.
var impls = []string{"ustack", "netstack"}

func tunnel(b *testing.B, impl string) (side, side) {
	var x, y side
	if impl == "ustack" {
		x, _ = ustackSide(b, addrA, nil)
		y, _ = ustackSide(b, addrB, nil)
	} else {
		x = netstackSide(b, addrA)
		y = netstackSide(b, addrB)
	}
	join(b, x, y)
	return x, y
}

// streamSize is what one stream operation moves.
const streamSize = 256 << 20

// BenchmarkTCPStream moves 256 MiB per operation over one TCP connection
// through the tunnel; run it with -benchtime 1x (or Nx).
func BenchmarkTCPStream(b *testing.B) {
	for _, impl := range impls {
		b.Run(impl, func(b *testing.B) {
			x, y := tunnel(b, impl)
			c, s := connect(b, x, y, 5201)
			got := make(chan int64, 1)
			go func() {
				n, _ := io.Copy(io.Discard, s)
				got <- n
			}()
			b.SetBytes(streamSize)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				_, err := io.Copy(c, xfer.Pattern(1, streamSize))
				require.NoError(b, err)
			}
			require.NoError(b, c.(interface{ CloseWrite() error }).CloseWrite())
			n := <-got
			elapsed := time.Since(start)
			b.StopTimer()
			require.Equal(b, int64(b.N)*streamSize, n)
			b.ReportMetric(float64(n)*8/elapsed.Seconds()/1e9, "Gbit/s")
		})
	}
}

// BenchmarkTCPRR is one-byte request and response on one TCP connection
// through the tunnel (netperf's tcp_rr): one operation is one round trip.
func BenchmarkTCPRR(b *testing.B) {
	for _, impl := range impls {
		b.Run(impl, func(b *testing.B) {
			x, y := tunnel(b, impl)
			c, s := connect(b, x, y, 5202)
			go func() {
				var buf [1]byte
				for {
					if _, err := io.ReadFull(s, buf[:]); err != nil {
						return
					}
					if _, err := s.Write(buf[:]); err != nil {
						return
					}
				}
			}()
			var buf [1]byte
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				_, err := c.Write(buf[:])
				require.NoError(b, err)
				_, err = io.ReadFull(c, buf[:])
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "trans/s")
		})
	}
}

// BenchmarkUDP1200 sends 1200-byte datagrams as fast as the sender can
// through the tunnel; one operation is one datagram sent, and pkts/s is
// what the receiver got (a datagram dropped anywhere does not count).
func BenchmarkUDP1200(b *testing.B) {
	for _, impl := range impls {
		b.Run(impl, func(b *testing.B) {
			x, y := tunnel(b, impl)
			srv, err := y.udp(netip.AddrPortFrom(addrB, 5203), netip.AddrPort{})
			require.NoError(b, err)
			defer srv.Close()
			cli, err := x.udp(netip.AddrPort{}, netip.AddrPortFrom(addrB, 5203))
			require.NoError(b, err)
			defer cli.Close()
			var received atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				buf := make([]byte, 2048)
				for {
					if _, err := srv.Read(buf); err != nil {
						return
					}
					received.Add(1)
				}
			}()
			msg := make([]byte, 1200)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				cli.Write(msg) // a refused datagram is a lost one: counted below
			}
			// Let what is in flight arrive: until nothing came for a while.
			for last := int64(-1); last != received.Load(); {
				last = received.Load()
				time.Sleep(20 * time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			got := received.Load()
			srv.Close()
			<-done
			b.ReportMetric(float64(got)/elapsed.Seconds(), "pkts/s")
			b.ReportMetric(float64(got)/float64(b.N), "delivered")
		})
	}
}

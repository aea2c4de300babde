package stack_test

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/stack"
)

// farDeadline is a deadline that never passes during a benchmark: set,
// it puts the conns on the paths a caller with deadlines takes.
func farDeadline() time.Time { return time.Now().Add(time.Hour) }

// BenchmarkConn sends 64-byte messages through a pair of the stack's
// conns, Write on one and Read on the other in the benchmark's goroutine,
// in bursts: burst=1 hands each message over on its own, so the reader
// mostly waits for data on its way (the wait path); burst=32 writes 32
// before it reads them, so most reads find data (the fast paths). With
// the cache on and off and with deadlines set or not.
func BenchmarkConn(b *testing.B) {
	const size = 64
	for _, network := range []string{"tcp", "udp"} {
		for _, burst := range []int{1, 32} {
			for _, mode := range []stack.CacheMode{stack.CacheOn, stack.CacheOff} {
				for _, deadline := range []bool{false, true} {
					b.Run(fmt.Sprintf("%s/burst=%d/cache=%v/deadline=%v", network, burst, mode, deadline), func(b *testing.B) {
						c, s := connPair(b, network, mode)
						if deadline {
							require.NoError(b, c.SetDeadline(farDeadline()))
							require.NoError(b, s.SetDeadline(farDeadline()))
						}
						msg, buf := make([]byte, size), make([]byte, size)
						b.SetBytes(size)
						b.ReportAllocs()
						written := 0
						for b.Loop() {
							if _, err := c.Write(msg); err != nil {
								b.Fatal(err)
							}
							if written++; written < burst {
								continue
							}
							for ; written > 0; written-- {
								if _, err := io.ReadFull(s, buf); err != nil {
									b.Fatal(err)
								}
							}
						}
					})
				}
			}
		}
	}
}

// BenchmarkTCPStream writes 16 KiB at a time on one conn while another
// goroutine reads the other: a bulk transfer's writes and reads, which
// wait for room and for data, with deadlines set or not.
func BenchmarkTCPStream(b *testing.B) {
	const chunk = 16 << 10
	for _, deadline := range []bool{false, true} {
		b.Run(fmt.Sprintf("deadline=%v", deadline), func(b *testing.B) {
			c, s := connPair(b, "tcp", stack.CacheOn)
			if deadline {
				require.NoError(b, c.SetDeadline(farDeadline()))
				require.NoError(b, s.SetDeadline(farDeadline()))
			}
			done := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, s)
				done <- err
			}()
			msg := make([]byte, chunk)
			b.SetBytes(chunk)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, c.Close())
			select {
			case err := <-done:
				require.NoError(b, err)
			case <-time.After(30 * time.Second):
				b.Fatal("the reader did not see the end of the stream")
			}
		})
	}
}

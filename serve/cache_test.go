package serve_test

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConnBuffersRecycled: each TCP conn's copy buffer goes back to its
// listener's cache when the conn ends, and the next conn gets it again;
// the cache stays within its cap.
func TestConnBuffersRecycled(t *testing.T) {
	h, c := setup(t, "")
	echo := func() {
		conn, err := c.DialTCP(context.Background(), netip.AddrPortFrom(server4, 7))
		require.NoError(t, err)
		_, err = conn.Write([]byte("hello"))
		require.NoError(t, err)
		conn.(interface{ CloseWrite() error }).CloseWrite()
		got, err := io.ReadAll(conn)
		require.NoError(t, err)
		require.Equal(t, "hello", string(got))
		conn.Close()
	}
	const conns = 5
	for range conns {
		echo()
	}
	svc := h.Services()
	require.Eventually(t, func() bool { return svc.CacheStats().Returns == conns }, time.Minute, time.Millisecond,
		"every conn's buffer came back")
	echo() // takes a returned buffer, published at the next Accept
	require.Eventually(t, func() bool { s := svc.CacheStats(); return s.Hits+s.Misses == conns+1 }, time.Minute, time.Millisecond)
	s := svc.CacheStats()
	require.LessOrEqual(t, s.Held, int64(64))
	// A hit, unless the accept loop sat parked past the idle period (a
	// loaded machine) and its buffers were released meanwhile.
	if s.Released == 0 {
		require.GreaterOrEqual(t, s.Hits, uint64(1), "the sixth conn reused a buffer")
	}
}

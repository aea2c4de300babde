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
// listener's cache when the conn ends, and a later conn gets it again;
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
	svc := h.Services()
	// The accept loop parks its cache while it waits in Accept. On a
	// loaded machine it can sit parked past the idle period, and the
	// sweeper then releases what the cache held, so that the next conn
	// finds nothing to reuse: such a round proves nothing either way and
	// runs again. The reuse is asserted on a round without a release.
	for round := 1; ; round++ {
		before := svc.CacheStats()
		for range conns {
			echo()
		}
		require.Eventually(t, func() bool { return svc.CacheStats().Returns-before.Returns >= conns }, time.Minute, time.Millisecond,
			"every conn's buffer came back")
		echo() // takes a returned buffer, published at the next Accept
		require.Eventually(t, func() bool { s := svc.CacheStats(); return s.Hits+s.Misses-before.Hits-before.Misses == conns+1 }, time.Minute, time.Millisecond)
		s := svc.CacheStats()
		require.LessOrEqual(t, s.Held, int64(64))
		if s.Released == before.Released {
			require.Greater(t, s.Hits, before.Hits, "a conn reused a returned buffer")
			return
		}
		require.Less(t, round, 5, "in every round the accept loop sat parked past the idle period and the cache released its buffers (%+v)", s)
	}
}

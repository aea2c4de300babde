package forward

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/xfer"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// spliced is one flow for SpliceAsync: the Forwarder's conn dialed into
// A (peer is A's end of it) and a host socket pair (other is the end to
// splice, host its peer).
type spliced struct {
	c, peer     net.Conn
	other, host *net.TCPConn
}

func openSpliced(t *testing.T, e *env) spliced {
	t.Helper()
	ln, err := e.A.ListenTCP(netip.AddrPortFrom(stacktest.A4, 0))
	require.NoError(t, err)
	defer ln.Close()
	peers := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(peers)
			return
		}
		peers <- c
	}()
	c, err := e.fw.DialTCP(context.Background(), ln.Addr().(*net.TCPAddr).AddrPort())
	require.NoError(t, err)
	peer := recv(t, peers, "A accepts the Forwarder's connection")
	require.NotNil(t, peer, "A accepted the Forwarder's connection")
	t.Cleanup(func() { peer.Close() })

	hl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer hl.Close()
	other, err := net.DialTCP("tcp", nil, hl.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	host, err := hl.AcceptTCP()
	require.NoError(t, err)
	t.Cleanup(func() { host.Close() })
	return spliced{c: c, peer: peer, other: other, host: host}
}

// waitDone fails unless done is closed within a generous bound.
func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the relay did not end", what)
	}
}

// TestSpliceAsync relays a host socket (parked when idle) and another conn
// (copied) with SpliceAsync: each carries a transfer each way,
// byte-exact, with the half-closes, and done is closed once both ends
// have closed.
func TestSpliceAsync(t *testing.T) {
	e := newEnv(t, funcs{}, nil)
	size := int64(1 << 20)
	for _, generic := range []bool{false, true} {
		sp := openSpliced(t, e)
		var other net.Conn = sp.other
		if generic {
			other = proxied{sp.other}
		}
		done, err := SpliceAsync(sp.c, other)
		require.NoError(t, err)
		_, err = xfer.Exchange(sp.peer, sp.host, size, xfer.Timeout(size))
		require.NoError(t, err, "generic %v", generic)
		sp.peer.Close()
		sp.host.Close()
		waitDone(t, done, "after both ends closed")
		require.Zero(t, e.fw.Stats().TCPFlows)
	}
	st := e.fw.Stats()
	require.Equal(t, uint64(2*size), st.TCPBytesUp)
	require.Equal(t, uint64(2*size), st.TCPBytesDown)
	require.Zero(t, st.TCPResets)
}

// TestSpliceAsyncClose checks that the Forwarder owns what SpliceAsync
// started: Close ends idle flows of either kind, with resets where the
// conns can carry them, and SpliceAsync after Close, or with a conn that is not the
// Forwarder's, resets both conns and says so.
func TestSpliceAsyncClose(t *testing.T) {
	e := newEnv(t, funcs{}, nil)
	var sps []spliced
	var dones []<-chan struct{}
	for _, generic := range []bool{false, true} {
		sp := openSpliced(t, e)
		var other net.Conn = sp.other
		if generic {
			other = proxied{sp.other}
		}
		done, err := SpliceAsync(sp.c, other)
		require.NoError(t, err)
		// One exchange, so that the relay is up before Close.
		_, err = sp.host.Write([]byte("x"))
		require.NoError(t, err)
		_, err = io.ReadFull(sp.peer, make([]byte, 1))
		require.NoError(t, err)
		sps = append(sps, sp)
		dones = append(dones, done)
	}
	late := openSpliced(t, e)
	require.NoError(t, e.fw.Close())
	for i, sp := range sps {
		waitDone(t, dones[i], "after Close")
		sp.peer.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := sp.peer.Read(make([]byte, 1))
		require.ErrorContains(t, err, "reset", "peer %d", i)
		sp.host.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = sp.host.Read(make([]byte, 1))
		if i == 0 {
			require.ErrorContains(t, err, "reset", "host %d", i)
		} else {
			// A conn other than a host socket is closed, not reset
			// (a proxy's cannot carry a reset).
			require.ErrorIs(t, err, io.EOF, "host %d", i)
		}
	}
	require.Zero(t, e.fw.Stats().TCPFlows)

	_, err := SpliceAsync(late.c, proxied{late.other})
	require.ErrorContains(t, err, "Forwarder is closed")
	_, err = late.other.Write([]byte("x"))
	require.ErrorIs(t, err, net.ErrClosed, "SpliceAsync closed the conn it refused")

	a, b := net.Pipe()
	_, err = SpliceAsync(a, b)
	require.ErrorContains(t, err, "not a conn of a Forwarder's")
	_, err = b.Write([]byte("x"))
	require.ErrorIs(t, err, io.ErrClosedPipe, "SpliceAsync closed the conns it refused")
}

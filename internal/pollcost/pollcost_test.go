package pollcost

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	a := <-accepted
	require.NotNil(t, a)
	return d.(*net.TCPConn), a.(*net.TCPConn)
}

// modes are the modes this platform runs.
func modes() []Mode {
	if runtime.GOOS == "linux" {
		return []Mode{ModePoller, ModeLoop}
	}
	return []Mode{ModePoller}
}

// TestRelayBytesAndHalfClose: both directions arrive byte for byte,
// through destinations that fill (small socket buffers, and a server that
// starts reading late), and the client's half-close reaches the server
// while the server's answer has yet to flow the other way; Relay then
// returns without error, having closed its connections, and leaves no
// goroutine behind.
func TestRelayBytesAndHalfClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, m := range modes() {
		t.Run(string(m), func(t *testing.T) {
			client, relayA := pair(t)
			relayB, server := pair(t)
			// The relay's writes towards the server fill at once.
			require.NoError(t, relayB.SetWriteBuffer(16<<10))
			require.NoError(t, server.SetReadBuffer(16<<10))
			require.NoError(t, relayA.SetWriteBuffer(16<<10))
			require.NoError(t, client.SetReadBuffer(16<<10))
			done := make(chan error, 1)
			go func() { done <- Relay(relayA, relayB, m) }()

			up := make([]byte, 4<<20)
			down := make([]byte, 4<<20)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range up {
				up[i], down[i] = byte(rng.Uint32()), byte(rng.Uint32())
			}
			// A relay that loses a half-close or bytes fails the test at
			// the deadline instead of hanging it.
			deadline := time.Now().Add(20 * time.Second)
			client.SetDeadline(deadline)
			server.SetDeadline(deadline)
			wrote := sendAndClose(client, up)
			// The server reads late, and up to the client's half-close
			// before it answers: the relay must pass the FIN on while
			// its other direction is still open.
			time.Sleep(100 * time.Millisecond)
			got, err := io.ReadAll(server)
			require.NoError(t, err)
			require.True(t, bytes.Equal(got, up), "client to server: %d bytes arrived of %d", len(got), len(up))
			require.NoError(t, <-wrote)
			answered := sendAndClose(server, down)
			time.Sleep(100 * time.Millisecond)
			got, err = io.ReadAll(client)
			require.NoError(t, err)
			require.True(t, bytes.Equal(got, down), "server to client: %d bytes arrived of %d", len(got), len(down))
			require.NoError(t, <-answered)
			require.NoError(t, <-done)
			client.Close()
			server.Close()
		})
	}
}

// sendAndClose writes b to c and then half-closes it, in a goroutine
// whose outcome the returned channel carries.
func sendAndClose(c *net.TCPConn, b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(b)
		if err == nil {
			err = c.CloseWrite()
		}
		done <- err
	}()
	return done
}

// TestRelayReset: a reset on one side ends the relay with an error, and
// the relay closes the other side.
func TestRelayReset(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, m := range modes() {
		t.Run(string(m), func(t *testing.T) {
			client, relayA := pair(t)
			relayB, server := pair(t)
			done := make(chan error, 1)
			go func() { done <- Relay(relayA, relayB, m) }()
			require.NoError(t, client.SetLinger(0))
			require.NoError(t, client.Close()) // a reset towards the relay
			require.Error(t, <-done)
			// The relay closed its side towards the server.
			server.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err := io.ReadAll(server)
			require.NoError(t, err)
			server.Close()
		})
	}
}

// TestParseMode: the modes by name, and a clear error otherwise.
func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModePoller, ModeLoop} {
		got, err := ParseMode(string(m))
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := ParseMode("select")
	require.ErrorContains(t, err, `unknown mode "select"`)
}

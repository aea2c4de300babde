package xfer_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/internal/xfer"
)

// TestEchoPackets: each datagram comes back whole to its sender, and
// closing the socket ends the echo with net.ErrClosed.
func TestEchoPackets(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- xfer.EchoPackets(pc) }()
	c, err := net.Dial("udp", pc.LocalAddr().String())
	require.NoError(t, err)
	defer c.Close()
	buf := make([]byte, 1<<16)
	for _, size := range []int{0, 1, 1472, 9000} {
		msg := make([]byte, size)
		for i := range msg {
			msg[i] = byte(i * 7)
		}
		_, err := c.Write(msg)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		n, err := c.Read(buf)
		require.NoError(t, err)
		require.Equal(t, msg, buf[:n], "%d bytes", size)
	}
	pc.Close()
	require.ErrorIs(t, <-done, net.ErrClosed)
}

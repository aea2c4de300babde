package flowload

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestOpenServeIdle opens flows to Serve: each is established and echoed,
// and neither end sends keepalive probes (an idle flow sends nothing).
func TestOpenServeIdle(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan net.Conn, 4)
	served := make(chan struct{})
	go func() {
		defer close(served)
		Serve(&spyListener{Listener: ln, accepted: accepted})
	}()
	conns, _, err := Open(context.Background(), ln.Addr().String(), 4, 2)
	require.NoError(t, err)
	require.Len(t, conns, 4)
	for _, c := range conns {
		require.False(t, keepAlive(t, c), "client side")
		require.False(t, keepAlive(t, <-accepted), "server side")
	}
	Close(conns)
	ln.Close()
	<-served
}

// spyListener passes on what it accepts.
type spyListener struct {
	net.Listener
	accepted chan net.Conn
}

func (l *spyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted <- c
	}
	return c, err
}

// keepAlive reports whether c's socket has SO_KEEPALIVE on.
func keepAlive(t *testing.T, c net.Conn) bool {
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var v int
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) {
		v, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
	}))
	require.NoError(t, serr)
	return v != 0
}
